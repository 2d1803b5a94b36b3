#!/bin/bash
# Oracle for rllm/configure-service.
mkdir -p /app/logs
cat > /app/service.conf <<'CONF'
# tinysvc settings (see service.sh for what each one means)
PORT=8080
LOG_DIR=/app/logs
MODE=production
CONF
bash /app/service.sh check
