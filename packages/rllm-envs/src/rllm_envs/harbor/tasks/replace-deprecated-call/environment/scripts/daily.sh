#!/bin/bash
# Daily summary: orders and refunds.
source "$(dirname "$0")/lib.sh"

orders=$(legacy_fetch orders)
refunds=$(legacy_fetch refunds)
require_number "$orders"
require_number "$refunds"
echo "daily: orders=$orders refunds=$refunds net=$((orders - refunds))"
