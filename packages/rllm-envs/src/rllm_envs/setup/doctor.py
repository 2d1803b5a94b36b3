"""``rllm-envs doctor``: which envs are ready on this machine, which are not, and why.

Each env has checks: its pip extra (from the env table), and the machine parts it uses (an
engine, images, a browser). An env is ready when its required checks pass; an optional check
covers one way of using it (rllm/Code-v0's ``docker`` backend). A failed check says what is
missing and the command or package that fixes it. Nothing is built or changed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from rllm_envs.core.extras import EXTRA_MODULES, missing_modules
from rllm_envs.core.registry import ENV_ENTRIES, EnvEntry
from rllm_envs.sandbox.docker_images import image_labels
from rllm_envs.sandbox.image_names import sandbox_image
from rllm_envs.setup.base import Engine, SetupError
from rllm_envs.setup.command import setup_command


@dataclass(frozen=True)
class Finding:
    ok: bool
    detail: str  # what was found, or what is missing and how to fix it


@dataclass
class Probe:
    """What the checks share: one engine connection, made on first use, or why there is none."""

    engine: Engine = field(default_factory=Engine)

    def docker(self) -> Any | None:
        try:
            return self.engine.connect()
        except SetupError:
            return None

    @property
    def engine_problem(self) -> str:
        return str(self.engine.problem or "no Docker engine")

    def close(self) -> None:
        self.engine.close()


@dataclass(frozen=True)
class Check:
    name: str
    probe: Callable[[Probe], Finding]
    required: bool = True  # False: needed by one way of using the env only


@dataclass(frozen=True)
class CheckResult:
    check: Check
    finding: Finding


@dataclass(frozen=True)
class EnvReport:
    env: str
    env_id: str
    results: tuple[CheckResult, ...]

    @property
    def ready(self) -> bool:
        return all(result.finding.ok for result in self.results if result.check.required)


def env_name(entry: EnvEntry) -> str:
    """The short name doctor and setup use: ``rllm/SWE-v0`` → ``swe``."""
    return entry.id.split("/", 1)[1].rsplit("-v", 1)[0].lower()


# -- checks --------------------------------------------------------------------------------
def extra_check(extra: str) -> Check:
    def probe(_: Probe) -> Finding:
        modules = EXTRA_MODULES.get(extra, ())
        missing = missing_modules(*modules)
        if missing:
            return Finding(False, f"{', '.join(missing)} missing: pip install 'rllm-envs[{extra}]'")
        return Finding(True, f"{', '.join(modules)} installed")

    return Check(f"extra [{extra}]", probe)


def _engine(probe: Probe) -> Finding:
    client = probe.docker()
    if client is None:
        return Finding(False, probe.engine_problem)
    return Finding(True, f"Docker {client.version().get('Version', 'unknown version')}")


def _bubblewrap(_: Probe) -> Finding:
    from rllm_envs.sandbox.bwrap import MissingEngineError, check_engine

    try:
        check_engine()
    except MissingEngineError as error:
        return Finding(False, str(error))
    return Finding(True, "bwrap and the system Python are there")


def _sandbox_image(probe: Probe) -> Finding:
    client = probe.docker()
    if client is None:
        return Finding(False, "needs the Docker engine")
    image = sandbox_image()
    if image_labels(client, image) is None:
        return Finding(False, f"{image} missing: {setup_command('code')}")
    return Finding(True, f"{image} present")


def shipped_swe_images() -> dict[str, str]:
    """This machine's name of every image the shipped SWE rows use → the snapshot they want."""
    from rllm_envs.swe.tasks import SHIPPED_SETS, load_swe_tasks, to_swe_task

    wanted = {}
    for split in SHIPPED_SETS:
        for row in load_swe_tasks(None, split).rows:
            task = to_swe_task(row)
            wanted[task.image] = task.base
    return wanted


