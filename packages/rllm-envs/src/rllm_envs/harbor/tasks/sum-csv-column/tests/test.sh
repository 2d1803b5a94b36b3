#!/bin/bash
# Verifier for rllm/sum-csv-column (separate verifier): the agent's /app/total.txt is handed
# to this fresh container as an artifact, at its own path /app/total.txt.
# A reward of 0 is written first, so one is always there; the real one replaces it at the end.
mkdir -p /logs/verifier
rm -f /logs/verifier/reward.json
echo 0 > /logs/verifier/reward.txt

expected="2022.35"
result=/app/total.txt
reward=0
if [ ! -f "$result" ]; then
  echo "FAIL: $result was not handed over (the agent did not write it)"
else
  # One line holding just the number; a missing final newline is tolerated.
  lines="$(grep -c . "$result")"
  got="$(tr -d ' \t\r\n' < "$result")"
  if [ "$lines" -eq 1 ] && [ "$got" = "$expected" ]; then
    echo "PASS: total is $expected"
    reward=1
  else
    echo "FAIL: expected '$expected', $result holds:"
    head -c 200 "$result"
    echo
  fi
fi

rm -f /logs/verifier/reward.json
echo "$reward" > /logs/verifier/reward.txt
echo "reward: $reward"
