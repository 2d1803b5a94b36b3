#!/usr/bin/env bash
# Builds the Docker image of rllm's code sandbox (rllm/Code-v0, docker backend) unless it exists.
# Where a registry is reachable the image is built on the official Python image; elsewhere (CI
# here: no registry) on a minimal Debian rootfs made with debootstrap and imported into Docker.
# Usage: build_sandbox_image.sh [--force]   (RLLM_SANDBOX_IMAGE overrides the tag)
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
image="${RLLM_SANDBOX_IMAGE:-rllm-sandbox:1}"
rootfs_image="rllm-sandbox-rootfs:bookworm"
context="$repo_root/packages/rllm-envs/src/rllm_envs/sandbox"
mirror="${RLLM_DEBIAN_MIRROR:-http://deb.debian.org/debian}"

if [ "${1:-}" != "--force" ] && docker image inspect "$image" >/dev/null 2>&1; then
    echo "sandbox image: $image present"
    exit 0
fi

base=""
if timeout 15 docker pull -q python:3.11-slim-bookworm >/dev/null 2>&1; then
    base="python:3.11-slim-bookworm"
else
    if ! docker image inspect "$rootfs_image" >/dev/null 2>&1; then
        command -v debootstrap >/dev/null || {
            echo "sandbox image: no registry reachable and debootstrap missing (apt-get install debootstrap)" >&2
            exit 1
        }
        rootfs="$(mktemp -d)"
        trap 'rm -rf "$rootfs"' EXIT
        echo "sandbox image: no registry; building a Debian rootfs with debootstrap"
        debootstrap --variant=minbase --include=python3 bookworm "$rootfs" "$mirror" >/dev/null
        # Package caches and docs are not needed to run code and only slow the import down.
        rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* \
            "$rootfs"/usr/share/doc "$rootfs"/usr/share/man "$rootfs"/usr/share/locale
        tar -C "$rootfs" -c . | docker import - "$rootfs_image" >/dev/null
    fi
    base="$rootfs_image"
fi
DOCKER_BUILDKIT=0 docker build -q --build-arg "BASE=$base" -t "$image" "$context" >/dev/null
echo "sandbox image: built $image on $base"
