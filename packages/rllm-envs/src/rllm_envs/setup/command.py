"""The setup command as the envs' errors name it.

An env that misses a part the package can make (an image, a rootfs) says which command makes
it. The command reads the same image names as the envs (see
:mod:`rllm_envs.sandbox.image_names` and :func:`rllm_envs.swe.builder.projects.image_prefix`),
so a flag is added only when the env was given a name the command would not use by itself.
"""

from __future__ import annotations

import shlex

from rllm_envs.sandbox.image_names import sandbox_image as default_sandbox_image

PROG = "rllm-envs"


def setup_command(target: str, *, sandbox_image: str | None = None) -> str:
    """``rllm-envs setup <target>``, with ``--sandbox-image`` when `sandbox_image` is not the
    name the command would build by default."""
    words = [PROG, "setup", target]
    if sandbox_image and sandbox_image != default_sandbox_image():
        words += ["--sandbox-image", sandbox_image]
    return shlex.join(words)
