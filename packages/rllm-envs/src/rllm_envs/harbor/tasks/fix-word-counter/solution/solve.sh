#!/bin/bash
# Oracle for rllm/fix-word-counter: start counting at 0, keep a last line that has no
# trailing newline, and split lines into words without glob expansion.
cat > /app/count_words.sh <<'SCRIPT'
#!/bin/bash
# count_words.sh FILE
# Prints the number of words in FILE. A word is a run of characters other than
# spaces, tabs and newlines (the same thing `wc -w` counts).

file="$1"
if [ ! -f "$file" ]; then
  echo "usage: count_words.sh FILE" >&2
  exit 2
fi

count=0
while IFS= read -r line || [ -n "$line" ]; do
  read -r -a words <<< "$line"
  count=$((count + ${#words[@]}))
done < "$file"

echo "$count"
SCRIPT
