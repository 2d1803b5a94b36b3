"""Running a script of `benchmarks/` from a test, as a user would (its timings are not asserted)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]


def run_benchmark(script: str, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run `benchmarks/<script>` with the test's interpreter; fail with its output if it fails."""
    result = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-4000:]
    return result


def benchmark_module(name: str) -> ModuleType:
    """`benchmarks/<name>.py` as a module, without putting that folder on sys.path (registered
    under its name: dataclasses look their module up there)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
