#!/bin/bash
# Oracle for rllm/convert-crlf-to-lf: drop the carriage return before each line feed.
for file in /app/data/*; do
  [ -f "$file" ] || continue
  sed -i 's/\r$//' "$file"
done
