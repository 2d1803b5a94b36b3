#!/bin/bash
# Verifier for rllm/replace-deprecated-call (partial credit). For each script in
# tests/expected.tsv (name, legacy_fetch calls, legacy_fetch_count uses, expected output):
#   - no call of legacy_fetch is left, and there is one fetch_item per former call;
#   - legacy_fetch_count is still used as often as before;
#   - run next to the shipped lib.sh (a pristine copy in tests/), it prints the expected line.
# reward = scripts passing / scripts. {"reward": 0} is written first, so a reward is always
# there; the real one replaces it at the end.
mkdir -p /logs/verifier
rm -f /logs/verifier/reward.txt
echo '{"reward": 0}' > /logs/verifier/reward.json

TESTS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
work="$(mktemp -d)"
cp "$TESTS_DIR/lib.sh" "$work/lib.sh"

passed=0
total=0
while IFS=$'\t' read -r name calls count_uses expected; do
  [ -n "$name" ] || continue
  total=$((total + 1))
  script="/app/scripts/$name"
  if [ ! -f "$script" ]; then
    echo "FAIL: $script is missing"
    continue
  fi
  left="$(grep -ow legacy_fetch "$script" | wc -l)"
  new="$(grep -ow fetch_item "$script" | wc -l)"
  kept="$(grep -ow legacy_fetch_count "$script" | wc -l)"
  cp "$script" "$work/$name"
  output="$(cd "$work" && timeout 10 bash "./$name" 2>&1)"
  if [ "$left" -ne 0 ]; then
    echo "FAIL: $name still calls legacy_fetch $left time(s)"
  elif [ "$new" -ne "$calls" ]; then
    echo "FAIL: $name calls fetch_item $new time(s), expected $calls"
  elif [ "$kept" -ne "$count_uses" ]; then
    echo "FAIL: $name uses legacy_fetch_count $kept time(s), expected $count_uses"
  elif [ "$output" != "$expected" ]; then
    echo "FAIL: $name printed '$output', expected '$expected'"
  else
    echo "PASS: $name"
    passed=$((passed + 1))
  fi
done < "$TESTS_DIR/expected.tsv"
rm -rf "$work"

reward="$(awk -v p="$passed" -v t="$total" 'BEGIN { if (t > 0) printf "%.4g", p / t; else print 0 }')"
echo "$passed of $total scripts fixed"

rm -f /logs/verifier/reward.txt
printf '{"reward": %s, "scripts_fixed": %d, "scripts_total": %d}\n' "$reward" "$passed" "$total" > /logs/verifier/reward.json
cat /logs/verifier/reward.json
