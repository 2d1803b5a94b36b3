#!/bin/bash
# Verifier for rllm/write-motd: /app/motd.txt must equal tests/expected_motd.txt byte for byte.
# A reward of 0 is written first, so one is always there; the real one replaces it at the end.
mkdir -p /logs/verifier
rm -f /logs/verifier/reward.json
echo 0 > /logs/verifier/reward.txt

TESTS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
reward=0
if [ ! -f /app/motd.txt ]; then
  echo "FAIL: /app/motd.txt does not exist"
elif cmp -s /app/motd.txt "$TESTS_DIR/expected_motd.txt"; then
  echo "PASS: /app/motd.txt has the expected contents"
  reward=1
else
  echo "FAIL: /app/motd.txt differs from the expected contents:"
  diff "$TESTS_DIR/expected_motd.txt" /app/motd.txt | head -n 20
fi

rm -f /logs/verifier/reward.json
echo "$reward" > /logs/verifier/reward.txt
echo "reward: $reward"
