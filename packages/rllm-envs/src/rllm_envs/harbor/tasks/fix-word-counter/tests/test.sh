#!/bin/bash
# Verifier for rllm/fix-word-counter: runs /app/count_words.sh on every file in tests/cases/
# and compares its output with the word counts in tests/expected_counts.txt.
# A reward of 0 is written first, so one is always there; the real one replaces it at the end.
mkdir -p /logs/verifier
rm -f /logs/verifier/reward.json
echo 0 > /logs/verifier/reward.txt

TESTS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
passed=0
total=0
while read -r name expected; do
  [ -n "$name" ] || continue
  total=$((total + 1))
  if [ ! -f /app/count_words.sh ]; then
    echo "FAIL: /app/count_words.sh does not exist"
    continue
  fi
  output="$(cd /app && timeout 10 bash /app/count_words.sh "$TESTS_DIR/cases/$name" 2>/dev/null)"
  # The only thing printed must be the number (surrounding whitespace is tolerated).
  got="$(printf '%s' "$output" | tr -d ' \t\n')"
  if [ "$got" = "$expected" ] && [ "$(printf '%s\n' "$output" | grep -c .)" -eq 1 ]; then
    echo "PASS: $name -> $expected"
    passed=$((passed + 1))
  else
    echo "FAIL: $name: expected $expected, got '$output'"
  fi
done < "$TESTS_DIR/expected_counts.txt"

reward=0
if [ "$total" -gt 0 ] && [ "$passed" -eq "$total" ]; then
  reward=1
fi
echo "$passed of $total cases passed"

rm -f /logs/verifier/reward.json
echo "$reward" > /logs/verifier/reward.txt
echo "reward: $reward"
