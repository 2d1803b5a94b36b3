#!/usr/bin/env bash
# Sets everything up and runs the main job. Extra arguments go to the main job.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
bash scripts/setup.sh
# shellcheck disable=SC1091
source .venv/bin/activate
# With no arguments: the embedded default (SmolLM2-135M-Instruct learning a small task on CPU).
exec rllm-train "$@"
