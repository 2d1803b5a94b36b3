#!/bin/bash
# Verifier for rllm/edit-json-config (partial credit).
#   - /app/config.json must be valid JSON (tests/json_leaves.pl parses it into "path<TAB>value"
#     lines) and every setting not named in tests/expected_edits.tsv must be exactly as in
#     tests/expected_others.tsv (nothing changed, added or removed); otherwise the reward is 0;
#   - each line of tests/expected_edits.tsv present exactly once earns an equal share.
# {"reward": 0} is written first, so a reward is always there; the real one replaces it at the end.
mkdir -p /logs/verifier
rm -f /logs/verifier/reward.txt
echo '{"reward": 0}' > /logs/verifier/reward.json

TESTS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export LC_ALL=C
valid=0
others_intact=0
edits_done=0
edits_total="$(grep -c . "$TESTS_DIR/expected_edits.tsv")"

if [ ! -f /app/config.json ]; then
  echo "FAIL: /app/config.json is missing"
elif ! leaves="$(perl "$TESTS_DIR/json_leaves.pl" < /app/config.json)"; then
  echo "FAIL: /app/config.json is not valid JSON"
else
  valid=1
  others="$(printf '%s\n' "$leaves" |
    awk -F'\t' 'NR == FNR { edited[$1] = 1; next } $0 != "" && !($1 in edited)' "$TESTS_DIR/expected_edits.tsv" - | sort)"
  if [ "$others" = "$(cat "$TESTS_DIR/expected_others.tsv")" ]; then
    others_intact=1
    echo "ok: the other settings are unchanged"
  else
    echo "FAIL: settings other than the four requested ones changed:"
    diff "$TESTS_DIR/expected_others.tsv" <(printf '%s\n' "$others") | head -n 20
  fi
  while IFS=$'\t' read -r path value; do
    [ -n "$path" ] || continue
    at_path="$(printf '%s\n' "$leaves" | awk -F'\t' -v p="$path" '$1 == p' )"
    if [ "$at_path" = "$(printf '%s\t%s' "$path" "$value")" ]; then
      echo "ok: $path = $value"
      edits_done=$((edits_done + 1))
    else
      echo "FAIL: $path should be $value, found: ${at_path:-nothing}"
    fi
  done < "$TESTS_DIR/expected_edits.tsv"
fi

reward=0
if [ "$valid" -eq 1 ] && [ "$others_intact" -eq 1 ]; then
  reward="$(awk -v p="$edits_done" -v t="$edits_total" 'BEGIN { if (t > 0) printf "%.4g", p / t; else print 0 }')"
fi
echo "$edits_done of $edits_total edits made (valid JSON: $valid, others intact: $others_intact)"

rm -f /logs/verifier/reward.txt
printf '{"reward": %s, "edits_done": %d, "valid_json": %d, "others_intact": %d}\n' \
  "$reward" "$edits_done" "$valid" "$others_intact" > /logs/verifier/reward.json
cat /logs/verifier/reward.json
