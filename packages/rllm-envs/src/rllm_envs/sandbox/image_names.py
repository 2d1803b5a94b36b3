"""The names of the Docker images the sandboxes run, read where they are used.

``rllm-envs setup`` builds images under these names and the envs look for them under the same
names, so both read them here: the built-in defaults, or the environment variables that rename
them (a test or a second installation can keep its images apart under fresh tags).

``RLLM_SANDBOX_IMAGE``  the image rllm/Code-v0's ``docker`` backend runs (``rllm-sandbox:1``)
``RLLM_ROOTFS_IMAGE``   the Debian rootfs imported from debootstrap, which the sandbox image
                        (where no registry is reachable) and the SWE images are built on
"""

from __future__ import annotations

import os

SANDBOX_IMAGE_VARIABLE = "RLLM_SANDBOX_IMAGE"
DEFAULT_SANDBOX_IMAGE = "rllm-sandbox:1"
ROOTFS_IMAGE_VARIABLE = "RLLM_ROOTFS_IMAGE"
DEFAULT_ROOTFS_IMAGE = "rllm-sandbox-rootfs:bookworm"


def sandbox_image() -> str:
    """The sandbox image's name on this machine (read at call time, not at import)."""
    return os.environ.get(SANDBOX_IMAGE_VARIABLE) or DEFAULT_SANDBOX_IMAGE


def rootfs_image() -> str:
    """The debootstrap rootfs image's name on this machine."""
    return os.environ.get(ROOTFS_IMAGE_VARIABLE) or DEFAULT_ROOTFS_IMAGE
