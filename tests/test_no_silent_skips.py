"""No test skips silently for a package CI installs.

``pytest.importorskip("peft")`` skips wherever peft is missing, CI included: a broken install
would pass unseen. Tests use :func:`tests.parts.require_module` instead (skip locally, fail
under ``CI=true``). ``importorskip`` is allowed only for the modules below, which CI does not
install on purpose. The source is scanned, nothing is imported.
"""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent
# Modules CI does not install (scripts/setup.sh), so a skip there hides nothing, with why.
# None today: CI installs every package a test imports (vLLM as its CPU build).
NOT_INSTALLED_BY_CI: dict[str, str] = {}


def importorskips(source: str) -> list[tuple[int, str]]:
    """(line, module) of every ``importorskip(...)`` call; the module "?" when not a literal."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        function = node.func
        name = function.attr if isinstance(function, ast.Attribute) else getattr(function, "id", "")
        if name != "importorskip":
            continue
        first = node.args[0] if node.args else None
        module = first.value if isinstance(first, ast.Constant) else "?"
        found.append((node.lineno, str(module)))
    return found


def test_the_scan_finds_an_importorskip_in_any_spelling():
    source = (
        "import pytest\nfrom pytest import importorskip\n"
        "peft = pytest.importorskip('peft')\nimportorskip(name)\n"
    )
    assert importorskips(source) == [(3, "peft"), (4, "?")]


def test_no_importorskip_for_a_package_ci_installs():
    files = sorted(TESTS.rglob("*.py"))
    assert len(files) > 50
    found = [
        f"{path.relative_to(TESTS.parent)}:{line}: importorskip({module!r})"
        for path in files
        for line, module in importorskips(path.read_text(encoding="utf-8"))
        if module not in NOT_INSTALLED_BY_CI
    ]
    assert found == [], (
        "use tests.parts.require_module (fails under CI) for packages CI installs:\n"
        + "\n".join(found)
    )
