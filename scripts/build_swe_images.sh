#!/usr/bin/env bash
# Builds rllm/SWE-v0's project images (rllm-swe/base:1 and rllm-swe/<repo>:<version>) on the
# sandbox's debootstrap rootfs. Sdists, wheels and git's Debian packages are downloaded on the
# host, checked against their pinned sha256, and installed offline in `docker build`. Images are
# cached by recipe hash: a second run takes a second.
# Usage: build_swe_images.sh [project ...] [--nocache]   (RLLM_SWE_CACHE: download cache)
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
python="${RLLM_PYTHON:-$repo_root/.venv/bin/python}"
[ -x "$python" ] || python="python3"
bash "$repo_root/scripts/build_sandbox_image.sh"
exec "$python" -m rllm_envs.swe.builder images "$@"
