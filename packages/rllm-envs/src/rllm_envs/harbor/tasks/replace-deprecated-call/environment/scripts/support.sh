#!/bin/bash
# Support summary: open tickets per refund.
source "$(dirname "$0")/lib.sh"

tickets=$(legacy_fetch tickets)
require_number "$tickets"
refunds=$(legacy_fetch   refunds)
require_number "$refunds"
echo "support: tickets=$tickets refunds=$refunds"
