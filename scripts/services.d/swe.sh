#!/usr/bin/env bash
# Builds rllm/SWE-v0's project images when missing or out of date (the Docker engine is started
# by scripts/services.sh before this runs; the sandbox rootfs by services.d/sandbox.sh).
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bash "$repo_root/scripts/build_swe_images.sh"
