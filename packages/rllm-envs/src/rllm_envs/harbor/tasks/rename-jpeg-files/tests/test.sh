#!/bin/bash
# Verifier for rllm/rename-jpeg-files: the files under /app/photos must be exactly the ones in
# tests/expected_md5.txt (the .jpeg files renamed to .jpg), with unchanged contents.
# A reward of 0 is written first, so one is always there; the real one replaces it at the end.
mkdir -p /logs/verifier
rm -f /logs/verifier/reward.json
echo 0 > /logs/verifier/reward.txt

TESTS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export LC_ALL=C
reward=0
if [ ! -d /app/photos ]; then
  echo "FAIL: /app/photos is missing"
else
  expected_names="$(sed 's/^[0-9a-f]*  //' "$TESTS_DIR/expected_md5.txt" | sort)"
  actual_names="$(cd /app/photos && find . ! -type d | sed 's|^\./||' | sort)"
  if [ "$expected_names" != "$actual_names" ]; then
    echo "FAIL: the files under /app/photos are not the expected ones:"
    diff <(printf '%s\n' "$expected_names") <(printf '%s\n' "$actual_names") | head -n 40
  elif ! (cd /app/photos && md5sum -c --quiet "$TESTS_DIR/expected_md5.txt"); then
    echo "FAIL: some file contents changed"
  else
    echo "PASS: every .jpeg file was renamed to .jpg and nothing else changed"
    reward=1
  fi
fi

rm -f /logs/verifier/reward.json
echo "$reward" > /logs/verifier/reward.txt
echo "reward: $reward"
