#!/bin/bash
# Oracle for rllm/edit-json-config: the file's layout is known, so targeted sed edits do.
sed -i \
  -e 's/"port": 8080,/"port": 9090,/' \
  -e 's/"workers": 2$/"workers": 2,\n    "timeout_sec": 30/' \
  -e 's/"level": "debug"/"level": "warn"/' \
  -e 's/"metrics": false/"metrics": true/' \
  /app/config.json
cat /app/config.json
