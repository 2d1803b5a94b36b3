"""Clear errors for optional parts: `rllm-envs` stays light, heavy dependencies are extras."""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from types import MappingProxyType

# The modules each extra of packages/rllm-envs/pyproject.toml brings (import names), as
# ``rllm-envs doctor`` checks them.
EXTRA_MODULES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "math": ("math_verify",),
        "datasets": ("datasets",),
        "code": ("docker", "pyseccomp"),
        "swe": ("docker",),
        "web": ("playwright",),
        "mcp": ("mcp",),
        "multiagent": ("pygame",),
        "serve": ("aiohttp",),
        "remote": ("websockets",),
        "harbor": ("docker",),
    }
)


class MissingExtraError(ImportError):
    """An environment needs a dependency that comes with one of rllm-envs' extras."""


def missing_modules(*modules: str) -> list[str]:
    """The modules of `modules` that cannot be imported here."""
    return [name for name in modules if importlib.util.find_spec(name) is None]


def require_extra(extra: str, *modules: str) -> None:
    """Raise a :class:`MissingExtraError` naming the pip command if a module is missing."""
    missing = missing_modules(*modules)
    if missing:
        raise MissingExtraError(
            f"this environment needs {', '.join(missing)}, which comes with the "
            f"'{extra}' extra: pip install 'rllm-envs[{extra}]'"
        )
