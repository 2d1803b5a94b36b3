#!/bin/bash
# Verifier for rllm/configure-service: the settings in /app/service.conf must be the
# requested ones, and the health check must pass, both with the service script the task
# shipped (a pristine copy in tests/) and with /app/service.sh.
# A reward of 0 is written first, so one is always there; the real one replaces it at the end.
mkdir -p /logs/verifier
rm -f /logs/verifier/reward.json
echo 0 > /logs/verifier/reward.txt

TESTS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ok=1
fail() {
  echo "FAIL: $*"
  ok=0
}

# The value a key ends up with: the last KEY=VALUE line for it, spaces trimmed.
setting() {
  sed -e 's/\r$//' /app/service.conf 2>/dev/null | awk -v want="$1" '
    /^[[:space:]]*#/ || !/=/ { next }
    {
      key = $0; sub(/=.*/, "", key); gsub(/^[ \t]+|[ \t]+$/, "", key)
      value = $0; sub(/^[^=]*=/, "", value); gsub(/^[ \t]+|[ \t]+$/, "", value)
      if (key == want) { found = value }
    }
    END { print found }'
}

if [ ! -f /app/service.conf ]; then
  fail "/app/service.conf does not exist"
else
  [ "$(setting PORT)" = "8080" ] || fail "PORT is '$(setting PORT)', expected 8080"
  [ "$(setting LOG_DIR)" = "/app/logs" ] || fail "LOG_DIR is '$(setting LOG_DIR)', expected /app/logs"
  [ "$(setting MODE)" = "production" ] || fail "MODE is '$(setting MODE)', expected production"
fi
[ -d /app/logs ] || fail "/app/logs is not a directory"

shipped="$(cd /app && SERVICE_CONF=/app/service.conf timeout 10 bash "$TESTS_DIR/service.sh" check 2>&1)"
[ "$shipped" = "healthy" ] || fail "the shipped service.sh says: $shipped"

if [ -f /app/service.sh ]; then
  own="$(cd /app && timeout 10 bash /app/service.sh check 2>&1)"
  [ "$own" = "healthy" ] || fail "/app/service.sh check says: $own"
else
  fail "/app/service.sh is missing"
fi

reward=0
if [ "$ok" -eq 1 ]; then
  echo "PASS: the service is configured and healthy"
  reward=1
fi

rm -f /logs/verifier/reward.json
echo "$reward" > /logs/verifier/reward.txt
echo "reward: $reward"
