"""Clear errors for optional parts: `rllm-envs` stays light, heavy dependencies are extras."""

from __future__ import annotations

import importlib.util


class MissingExtraError(ImportError):
    """An environment needs a dependency that comes with one of rllm-envs' extras."""


def require_extra(extra: str, *modules: str) -> None:
    """Raise a :class:`MissingExtraError` naming the pip command if a module is missing."""
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        raise MissingExtraError(
            f"this environment needs {', '.join(missing)}, which comes with the "
            f"'{extra}' extra: pip install 'rllm-envs[{extra}]'"
        )
