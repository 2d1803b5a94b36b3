#!/bin/bash
# Oracle for rllm/replace-deprecated-call: rename whole-word legacy_fetch only, so that
# legacy_fetch_count keeps its name.
for name in daily weekly support totals; do
  sed -i 's/\blegacy_fetch\b/fetch_item/g' "/app/scripts/$name.sh"
  bash "/app/scripts/$name.sh"
done
