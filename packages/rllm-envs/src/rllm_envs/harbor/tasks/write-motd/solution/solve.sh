#!/bin/bash
# Oracle for rllm/write-motd.
cat > /app/motd.txt <<'MOTD'
Welcome to build-host-7
Maintenance window: Sundays 02:00-04:00 UTC
Contact: ops@example.internal
MOTD
