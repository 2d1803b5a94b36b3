#!/bin/bash
# Verifier for rllm/convert-crlf-to-lf: every file in /app/data must equal its LF-only
# version in tests/expected/, and no other file may be there.
# A reward of 0 is written first, so one is always there; the real one replaces it at the end.
mkdir -p /logs/verifier
rm -f /logs/verifier/reward.json
echo 0 > /logs/verifier/reward.txt

TESTS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export LC_ALL=C
ok=1
fail() {
  echo "FAIL: $*"
  ok=0
}

if [ ! -d /app/data ]; then
  fail "/app/data is missing"
else
  expected_names="$(cd "$TESTS_DIR/expected" && find . ! -type d | sort)"
  actual_names="$(cd /app/data && find . ! -type d | sort)"
  [ "$expected_names" = "$actual_names" ] || fail "the files in /app/data are not the expected ones: $(printf '%s ' $actual_names)"
  for expected in "$TESTS_DIR"/expected/*; do
    name="$(basename "$expected")"
    actual="/app/data/$name"
    if [ ! -f "$actual" ]; then
      fail "$actual is missing"
    elif grep -q $'\r' "$actual"; then
      fail "$actual still contains carriage returns"
    elif ! cmp -s "$expected" "$actual"; then
      fail "$actual has the right line endings but its contents changed"
    else
      echo "ok: $actual"
    fi
  done
fi

reward=0
if [ "$ok" -eq 1 ]; then
  echo "PASS: every file in /app/data uses LF line endings"
  reward=1
fi

rm -f /logs/verifier/reward.json
echo "$reward" > /logs/verifier/reward.txt
echo "reward: $reward"
