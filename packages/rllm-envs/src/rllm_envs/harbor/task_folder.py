"""Harbor task folders: reading one (``task.toml``, ``instruction.md``, ``environment/``,
``tests/``, ``solution/``) and finding every task under a folder.

Only what a trial needs is read, with Harbor's defaults for what a task leaves out; unknown
keys are ignored (Harbor's own linter judges the format). A folder that is not a usable task
raises :class:`HarborTaskError` naming the file and what is wrong with it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser, from PyPI (the harbor extra)
    import tomli as tomllib

CONFIG_FILE = "task.toml"
SHARED, SEPARATE = "shared", "separate"
# Harbor's defaults for keys a task.toml leaves out.
DEFAULT_TIMEOUT_SECONDS = 600.0
DEFAULT_MEMORY_MB = 2048
DEFAULT_CPUS = 1.0
# Where the agent may publish files for a separate verifier (handed over whatever the task
# lists).
ARTIFACTS_DIR = "/logs/artifacts"


class HarborTaskError(ValueError):
    """A folder that cannot be run as a Harbor task."""


@dataclass(frozen=True)
class Artifact:
    """A path in the agent's container that a separate verifier receives, at the same path
    (Harbor's rule; ``destination`` only names where Harbor keeps it on the host)."""

    source: str
    destination: str | None = None


@dataclass(frozen=True)
class HarborTask:
    """One task folder, read."""

    path: Path
    name: str
    instruction: str
    docker_image: str | None  # a prebuilt image; else environment/ is built
    verifier_mode: str  # SHARED: tests run on the agent's container; SEPARATE: a fresh one
    artifacts: tuple[Artifact, ...]
    verifier_timeout: float
    agent_timeout: float
    cpus: float
    memory_mb: int
    allow_internet: bool
    verifier_env: dict[str, str]

    @property
    def environment_dir(self) -> Path:
        return self.path / "environment"

    @property
    def tests_dir(self) -> Path:
        return self.path / "tests"

    @property
    def solution_dir(self) -> Path:
        return self.path / "solution"

    @property
    def has_oracle(self) -> bool:
        return (self.solution_dir / "solve.sh").is_file()

    @property
    def bundles_tests(self) -> bool:
        """Whether a separate verifier's image is built from tests/ (holding the tests)."""
        return self.verifier_mode == SEPARATE and (self.tests_dir / "Dockerfile").is_file()


def is_task_folder(path: Path) -> bool:
    return (path / CONFIG_FILE).is_file()


def _table(config: dict[str, Any], key: str, path: Path) -> dict[str, Any]:
    value = config.get(key, {})
    if not isinstance(value, dict):
        raise HarborTaskError(f"{path}: [{key}] must be a table")
    return value


def _seconds(table: dict[str, Any], key: str, default: float, where: str) -> float:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise HarborTaskError(f"{where}: {key} must be a positive number, got {value!r}")
    if not math.isfinite(value):
        raise HarborTaskError(f"{where}: {key} must be finite")
    return float(value)


def _memory_mb(environment: dict[str, Any], where: str) -> int:
    if "memory_mb" in environment:
        return int(_seconds(environment, "memory_mb", DEFAULT_MEMORY_MB, where))
    memory = environment.get("memory")  # older tasks: "2G", "512M"
    if memory is None:
        return DEFAULT_MEMORY_MB
    text = str(memory).strip().upper().removesuffix("B")
    scale = {"G": 1024, "M": 1, "K": 1 / 1024}.get(text[-1:], None)
    try:
        return max(1, int(float(text[:-1]) * scale)) if scale else int(float(text) / (1 << 20))
    except ValueError:
        raise HarborTaskError(f"{where}: memory {memory!r} is not a size like '2G'") from None


def _allows_internet(environment: dict[str, Any]) -> bool:
    if "allow_internet" in environment:  # older tasks
        return bool(environment["allow_internet"])
    return str(environment.get("network_mode", "public")) not in ("no-network", "none")


def _artifacts(entries: Any, where: str) -> tuple[Artifact, ...]:
    if not isinstance(entries, list):
        raise HarborTaskError(f"{where}: artifacts must be a list")
    artifacts = []
    for entry in entries:
        if isinstance(entry, str):
            entry = {"source": entry}
        source = entry.get("source") if isinstance(entry, dict) else None
        if not isinstance(source, str) or not source.startswith("/"):
            raise HarborTaskError(f"{where}: an artifact needs an absolute source path: {entry!r}")
        artifacts.append(Artifact(source, entry.get("destination")))
    return tuple(artifacts)


def _verifier_mode(verifier: dict[str, Any], where: str) -> str:
    mode = verifier.get("environment_mode")
    if mode is None:
        return SEPARATE if verifier.get("environment") else SHARED
    if mode not in (SHARED, SEPARATE):
        raise HarborTaskError(f"{where}: verifier.environment_mode must be shared or separate")
    return str(mode)


def load_task(folder: str | Path) -> HarborTask:
    """The task in `folder` (which holds ``task.toml``)."""
    path = Path(folder).expanduser().resolve()
    config_path = path / CONFIG_FILE
    if not config_path.is_file():
        raise HarborTaskError(f"{path} is not a Harbor task: it has no {CONFIG_FILE}")
    where = str(config_path)
    try:
        config = tomllib.loads(config_path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise HarborTaskError(f"{where}: not valid TOML: {error}") from error
    if config.get("steps"):
        raise HarborTaskError(f"{where}: multi-step tasks ([[steps]]) are not supported yet")
    instruction_path = path / "instruction.md"
    instruction = instruction_path.read_text("utf-8") if instruction_path.is_file() else ""
    if not instruction.strip():
        raise HarborTaskError(f"{instruction_path}: the instruction is missing or empty")
    if not (path / "tests" / "test.sh").is_file():
        raise HarborTaskError(f"{path / 'tests' / 'test.sh'}: the verifier script is missing")
    environment = _table(config, "environment", config_path)
    verifier = _table(config, "verifier", config_path)
    agent = _table(config, "agent", config_path)
    docker_image = environment.get("docker_image") or None
    if docker_image is None and not (path / "environment" / "Dockerfile").is_file():
        raise HarborTaskError(
            f"{path}: neither [environment] docker_image nor environment/Dockerfile is given"
        )
    task_table = _table(config, "task", config_path)
    return HarborTask(
        path=path,
        name=str(task_table.get("name") or path.name),
        instruction=instruction,
        docker_image=docker_image,
        verifier_mode=_verifier_mode(verifier, where),
        artifacts=_artifacts(config.get("artifacts", []), where),
        verifier_timeout=_seconds(verifier, "timeout_sec", DEFAULT_TIMEOUT_SECONDS, where),
        agent_timeout=_seconds(agent, "timeout_sec", DEFAULT_TIMEOUT_SECONDS, where),
        cpus=_seconds(environment, "cpus", DEFAULT_CPUS, where),
        memory_mb=_memory_mb(environment, where),
        allow_internet=_allows_internet(environment),
        verifier_env={str(k): str(v) for k, v in _table(verifier, "env", config_path).items()},
    )


def find_tasks(folder: str | Path) -> list[Path]:
    """Every task folder at or below `folder` (a task itself, or a dataset of tasks), in name
    order. No task found is an error naming the folder."""
    root = Path(folder).expanduser().resolve()
    if not root.is_dir():
        raise HarborTaskError(f"{root} is not a folder of Harbor tasks")
    if is_task_folder(root):
        return [root]
    found = sorted(parent for parent in (p.parent for p in root.rglob(CONFIG_FILE)))
    # A task's own subfolders cannot hold tasks: keep the outermost.
    tasks = [p for p in found if not any(p != q and q in p.parents for q in found)]
    if not tasks:
        raise HarborTaskError(f"{root} holds no Harbor task (no {CONFIG_FILE} below it)")
    return tasks


def task_rows(folder: str | Path) -> list[dict[str, str]]:
    """The rows of a task set (``{"task_id", "task_dir"}``) for every task under `folder`."""
    rows = []
    for path in find_tasks(folder):
        task = load_task(path)
        rows.append({"task_id": task.name, "task_dir": str(task.path)})
    return rows


def shipped_tasks_dir() -> Path:
    return Path(__file__).resolve().parent / "tasks"


def shipped_task_rows() -> list[dict[str, str]]:
    """The tasks rllm-envs ships (``DatasetRegistry``'s ``harbor`` set)."""
    return task_rows(shipped_tasks_dir())
