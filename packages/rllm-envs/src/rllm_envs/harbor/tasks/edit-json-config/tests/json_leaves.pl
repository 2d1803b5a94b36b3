#!/usr/bin/perl
# json_leaves.pl: reads one JSON document on stdin and prints one line per scalar in it,
# "PATH<TAB>RAW", where PATH joins object keys with "." and array indexes as "[N]", and RAW
# is the scalar exactly as written in the JSON text (strings keep their quotes and escapes).
# Exits 1, printing where, when the input is not valid JSON. Uses only perl-base.
use strict;
use warnings;

my $text = do { local $/; <STDIN> };
$text = '' unless defined $text;
my @leaves;

sub invalid {
    my ($what) = @_;
    my $at = pos($text) // 0;
    print STDERR "invalid JSON at byte $at: $what\n";
    exit 1;
}

sub skip_space { $text =~ /\G[ \t\r\n]*/gc; }

sub string_token {
    return $1 if $text =~ /\G("(?:[^"\\\x00-\x1f]|\\["\\\/bfnrt]|\\u[0-9a-fA-F]{4})*")/gc;
    return undef;
}

sub parse_value {
    my ($path) = @_;
    skip_space();
    if ($text =~ /\G\{/gc) {
        skip_space();
        return if $text =~ /\G\}/gc;
        while (1) {
            skip_space();
            my $key = string_token();
            invalid("expected a key string") unless defined $key;
            $key = substr($key, 1, -1);
            skip_space();
            invalid("expected ':'") unless $text =~ /\G:/gc;
            parse_value($path eq '' ? $key : "$path.$key");
            skip_space();
            next if $text =~ /\G,/gc;
            last if $text =~ /\G\}/gc;
            invalid("expected ',' or '}'");
        }
        return;
    }
    if ($text =~ /\G\[/gc) {
        skip_space();
        return if $text =~ /\G\]/gc;
        my $index = 0;
        while (1) {
            parse_value("$path\[$index\]");
            $index++;
            skip_space();
            next if $text =~ /\G,/gc;
            last if $text =~ /\G\]/gc;
            invalid("expected ',' or ']'");
        }
        return;
    }
    my $token = string_token();
    if (!defined $token) {
        if ($text =~ /\G(-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?|true|false|null)/gc) {
            $token = $1;
        } else {
            invalid("expected a value");
        }
    }
    push @leaves, "$path\t$token";
}

parse_value('');
skip_space();
invalid("unexpected text after the document") if pos($text) != length($text);
print "$_\n" for @leaves;
