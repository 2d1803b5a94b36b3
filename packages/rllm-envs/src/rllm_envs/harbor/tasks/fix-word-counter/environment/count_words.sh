#!/bin/bash
# count_words.sh FILE
# Prints the number of words in FILE. A word is a run of characters other than
# spaces, tabs and newlines (the same thing `wc -w` counts).

file="$1"
if [ ! -f "$file" ]; then
  echo "usage: count_words.sh FILE" >&2
  exit 2
fi

count=1
while read -r line; do
  for word in $line; do
    count=$((count + 1))
  done
done < "$file"

echo "$count"
