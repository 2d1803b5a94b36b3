#!/bin/bash
# Oracle for rllm/extract-error-codes: codes from the level column "ERROR" only.
awk '$2 == "ERROR" {
  for (i = 3; i <= NF; i++)
    if ($i ~ /^code=E[0-9][0-9][0-9][0-9]$/) print substr($i, 6)
}' /app/logs/app.log | LC_ALL=C sort -u > /app/error_codes.txt
cat /app/error_codes.txt
