#!/usr/bin/env bash
# Makes what rllm's envs need on this machine with the package's own command, the one way to
# build it (the Docker engine is started by scripts/services.sh before this runs): the sandbox
# rootfs and image, the SWE images, the browser check. Cached: seconds when all is up to date.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
rllm_envs="$repo_root/.venv/bin/rllm-envs"
[ -x "$rllm_envs" ] || rllm_envs="rllm-envs"
exec "$rllm_envs" setup all
