"""Stage ``bubblewrap``: rllm/Code-v0's default backend, ``bwrap``, can run here.

Nothing to build: bubblewrap and the system Python are Debian packages, which this command does
not install; the stage checks them, as the backend does, and names the package when one lacks.
"""

from __future__ import annotations

import shutil

from rllm_envs.sandbox.bwrap import SYSTEM_PYTHON, MissingEngineError, check_engine
from rllm_envs.setup.base import SetupError, SetupRun, Stage, StageProgress


def check_bubblewrap(run: SetupRun, progress: StageProgress) -> str:
    try:
        check_engine()
    except MissingEngineError as error:
        raise SetupError(f"{error} (or use backend='docker')") from error
    return f"{shutil.which('bwrap')} with {SYSTEM_PYTHON}"


STAGE = Stage("bubblewrap", "bubblewrap (rllm/Code-v0, default backend)", check_bubblewrap)
