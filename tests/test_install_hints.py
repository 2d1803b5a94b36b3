"""Every install hint names an extra that exists.

An error that says ``pip install 'rllm-agents[llamacpp]'`` when no such extra exists sends the
user to a command pip refuses (it warns and installs nothing extra). Every ``rllm-<pkg>[extras]``
written anywhere in the repository (source, tests, docs, benchmarks, examples, scripts) and every
extra the code names in a table or a ``require_extra`` call is checked against the
``[project.optional-dependencies]`` of the packages' pyproject files.
"""

from __future__ import annotations

import re
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser, as pip ships it
    from pip._vendor import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("packages", "tests", "docs", "benchmarks", "examples", "scripts", "README.md")
SUFFIXES = {".py", ".md", ".toml", ".sh", ".yaml", ".yml", ".txt"}
# `rllm-agents[local,smollm2]`; an f-string placeholder (`rllm-envs[{extra}]`) is not a name.
HINT = re.compile(r"\b(rllm-(?:envs|agents|train))\[([A-Za-z0-9_,\- ]+)\]")
REQUIRE_EXTRA = re.compile(r"require_extra\(\s*[\"']([A-Za-z0-9_-]+)[\"']")


def package_extras() -> dict[str, set[str]]:
    """Each package's extras, from its pyproject file."""
    extras = {}
    for pyproject in sorted((ROOT / "packages").glob("*/pyproject.toml")):
        project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
        extras[project["name"]] = set(project.get("optional-dependencies", {}))
    return extras


def hints_in(text: str) -> list[tuple[str, str]]:
    """(package, extra) for every extra an ``rllm-<pkg>[...]`` or ``require_extra`` names."""
    found = [
        (package, extra.strip())
        for package, names in HINT.findall(text)
        for extra in names.split(",")
    ]
    found += [("rllm-envs", extra) for extra in REQUIRE_EXTRA.findall(text)]
    return found


def unknown_hints(text: str, extras: dict[str, set[str]]) -> list[str]:
    return [
        f"{package}[{extra}]"
        for package, extra in hints_in(text)
        if extra not in extras.get(package, set())
    ]


def scanned_files() -> list[Path]:
    files = []
    for name in SCANNED:
        path = ROOT / name
        candidates = [path] if path.is_file() else path.rglob("*")
        files += [
            file
            for file in candidates
            if file.suffix in SUFFIXES and file.is_file() and "site-packages" not in file.parts
        ]
    return sorted(files)


def test_the_packages_have_the_extras_the_hints_rely_on():
    extras = package_extras()
    assert set(extras) == {"rllm-envs", "rllm-agents", "rllm-train"}
    assert "smollm2" in extras["rllm-agents"] and "verl" in extras["rllm-train"]


def test_a_hint_naming_a_missing_extra_is_caught():
    extras = package_extras()
    text = 'raise ConfigError("llama-cpp-python comes with rllm-agents[llamacpp]")'
    assert unknown_hints(text, extras) == ["rllm-agents[llamacpp]"]
    assert unknown_hints("pip install 'rllm-envs[math, nope]'", extras) == ["rllm-envs[nope]"]
    assert unknown_hints('require_extra("webby", "playwright")', extras) == ["rllm-envs[webby]"]
    assert unknown_hints("f\"pip install 'rllm-envs[{extra}]'\"", extras) == []


def test_every_install_hint_in_the_repository_names_an_existing_extra():
    extras = package_extras()
    files = scanned_files()
    assert len(files) > 100  # the scan reads the repository, not an empty folder
    wrong = [
        f"{file.relative_to(ROOT)}: {hint}"
        for file in files
        for hint in unknown_hints(file.read_text(encoding="utf-8", errors="replace"), extras)
        if file != Path(__file__).resolve()  # this file names wrong extras on purpose
    ]
    assert wrong == [], "install hints naming extras no pyproject defines:\n" + "\n".join(wrong)


def test_the_env_extras_doctor_checks_are_rllm_envs_extras():
    from rllm_envs.core.extras import EXTRA_MODULES

    assert set(EXTRA_MODULES) <= package_extras()["rllm-envs"]
