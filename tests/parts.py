"""Real parts a test needs.

Tests that need a real system part (dockerd, Chromium, an MCP or model server) call
:func:`require_part`: locally a missing part skips the test with the reason; under CI
(``CI=true``) it fails it, because CI installs every part and a silent skip would hide a break.
"""

from __future__ import annotations

import os

import pytest

UNDER_CI = os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def require_part(available: bool, reason: str) -> None:
    """Skip (locally) or fail (under CI) when a real part the test needs is missing."""
    if available:
        return
    if UNDER_CI:
        pytest.fail(f"required part missing under CI: {reason}", pytrace=False)
    pytest.skip(reason)


def require_module(name: str, reason: str):
    """Import `name` for a test module, skipping (locally) or failing (under CI) without it."""
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError as error:
        if UNDER_CI:
            pytest.fail(f"required part missing under CI: {reason} ({error})", pytrace=False)
        pytest.skip(reason, allow_module_level=True)
