#!/bin/bash
# Verifier for rllm/fix-script-shebang: /app/bin/report.sh must be readable and executable by
# everyone, start with a working shebang, and print the right summary when run directly.
# A reward of 0 is written first, so one is always there; the real one replaces it at the end.
mkdir -p /logs/verifier
rm -f /logs/verifier/reward.json
echo 0 > /logs/verifier/reward.txt

TESTS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
script=/app/bin/report.sh
expected="lines=4 longest=39"
ok=1
fail() {
  echo "FAIL: $*"
  ok=0
}

if [ ! -f "$script" ]; then
  fail "$script does not exist"
else
  [ -n "$(find "$script" -perm -0555)" ] || fail "$script is not readable and executable by everyone ($(stat -c %A "$script"))"
  first="$(head -n 1 "$script")"
  case "$first" in
    '#!'*)
      interpreter="$(printf '%s' "$first" | sed -e 's/^#![[:space:]]*//' | awk '{ print $1 }')"
      [ -x "$interpreter" ] || fail "the shebang names '$interpreter', which is not an executable"
      ;;
    *) fail "the first line is not a shebang: $first" ;;
  esac
  # Run it directly, the way the instruction asks (execve uses the shebang).
  output="$(cd /tmp && timeout 10 "$script" "$TESTS_DIR/sample.txt" 2>&1)"
  [ "$output" = "$expected" ] || fail "running $script directly printed '$output', expected '$expected'"
fi

reward=0
if [ "$ok" -eq 1 ]; then
  echo "PASS: $script runs and prints '$expected'"
  reward=1
fi

rm -f /logs/verifier/reward.json
echo "$reward" > /logs/verifier/reward.txt
echo "reward: $reward"
