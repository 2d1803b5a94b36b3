#!/bin/bsh
# report.sh FILE
# Prints a one-line summary of a text file: how many lines it has and how long its
# longest line is, e.g. "lines=3 longest=12".

file="$1"
if [ ! -f "$file" ]; then
  echo "usage: report.sh FILE" >&2
  exit 2
fi

lines=$(wc -l < "$file")
longest=$(awk '{ if (length($0) > max) max = length($0) } END { print max + 0 }' "$file")
echo "lines=$lines longest=$longest"