def _swe_images(probe: Probe) -> Finding:
    from rllm_envs.swe.builder.images import BASE_LABEL

    client = probe.docker()
    if client is None:
        return Finding(False, "needs the Docker engine")
    wanted = shipped_swe_images()
    missing, stale = [], []
    for image, snapshot in sorted(wanted.items()):
        labels = image_labels(client, image)
        if labels is None:
            missing.append(image)
        elif snapshot and labels.get(BASE_LABEL) != snapshot:
            stale.append(image)
    if not missing and not stale:
        return Finding(True, f"all {len(wanted)} project images present")
    problems = [
        f"{len(found)} {what} (e.g. {found[0]})"
        for what, found in (("missing", missing), ("holding another snapshot", stale))
        if found
    ]
    return Finding(
        False, f"of {len(wanted)} project images, {'; '.join(problems)}: {setup_command('swe')}"
    )


def _harbor_images(probe: Probe) -> Finding:
    from rllm_envs.harbor.containers import image_tag
    from rllm_envs.harbor.task_folder import find_tasks, load_task, shipped_tasks_dir

    client = probe.docker()
    if client is None:
        return Finding(False, "needs the Docker engine")
    tasks = [load_task(path) for path in find_tasks(shipped_tasks_dir())]
    missing = [
        task.name
        for task in tasks
        if image_labels(client, image_tag(task, task.environment_dir)) is None
    ]
    if not missing:
        return Finding(True, f"all {len(tasks)} shipped task images present")
    return Finding(
        False,
        f"{len(missing)} of {len(tasks)} shipped task images missing (e.g. {missing[0]}; "
        f"built on first use otherwise): {setup_command('harbor')}",
    )


def _browser(_: Probe) -> Finding:
    try:
        from rllm_envs.web.browser import find_browser
    except ImportError as error:  # the web extra is missing; its own check says so
        return Finding(False, f"cannot look for a browser: {error}")
    executable = find_browser()
    if executable is None:
        return Finding(
            False,
            "no Chromium: apt-get install chromium (Debian) or playwright install chromium, "
            f"then {setup_command('web')} checks that it starts",
        )
    return Finding(True, executable)


# The machine parts each env uses, beyond its extra.
PART_CHECKS: Mapping[str, tuple[Check, ...]] = MappingProxyType(
    {
        "code": (
            Check("bubblewrap (default backend)", _bubblewrap),
            Check("Docker engine (backend='docker')", _engine, required=False),
            Check("sandbox image (backend='docker')", _sandbox_image, required=False),
        ),
        "swe": (
            Check("Docker engine", _engine),
            Check("project images", _swe_images),
        ),
        "web": (Check("Chromium", _browser),),
        "harbor": (
            Check("Docker engine", _engine),
            Check("shipped task images", _harbor_images),
        ),
    }
)
ENVS: Mapping[str, EnvEntry] = MappingProxyType({env_name(entry): entry for entry in ENV_ENTRIES})


def checks_for(name: str) -> tuple[Check, ...]:
    entry = ENVS[name]
    extra = (extra_check(entry.extra),) if entry.extra else ()
    return (*extra, *PART_CHECKS.get(name, ()))


def examine(names: tuple[str, ...], probe: Probe) -> list[EnvReport]:
    """Run every check of the envs `names`, in order."""
    return [
        EnvReport(
            name,
            ENVS[name].id,
            tuple(CheckResult(check, check.probe(probe)) for check in checks_for(name)),
        )
        for name in names
    ]


def report_table(reports: list[EnvReport]) -> Any:
    """A rich Table: one row per check, the env and whether it is ready on its first row."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="rllm envs on this machine", show_lines=False)
    for column in ("env", "ready", "check", "detail"):
        table.add_column(column, overflow="fold")
    for report in reports:
        ready = "[green]yes[/]" if report.ready else "[red]no[/]"
        if not report.results:
            table.add_row(report.env_id, ready, "-", "nothing beyond the base install")
        for index, result in enumerate(report.results):
            table.add_row(
                report.env_id if index == 0 else "",
                ready if index == 0 else "",
                f"{_mark(result)} {escape(result.check.name)}",
                escape(result.finding.detail),
            )
    return table


def _mark(result: CheckResult) -> str:
    if result.finding.ok:
        return "[green]✓[/]"
    return "[red]✗[/]" if result.check.required else "[yellow]–[/]"
