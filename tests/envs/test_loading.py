"""The one "module:attribute" loader: what it loads, the one-line error for each way a name
can be wrong, and that no other module of the packages imports by name on its own."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
from rllm_envs.core.loading import LoadError, load_attr, load_module, plain_env_id, split_spec

PACKAGES = Path(__file__).resolve().parents[2] / "packages"
LOADER = PACKAGES / "rllm-envs/src/rllm_envs/core/loading.py"


def test_modules_files_and_dotted_attributes_load(tmp_path):
    assert load_attr("json:dumps") is json.dumps
    assert load_attr("json:JSONDecoder.decode") is json.JSONDecoder.decode
    agent = tmp_path / "agent.py"
    agent.write_text("class Agent:\n    answer = 42\n")
    by_path = load_attr(f"{agent}:Agent.answer")
    assert by_path == 42
    cls = load_attr("agent.py:Agent", cwd=tmp_path)  # a relative file under `cwd`
    assert cls is load_attr(f"{agent}:Agent")  # the same file is loaded once
    assert load_module("json") is json


@pytest.mark.parametrize(
    "spec, words",
    [
        ("json", "agent 'json': not of the form module:name or path/to/file.py:name"),
        (":dumps", "not of the form"),
        ("json:", "not of the form"),
        ("no_such_module_xyz:Agent", "agent 'no_such_module_xyz:Agent': cannot import "
         "'no_such_module_xyz' (ModuleNotFoundError: No module named 'no_such_module_xyz')"),
        ("json:no_such", "agent 'json:no_such': 'json' has no 'no_such'"),
        ("missing/agent.py:Agent", "agent 'missing/agent.py:Agent': no such file: missing/agent.py"),
    ],
)  # fmt: skip
def test_each_bad_name_is_one_line_naming_what_and_why(spec, words):
    with pytest.raises(LoadError) as caught:
        load_attr(spec, what="agent")
    message = str(caught.value)
    assert words in message and "\n" not in message


def test_a_file_that_fails_to_load_says_why_in_one_line(tmp_path):
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('needs\\na GPU')\n")
    with pytest.raises(LoadError, match=r"cannot load .*broken.py \(RuntimeError: needs a GPU\)$"):
        load_attr(f"{broken}:run", what="--grader")


def test_a_load_error_is_caught_as_an_import_error_and_as_a_value_error():
    # Config checks catch ValueError, import-minded callers ImportError: both keep working.
    for kind in (ImportError, ValueError):
        with pytest.raises(kind):
            load_attr("no_such_module_xyz:Agent")


def test_a_module_qualified_env_id_imports_its_module_first():
    assert plain_env_id("rllm/Math-v0") == "rllm/Math-v0"
    assert plain_env_id("rllm_envs:rllm/Math-v0") == "rllm/Math-v0"
    with pytest.raises(LoadError, match="env id 'no_such_pkg:x/Y-v0': cannot import 'no_such_pkg'"):
        plain_env_id("no_such_pkg:x/Y-v0")
    assert split_spec("a.b:c.d") == ("a.b", "c.d")


def _imports_by_name(path: Path) -> list[int]:
    """Lines of `path` that call import_module or spec_from_file_location."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            function = node.func
            name = (
                function.attr
                if isinstance(function, ast.Attribute)
                else getattr(function, "id", "")
            )
            if name in {"import_module", "spec_from_file_location"}:
                lines.append(node.lineno)
    return lines


def test_the_loader_exists_once():
    """Every module that loads something by name goes through rllm_envs.core.loading."""
    files = sorted(PACKAGES.glob("rllm-*/src/**/*.py"))
    assert LOADER in files and _imports_by_name(LOADER)
    copies = [
        f"{path.relative_to(PACKAGES)}:{line}"
        for path in files
        if path != LOADER
        for line in _imports_by_name(path)
    ]
    assert copies == [], "load by name with rllm_envs.core.loading.load_attr:\n" + "\n".join(copies)
