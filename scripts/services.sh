#!/usr/bin/env bash
# Starts the system services rllm's sandboxed envs use, when they are not running yet:
# the Docker engine, then what the envs need on it (scripts/services.d/: `rllm-envs setup all`).
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

start_dockerd() {
    if docker info >/dev/null 2>&1; then return 0; fi
    if ! command -v dockerd >/dev/null; then
        echo "services: dockerd not installed (scripts/setup.sh installs docker.io)" >&2
        return 1
    fi
    local data_root="${RLLM_DOCKER_DATA_ROOT:-/var/lib/docker}"
    mkdir -p "$data_root"
    nohup dockerd --data-root "$data_root" >/tmp/rllm-dockerd.log 2>&1 &
    for _ in $(seq 1 60); do
        docker info >/dev/null 2>&1 && return 0
        sleep 0.5
    done
    echo "services: dockerd did not start; see /tmp/rllm-dockerd.log" >&2
    return 1
}

start_dockerd
# Env-specific images and services register here, each in its own script.
for script in scripts/services.d/*.sh; do
    [ -e "$script" ] && bash "$script"
done
echo "services: ready"
