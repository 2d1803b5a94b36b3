"""Which verl (and friends) the verl backend was verified with, and a clear error otherwise.

verl moves modules between minor releases (the agent-loop API lives under ``experimental``), so
the backend accepts exactly the versions it was checked against instead of failing deep inside
a Ray worker with an ``ImportError`` or an unknown config key.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import metadata

from rllm_train.config import ConfigError

SUPPORTED_VERL_VERSIONS: tuple[str, ...] = ("0.9.1",)
# Importable module -> distribution that provides it, for the error message.
REQUIRED_FOR_TRAINING: dict[str, str] = {
    "ray": "ray[default]",
    "cachetools": "cachetools",
    "fastapi": "fastapi",
    "uvicorn": "uvicorn",
}
INSTALL_HINT = "pip install 'rllm-train[verl]'"


class VerlUnavailableError(ConfigError):
    """verl is missing, has an unsupported version, or lacks a dependency of its trainer.

    A :class:`~rllm_train.config.ConfigError`: ``rllm-train`` prints it (with the ``pip install``
    to run) and exits with status 2 instead of a traceback from deep inside verl.
    """


@dataclass(frozen=True)
class VerlStatus:
    version: str | None
    missing: tuple[str, ...]  # distributions the trainer needs that are not installed

    @property
    def supported(self) -> bool:
        return self.version in SUPPORTED_VERL_VERSIONS


def _installed_version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _importable(module: str) -> bool:
    from importlib.util import find_spec

    return find_spec(module) is not None


def verl_status() -> VerlStatus:
    missing = tuple(
        dist for module, dist in REQUIRED_FOR_TRAINING.items() if not _importable(module)
    )
    return VerlStatus(version=_installed_version("verl"), missing=missing)


def require_verl(*, for_training: bool = True) -> VerlStatus:
    """Raise :class:`VerlUnavailableError` unless a supported verl (and its trainer deps) is installed.

    ``for_training=False`` checks verl itself only: composing and validating a config needs
    verl's config classes but not Ray's server parts.
    """
    return check_status(verl_status(), for_training=for_training)


def check_status(status: VerlStatus, *, for_training: bool = True) -> VerlStatus:
    supported = ", ".join(SUPPORTED_VERL_VERSIONS)
    if status.version is None:
        raise VerlUnavailableError(
            f"the verl backend needs verl {supported}, which is not installed: {INSTALL_HINT}"
        )
    if not status.supported:
        raise VerlUnavailableError(
            f"the verl backend was verified with verl {supported} but verl {status.version} is "
            f"installed; its agent-loop and config modules differ between releases. "
            f"Install the verified version: {INSTALL_HINT}"
        )
    if for_training and status.missing:
        raise VerlUnavailableError(
            f"verl's trainer needs {', '.join(status.missing)}, not installed: {INSTALL_HINT}"
        )
    return status
