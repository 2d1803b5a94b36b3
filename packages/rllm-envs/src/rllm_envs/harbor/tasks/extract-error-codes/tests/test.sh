#!/bin/bash
# Verifier for rllm/extract-error-codes (separate verifier): the agent's /app/error_codes.txt
# is handed to this fresh container as an artifact, at its own path /app/error_codes.txt, and
# must list exactly the codes in tests/expected_codes.txt, in that order.
# A reward of 0 is written first, so one is always there; the real one replaces it at the end.
mkdir -p /logs/verifier
rm -f /logs/verifier/reward.json
echo 0 > /logs/verifier/reward.txt

TESTS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
result=/app/error_codes.txt
reward=0
if [ ! -f "$result" ]; then
  echo "FAIL: $result was not handed over (the agent did not write it)"
else
  # A missing final newline and CRLF line ends are tolerated; nothing else is.
  if cmp -s "$TESTS_DIR/expected_codes.txt" <(sed -e 's/\r$//' "$result" | awk 1); then
    echo "PASS: $result lists the expected codes"
    reward=1
  else
    echo "FAIL: $result differs from the expected list:"
    diff "$TESTS_DIR/expected_codes.txt" <(sed -e 's/\r$//' "$result" | awk 1) | head -n 20
  fi
fi

rm -f /logs/verifier/reward.json
echo "$reward" > /logs/verifier/reward.txt
echo "reward: $reward"
