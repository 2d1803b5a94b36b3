#!/usr/bin/env bash
# Builds the code sandbox's Docker image when it is missing (the Docker engine is started by
# scripts/services.sh before this runs).
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
bash "$repo_root/scripts/build_sandbox_image.sh"
