#!/bin/bash
# Totals over every counter; the number of counters comes from legacy_fetch_count.
source "$(dirname "$0")/lib.sh"

total=0
for name in orders refunds signups tickets; do
  value=$(legacy_fetch "$name")
  require_number "$value"
  total=$((total + value))
done
echo "totals: sum=$total counters=$(legacy_fetch_count)"
