#!/bin/bash
# Oracle for rllm/rename-jpeg-files.
find /app/photos -type f -name '*.jpeg' -print0 |
  while IFS= read -r -d '' file; do
    mv -- "$file" "${file%.jpeg}.jpg"
  done
