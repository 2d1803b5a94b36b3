"""Every script in benchmarks/ is run by a test, or benchmarks/README.md says why it cannot be.

The README promises that the tests check the benchmarks run; a benchmark no test runs breaks
unseen (an import moved, an option renamed) until someone needs its figure. A test runs a
script when it names ``"<script>.py"`` (``run_benchmark("x.py", ...)``, a path to it) or loads it
with ``benchmark_module("<script>")``. The source is scanned, nothing is run.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCHMARKS = REPO / "benchmarks"
# The README section listing the scripts CI cannot run, one "- `name.py`: why" line each.
NOT_RUN_HEADING = "## Not run by the tests"


def scripts_named(source: str) -> set[str]:
    """The benchmark scripts a test's source runs (see the module docstring)."""
    named = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            if node.value.endswith(".py") and "/" not in node.value:
                named.add(node.value[: -len(".py")])
        elif isinstance(node, ast.Call) and getattr(node.func, "id", "") == "benchmark_module":
            first = node.args[0] if node.args else None
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                named.add(first.value)
    return named


def not_run_in_ci(readme: str) -> dict[str, str]:
    """Script -> reason, from the README's section on scripts the tests cannot run."""
    _, found, section = readme.partition(NOT_RUN_HEADING)
    if not found:
        return {}
    section = section.split("\n## ", 1)[0]
    return dict(re.findall(r"^- `(\w+)\.py`: (.+)$", section, flags=re.MULTILINE))


def test_the_scan_sees_both_ways_of_running_a_script():
    source = (
        'run_benchmark("env_overhead.py", "--steps=3")\n'
        'BENCH = ROOT / "benchmarks" / "engine_throughput.py"\n'
        'run_training = benchmark_module("verl_vs_native").run_training\n'
        "config.async_training  # a config key of the same name is not the script\n"
    )
    assert scripts_named(source) == {"env_overhead", "engine_throughput", "verl_vs_native"}
    readme = f"# B\n\n{NOT_RUN_HEADING}\n\n- `gpu_only.py`: needs a GPU\n\n## Next\n- `x.py`: no"
    assert not_run_in_ci(readme) == {"gpu_only": "needs a GPU"}


def test_every_benchmark_is_run_by_a_test_or_the_readme_says_why_not():
    scripts = {path.stem for path in BENCHMARKS.glob("*.py")}
    assert len(scripts) >= 19
    run = set()
    for path in (REPO / "tests").rglob("*.py"):
        if path.resolve() != Path(__file__).resolve():
            run |= scripts_named(path.read_text(encoding="utf-8"))
    excused = not_run_in_ci((BENCHMARKS / "README.md").read_text(encoding="utf-8"))
    assert sorted(set(excused) - scripts) == [], "the README excuses scripts that do not exist"
    missing = sorted(scripts - run - set(excused))
    assert missing == [], (
        f"no test runs benchmarks/{{{','.join(missing)}}}.py: add a small run to the tests, or "
        f"say why CI cannot run it under '{NOT_RUN_HEADING}' in benchmarks/README.md"
    )
