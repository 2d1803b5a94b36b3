#!/bin/bash
# Weekly summary: signups, plus how many counters exist.
source "$(dirname "$0")/lib.sh"

signups=$(legacy_fetch signups)
counters=$(legacy_fetch_count)
require_number "$signups"
require_number "$counters"
echo "weekly: signups=$signups counters=$counters"
