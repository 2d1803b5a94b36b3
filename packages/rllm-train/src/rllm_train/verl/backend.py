"""The verl backend's entry points (:mod:`rllm_train.run.backends`): check, dry run, train.

Importing this module imports neither verl nor Ray: each function does, when called.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rllm_train.run.setup import RunSetup


def check(setup: RunSetup) -> None:
    """The verl run's own checks (placement, algorithm, mode, CPU-mode limits), done before
    the run folder is claimed so a refused run leaves nothing behind."""
    from rllm_train.verl.from_config import spec_from_config
    from rllm_train.verl.spec import validate_spec

    validate_spec(spec_from_config(setup.config, setup))


def dry_run(setup: RunSetup) -> str:
    # verl composes and validates its own trainer config from ours: printing that (and the
    # data layout) checks far more than echoing our config. Without verl installed this
    # raises VerlUnavailableError, a ConfigError that says what to install.
    from rllm_train import verl as verl_backend

    return verl_backend.dry_run(setup)


def train(setup: RunSetup, lock: Any = None) -> list[dict[str, Any]]:
    from rllm_train import verl as verl_backend

    return verl_backend.run(setup)


def resume_logs(setup: RunSetup) -> list[Path]:
    """The logs a resume keeps rows of: verl's, one per attempt, which ``metrics.jsonl`` is
    rebuilt from (rllm_train.verl.metrics_bridge)."""
    from rllm_train.verl.metrics_bridge import ATTEMPTS_FOLDER, attempt_files

    return attempt_files(Path(setup.config.trainer.output) / ATTEMPTS_FOLDER)
