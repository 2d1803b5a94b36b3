#!/bin/bash
# tinysvc: a pretend service, configured by KEY=VALUE lines in a config file
# (default /app/service.conf, or the file named by $SERVICE_CONF).
# Blank lines and lines starting with # are ignored; when a key is set twice the last one wins.
#
# Usage: service.sh check
#   Prints "healthy" and exits 0 when the configuration is usable; otherwise prints
#   "unhealthy: <reason>" for the first problem found and exits 1.
#
# Settings:
#   PORT     TCP port to listen on: a whole number from 1024 to 65535
#   LOG_DIR  absolute path of an existing, writable directory for the log files
#   MODE     one of: production, staging

conf="${SERVICE_CONF:-/app/service.conf}"

PORT=""
LOG_DIR=""
MODE=""

load_config() {
  local line key value
  if [ ! -f "$conf" ]; then
    echo "unhealthy: config file $conf not found"
    exit 1
  fi
  while IFS= read -r line || [ -n "$line" ]; do
    line="${line%$'\r'}"
    case "$line" in
      '' | '#'*) continue ;;
    esac
    if [[ "$line" != *=* ]]; then
      echo "unhealthy: malformed line: $line"
      exit 1
    fi
    key="${line%%=*}"
    value="${line#*=}"
    # Trim spaces around the key and the value.
    key="$(printf '%s' "$key" | sed -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//')"
    value="$(printf '%s' "$value" | sed -e 's/^[[:space:]]*//' -e 's/[[:space:]]*$//')"
    case "$key" in
      PORT) PORT="$value" ;;
      LOG_DIR) LOG_DIR="$value" ;;
      MODE) MODE="$value" ;;
      *)
        echo "unhealthy: unknown setting: $key"
        exit 1
        ;;
    esac
  done < "$conf"
}

check() {
  load_config
  if ! [[ "$PORT" =~ ^[0-9]+$ ]] || [ "$PORT" -lt 1024 ] || [ "$PORT" -gt 65535 ]; then
    echo "unhealthy: PORT must be a number from 1024 to 65535 (got '$PORT')"
    exit 1
  fi
  if [[ "$LOG_DIR" != /* ]]; then
    echo "unhealthy: LOG_DIR must be an absolute path (got '$LOG_DIR')"
    exit 1
  fi
  if [ ! -d "$LOG_DIR" ]; then
    echo "unhealthy: LOG_DIR $LOG_DIR does not exist"
    exit 1
  fi
  if [ ! -w "$LOG_DIR" ]; then
    echo "unhealthy: LOG_DIR $LOG_DIR is not writable"
    exit 1
  fi
  case "$MODE" in
    production | staging) ;;
    *)
      echo "unhealthy: MODE must be production or staging (got '$MODE')"
      exit 1
      ;;
  esac
  echo "healthy"
}

case "${1:-}" in
  check) check ;;
  *)
    echo "usage: service.sh check" >&2
    exit 2
    ;;
esac
