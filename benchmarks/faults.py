"""Fault injection, end to end: real processes killed, signalled, starved of disk and fed
hostile input, and what each fault cost - rows of a run lost, processes left behind.

    python benchmarks/faults.py                  # every case but verl, a few minutes
    python benchmarks/faults.py --verl           # and verl's two (minutes each)
    python benchmarks/faults.py --cases signals,gateway --json

Cases (``--cases``; each in a temporary folder of its own):

* ``kill-9``: the native trainer (``python -m rllm_train.cli``, the tiny model, 3 steps)
  SIGKILLed at each commit point of a step (the test-only ``$RLLM_TEST_KILL_AT=phase@step``
  of rllm_agents.run_folder) and resumed each time; after each kill the log, reconciled as a
  resume reconciles it, must be the uninterrupted run's rows up to the checkpoint, and at the
  end the resumed log must equal the uninterrupted run's row for row.
* ``damaged-lines``: ``garbage{`` and non-UTF-8 bytes in the middle of a finished run's
  ``metrics.jsonl`` (rllm-train) and ``episodes.jsonl`` (rllm-eval): ``--resume`` must refuse
  in one line naming ``file:line`` (exit 2) and touch nothing; ``--resume --repair`` must keep
  every whole line byte for byte and move the damaged ones to ``FILE.damaged``.
* ``disk-full``: a run on a 600 KiB tmpfs (mounting needs root; "skipped" otherwise) must
  end with exit 1 and one line "the disk is full ..."; once the tmpfs grows, ``--resume``
  must finish with each step (episode) once.
* ``signals``: SIGTERM (to the process, as ``kill`` sends it) and SIGINT (to its process
  group, as Ctrl-C does) to a running rllm-train and rllm-eval: exit 143 / 130, the last
  stderr line saying how to go on, and every child seen before the signal gone within 30 s.
* ``gateway``: the model gateway (in this process, before an instant stub engine) sent deep
  nesting, oversized bodies, wrong Content-Lengths, a client that hangs up, an impossible
  ``max_tokens`` and a few hundred seeded random bodies: no 5xx, and a valid request still
  answered after each.
* ``escaping``: an agent command (rllm_agents.programs.process.run_command) that leaves a
  process behind - in its group, after ``setsid``, after a double fork - and exits: that
  process must be gone.
* ``verl`` (only with ``--verl`` or ``--cases verl``): a verl run SIGTERMed once step 1 is
  checkpointed (exit 143) and resumed to step 2 (steps 1 and 2 once each), and a verl run
  killed with SIGKILL: Ray processes and ``rllm-ray-*`` temporary folders left after 60 s.

Columns: "rows lost" counts metrics rows or episodes a fault cost (for the gateway: requests
answered 5xx or not at all); "processes left" counts processes of the case still running
after its wait (found as descendants and by an environment mark every started process
inherits, which survives setsid and re-parenting); both should read 0. A case that breaks
is a row with its reason, never a traceback. The same faults run as tests at a smaller size
(tests/train/test_run_folder_faults.py, tests/train/test_resume_damaged_logs.py,
tests/test_disk_full.py, tests/test_cli_children.py,
tests/agents/gateway/test_gateway_hostile_bodies.py, tests/agents/programs/test_process.py);
this script plays them end to end, together, on the installed commands.

The native runs use ``tests.train.reply_length:rllm_test/ReplyLength-v0`` (rewards differ
within a group, so each step really moves the weights), imported by the child processes from
the repository root on ``PYTHONPATH``; this script imports nothing from tests/.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from types import MappingProxyType
from typing import Any

from rllm_agents import reaper
from rllm_agents.run_folder import KILL_AT_VARIABLE

REPO = Path(__file__).resolve().parents[1]
# Set on every process a case starts; inherited through fork, exec and setsid alike, so what
# a run left behind is found even once it is re-parented (rllm_agents.reaper.carrying).
MARK_VARIABLE = "RLLM_FAULTS_RUN"

TRAIN_ENV = "tests.train.reply_length:rllm_test/ReplyLength-v0"
LAKE_ENV = "tests.train.reply_length:rllm_test/LakeReplyLength-v0"
# A fast native run that checkpoints every step; temperature 2 makes the replies' lengths,
# hence the rewards, differ within each group.
TRAIN_SETTINGS = (
    "trainer.save_every=1",
    "trainer.tensorboard=false",
    "trainer.validate_held_out=false",
    "trainer.lr=0.001",
    "rollout.temperature=2.0",
    "rollout.tasks_per_step=2",
    "rollout.n=2",
    "rollout.max_response_tokens=6",
)
VERL_FLAGS = ("--backend", "verl", "--env", LAKE_ENV, "--model", "tiny", "--no-progress")
VERL_SETTINGS = (
    "rollout.tasks_per_step=2",
    "rollout.n=2",
    "rollout.max_turns=2",
    "rollout.max_response_tokens=16",
    "trainer.micro_batch_size=2",
    "verl.agent_workers=1",
    "trainer.validate_held_out=false",
    "trainer.save_every=1",  # a checkpoint at step 1 (the default saves every 10th step)
)

KILL_STEPS = 3
# (where the run is killed, the checkpoint step it must leave), in the order the resumed
# runs reach them: before and after a step's row (the row is written before the checkpoint
# commits), inside the checkpoint write, right after `latest` moves, after an update, in a
# resume's rewrite of metrics.jsonl, and a row phase once a checkpoint exists.
KILLS = (
    ("before_row@1", 0),
    ("after_row@1", 0),
    ("checkpoint_write@1", 0),
    ("after_latest@1", 1),
    ("after_update@2", 1),
    ("resume_start", 1),
    ("before_row@3", 2),
)

GARBAGE = b"garbage{\n"
NOT_UTF8 = b'{"step": \xff\xfe}\n'
# Room for a run's config and first rows, not for a checkpoint of the tiny model (~25 MB).
SMALL_DISK, ROOMY_DISK = "600k", "400m"
EVAL_FILLER_BYTES = 600 * 1024 - 16 * 1024  # leaves rllm-eval room for a few episodes

RUN_TIMEOUT_S = 600
VERL_TIMEOUT_S = 900
AFTER_SIGNAL_S = 120  # a signalled run unwinds (stops its sampler, releases the lock) in this
GONE_WAIT_S = 30  # what a run started must be gone this long after it ended
RAY_GONE_WAIT_S = 60
POLL_S = 0.3  # how often a running command's descendants are listed (a /proc scan each)

RAY_PROCESS_NAMES = ("raylet", "gcs_server", "DashboardAgent", "dashboard/agent.py")
RAY_PROCESS_NAMES += ("RuntimeEnvAgent", "runtime_env/agent", "ray::", "default_worker.py")


# ---- results ------------------------------------------------------------------------------------


class Stop(Exception):
    """A check cannot go on; the message is the row's reason."""


class CannotMount(Exception):
    """No tmpfs could be mounted (not root, or no CAP_SYS_ADMIN in a container)."""


@dataclass
class Seen:
    """What one check saw so far: kept when the check stops half way, so a failed row still
    says what it found. None: not measured."""

    problems: list[str] = field(default_factory=list)
    rows_lost: int | None = None
    processes_left: int | None = None
    note: str = ""
    skipped: str = ""

    def expect(self, condition: bool, problem: str) -> bool:
        if not condition:
            self.problems.append(problem)
        return condition

    def add_left(self, left: list[str]) -> None:
        self.processes_left = (self.processes_left or 0) + len(left)
        if left:
            self.problems.append(f"{len(left)} processes left: " + ", ".join(left[:3]))


@dataclass
class Result:
    case: str
    target: str
    status: str  # "ok", "FAIL" or "skipped"
    detail: str
    rows_lost: int | None
    processes_left: int | None
    seconds: float

    @property
    def text(self) -> str:
        return f"{self.status}: {self.detail}" if self.detail else self.status


def result_of(label: str, target: str, seen: Seen, seconds: float) -> Result:
    if seen.skipped:
        status, detail = "skipped", seen.skipped
    elif seen.problems:
        status, detail = "FAIL", "; ".join(seen.problems)
    else:
        status, detail = "ok", seen.note
    return Result(label, target, status, detail, seen.rows_lost, seen.processes_left, seconds)


def describe_error(error: BaseException) -> str:
    if isinstance(error, Stop):
        return str(error)
    return f"{type(error).__name__}: {error}".splitlines()[0][:300]


def attempt(label: str, target: str, check: Callable[[Seen], None]) -> Result:
    """Run one check; whatever it raises becomes its row's reason, with what it saw before."""
    seen = Seen()
    started = time.monotonic()
    try:
        check(seen)
    except Exception as error:  # a broken check is a row, never a traceback that ends the table
        seen.problems.append(describe_error(error))
    return result_of(label, target, seen, time.monotonic() - started)


# ---- processes ----------------------------------------------------------------------------------


def stat_fields(pid: int) -> list[str] | None:
    try:
        stat = (Path("/proc") / str(pid) / "stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()  # state, ppid, ...; field 19 the start time


def alive(pid: int, start: str) -> bool:
    """Whether the process `pid` that started at `start` still runs (not a zombie, and not
    another process that got the pid since)."""
    fields = stat_fields(pid)
    return fields is not None and fields[0] != "Z" and fields[19] == start


def start_time(pid: int) -> str:
    fields = stat_fields(pid)
    return fields[19] if fields else ""


def command_line(pid: int) -> str:
    try:
        raw = (Path("/proc") / str(pid) / "cmdline").read_bytes()
    except OSError:
        return ""
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def marked(mark: str) -> set[tuple[int, str]]:
    """Live processes carrying `mark` in their environment."""
    return {(pid, start_time(pid)) for pid in reaper.carrying(MARK_VARIABLE, mark)}


def is_ray(command: str) -> bool:
    return any(name in command for name in RAY_PROCESS_NAMES)


# A Ray cluster's folder as its processes name it (--log_dir=/tmp/rllm-ray-x/session_.../logs).
RAY_FOLDER = re.compile(r"(/[^\s=:,]*/rllm-ray-[A-Za-z0-9_]+)(?=/|\s|$)")


def ray_folders(commands: list[str]) -> set[Path]:
    """The rllm-ray-* folders named in `commands` (a run's processes): its own cluster's,
    never another run's on the same machine."""
    return {Path(match) for command in commands for match in RAY_FOLDER.findall(command)}


def unignore_sigint() -> None:
    """A shell starts background jobs with SIGINT ignored, children inherit that, and Python
    then never turns Ctrl-C into KeyboardInterrupt: the SIGINT checks would test nothing.
    A handled signal (not an ignored one) is back to its default in an exec'd child."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def child_env(*, kill_at: str | None = None, one_thread: bool = True) -> dict[str, str]:
    """The environment of a started command: the repository first on the path (for the
    tests.train.reply_length env), no kill point unless asked, no Ray cluster to join."""
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    for name in (KILL_AT_VARIABLE, "RAY_ADDRESS", MARK_VARIABLE):
        env.pop(name, None)
    if one_thread:  # the same arithmetic order in every process: resumed runs compare exactly
        env["OMP_NUM_THREADS"] = "1"
    if kill_at:
        env[KILL_AT_VARIABLE] = kill_at
    return env


@dataclass
class Outcome:
    """What one started command did."""

    name: str
    returncode: int | None  # None: still running at its time limit (then killed)
    stdout: str
    stderr: str
    mark: str
    children: set[tuple[int, str]]  # every descendant seen while it ran
    commands: dict[tuple[int, str], str]  # their command lines, read when first seen
    at_signal: set[tuple[int, str]]  # its descendants when the signal went
    signalled: bool

    def status(self) -> str:
        if self.returncode is None:
            return "still running at its time limit"
        if self.returncode < 0:
            return f"killed by {signal.Signals(-self.returncode).name}"
        return f"exit {self.returncode}"

    def stderr_lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]

    def last_line(self) -> str:
        lines = self.stderr_lines()
        return lines[-1].strip() if lines else ""

    def describe(self) -> str:
        last = self.last_line()
        return f"{self.status()}" + (f" ({last[:200]})" if last else "")

    def ends_saying(self, seen: Seen, wanted: Callable[[str], bool], what: str) -> None:
        """Expect stderr's last line to be `wanted`; a problem that says what came instead,
        or what came after it (output at the interpreter's exit, say)."""
        lines = [line.strip() for line in self.stderr_lines()]
        if lines and wanted(lines[-1]):
            return
        found = [number for number, line in enumerate(lines) if wanted(line)]
        if found:
            after = lines[found[-1] + 1 :]
            seen.problems.append(
                f"{what} is followed by {len(after)} more stderr lines, the first "
                f"{after[0][:100]!r}, the last {after[-1][:100]!r}"
            )
        else:
            seen.problems.append(f"no {what}; the last stderr line: {self.last_line()[:200]!r}")


@dataclass
class Launcher:
    """Starts a case's commands, each in a session of its own (so a cleanup can signal the
    whole group) with its own environment mark, and ends whatever of them is left."""

    folder: Path
    marks: list[str] = field(default_factory=list)
    processes: list[subprocess.Popen] = field(default_factory=list)

    def new_mark(self) -> str:
        mark = uuid.uuid4().hex
        self.marks.append(mark)
        return mark

    def run(
        self,
        name: str,
        argv: list[str],
        *,
        env: dict[str, str] | None = None,
        timeout_s: float = RUN_TIMEOUT_S,
        ready: Callable[[], bool] | None = None,
        send: signal.Signals | None = None,
        to_group: bool = False,
    ) -> Outcome:
        """Run `argv` to its end; with `send`, send that signal once `ready()` holds (to the
        process, or its whole group), then give it AFTER_SIGNAL_S to end."""
        mark = self.new_mark()
        environment = {**(env if env is not None else child_env()), MARK_VARIABLE: mark}
        out_path, err_path = self.folder / f"{name}.stdout", self.folder / f"{name}.stderr"
        with out_path.open("wb") as out, err_path.open("wb") as err:
            process = subprocess.Popen(
                argv,
                cwd=REPO,
                env=environment,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        self.processes.append(process)
        children: set[tuple[int, str]] = set()
        commands: dict[tuple[int, str], str] = {}
        at_signal: set[tuple[int, str]] = set()
        signalled = False
        deadline = time.monotonic() + timeout_s
        while process.poll() is None and time.monotonic() < deadline:
            # Listed while it runs: once it is gone its children are re-parented and no
            # longer look like its own.
            for entry in reaper.descendants(process.pid):
                if entry not in commands:
                    commands[entry] = command_line(entry[0])
            children.update(commands)
            if send is not None and not signalled and ready is not None and ready():
                at_signal = set(reaper.descendants(process.pid))
                children |= at_signal
                with contextlib.suppress(ProcessLookupError):
                    if to_group:
                        os.killpg(process.pid, send)
                    else:
                        process.send_signal(send)
                signalled = True
                deadline = min(deadline, time.monotonic() + AFTER_SIGNAL_S)
            time.sleep(POLL_S)
        returncode = process.poll()
        if returncode is None:
            self.kill_group(process)
        return Outcome(
            name,
            returncode,
            out_path.read_text(errors="replace"),
            err_path.read_text(errors="replace"),
            mark,
            children,
            commands,
            at_signal,
            signalled,
        )

    @staticmethod
    def kill_group(process: subprocess.Popen) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        process.wait()

    def settle(self, outcome: Outcome, wait_s: float = GONE_WAIT_S) -> list[str]:
        """What `outcome`'s command left running after up to `wait_s` (its descendants seen,
        and what carries its mark), each as "pid command"; killed once counted, so the next
        run of the case starts clean. Only the command's own: other runs on the machine
        (a test suite's Ray, say) are none of its business."""
        deadline = time.monotonic() + wait_s
        while True:
            left = {entry for entry in outcome.children if alive(*entry)} | marked(outcome.mark)
            if not left or time.monotonic() >= deadline:
                break
            time.sleep(0.2)
        described = [f"{pid} {command_line(pid)[:80]}" for pid, _ in sorted(left)]
        kill_all(left)
        return described

    def close(self) -> list[str]:
        """End whatever the case started and is still running (its groups, its marks): the
        processes no row counted, each as "pid command"."""
        running = [process for process in self.processes if process.poll() is None]
        left = {(process.pid, start_time(process.pid)) for process in running}
        for mark in self.marks:
            left |= marked(mark)
        described = [f"{pid} {command_line(pid)[:80]}" for pid, _ in sorted(left)]
        for process in running:
            self.kill_group(process)
        kill_all(left)
        return described


def kill_all(entries: set[tuple[int, str]]) -> None:
    for pid, start in entries:
        if alive(pid, start):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


# ---- run folders --------------------------------------------------------------------------------


def train_argv(output: Path, *flags: str, steps: int, keep: int = 10) -> list[str]:
    """A native rllm-train call; the options first, the section.key=value settings last."""
    return [
        sys.executable, "-m", "rllm_train.cli", "--env", TRAIN_ENV, "--model", "tiny",
        "--output", str(output), "--no-progress", "--steps", str(steps), *flags,
        *TRAIN_SETTINGS, f"trainer.keep_checkpoints={keep}",
    ]  # fmt: skip


def eval_argv(output: Path, *flags: str, tasks: int = 3, turns: int = 2) -> list[str]:
    return [
        sys.executable, "-m", "rllm_agents.cli.eval", "--env", "rllm/FrozenLake-v0",
        "--model", "tiny", "--n", "2", "--num-tasks", str(tasks), "--max-tokens", "4",
        "--max-turns", str(turns), "--no-progress", "--output", str(output), *flags,
    ]  # fmt: skip


def verl_argv(output: Path, *flags: str, steps: int) -> list[str]:
    return [
        sys.executable, "-m", "rllm_train.cli", *VERL_FLAGS, "--output", str(output),
        "--steps", str(steps), *flags, *VERL_SETTINGS,
    ]  # fmt: skip


def read_rows(path: Path) -> tuple[list[dict], int]:
    """The JSON objects of a JSON-lines file and how many of its lines are not one."""
    if not path.is_file():
        return [], 0
    rows, damaged = [], 0
    for line in path.read_bytes().splitlines():
        try:
            row = json.loads(line)
        except ValueError:  # UnicodeDecodeError included
            damaged += 1
            continue
        if isinstance(row, dict):
            rows.append(row)
        else:
            damaged += 1
    return rows, damaged


def metric_rows(output: Path) -> tuple[list[dict], int]:
    """metrics.jsonl's rows without their timings (which differ from run to run)."""
    rows, damaged = read_rows(output / "metrics.jsonl")
    return [{k: v for k, v in row.items() if not k.startswith("time/")} for row in rows], damaged


def reconciled(rows: list[dict], checkpoint: int) -> list[dict]:
    """The rows a resume from `checkpoint` keeps: each step up to it once, the last written
    winning, none past it (those steps play again)."""
    by_step = {row.get("step", 0): row for row in rows if row.get("step", 0) <= checkpoint}
    return [by_step[step] for step in sorted(by_step)] if checkpoint else []


def latest_step(output: Path) -> int:
    latest = output / "checkpoints" / "latest"
    return int(latest.read_text().strip().removeprefix("step_")) if latest.exists() else 0


def has_a_line(path: Path) -> bool:
    """Whether `path` holds a whole line (an episode's line can run to megabytes)."""
    try:
        with path.open("rb") as handle:
            return any(b"\n" in chunk for chunk in iter(partial(handle.read, 1 << 20), b""))
    except OSError:
        return False


def log_lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True) if path.is_file() else []


def doubled(values: list[Any]) -> int:
    return len(values) - len(set(values))


@dataclass
class Case:
    """One case's folder and processes."""

    name: str
    folder: Path
    launcher: Launcher
    options: argparse.Namespace

    def run(self, name: str, argv: list[str], seen: Seen, **kwargs: Any) -> Outcome:
        """Run a command and count what it left running into `seen`."""
        outcome = self.launcher.run(name, argv, **kwargs)
        seen.add_left(self.launcher.settle(outcome))
        return outcome


# ---- case: kill -9 at each commit point -------------------------------------------------------


def case_kill_9(case: Case) -> list[Result]:
    straight, killed = case.folder / "straight", case.folder / "killed"
    expected: list[dict] = []  # the uninterrupted run's rows, filled by the first check

    def uninterrupted(seen: Seen) -> None:
        outcome = case.run("straight", train_argv(straight, steps=KILL_STEPS), seen)
        if outcome.returncode != 0:
            raise Stop(f"the uninterrupted run: {outcome.describe()}")
        rows, _ = metric_rows(straight)
        expected.extend(rows)
        seen.rows_lost = KILL_STEPS - len({row["step"] for row in rows})
        seen.expect([row["step"] for row in rows] == list(range(1, KILL_STEPS + 1)), "steps")
        # The weights must really move, or a resume that lost an update would look the same.
        moving = all(row.get("grad_norm", 0) > 0 for row in rows)
        seen.expect(moving, "a step without a gradient: the comparison would prove nothing")
        seen.note = f"{len(rows)} rows, the reference"

    results = [attempt("uninterrupted run", "rllm-train", uninterrupted)]
    if results[0].status != "ok":
        return results
    for number, (kill_at, checkpoint) in enumerate(KILLS):
        check = partial(kill_once, case, killed, kill_at, checkpoint, expected, number > 0)
        results.append(attempt(f"kill -9 at {kill_at}", "rllm-train", check))
    check = partial(resume_to_the_end, case, killed, expected)
    results.append(attempt("kill -9: --resume to the end", "rllm-train", check))
    return results


def kill_once(
    case: Case,
    output: Path,
    kill_at: str,
    checkpoint: int,
    expected: list[dict],
    resume: bool,
    seen: Seen,
) -> None:
    flags = ("--resume",) if resume else ()
    argv = train_argv(output, *flags, steps=KILL_STEPS)
    outcome = case.run(f"kill-{kill_at}", argv, seen, env=child_env(kill_at=kill_at))
    seen.expect(outcome.returncode == -signal.SIGKILL, f"{outcome.describe()}, not killed")
    step = latest_step(output)
    seen.expect(step == checkpoint, f"checkpoint of step {step}, expected {checkpoint}")
    rows, damaged = metric_rows(output)
    kept, wanted = reconciled(rows, checkpoint), expected[:checkpoint]
    seen.rows_lost = sum(1 for row in wanted if row not in kept)
    if seen.rows_lost == 0:
        seen.expect(kept == wanted, "the reconciled log differs from the uninterrupted run's")
    cut = f", {damaged} line cut short" if damaged else ""
    seen.note = f"checkpoint {step}, {len(rows)} rows in the log{cut}"


def resume_to_the_end(case: Case, output: Path, expected: list[dict], seen: Seen) -> None:
    outcome = case.run("resume-final", train_argv(output, "--resume", steps=KILL_STEPS), seen)
    seen.expect(outcome.returncode == 0, outcome.describe())
    rows, damaged = metric_rows(output)
    seen.rows_lost = sum(1 for row in expected if row not in rows)
    steps = [row.get("step") for row in rows]
    seen.expect(not doubled(steps), f"steps {steps}: some twice")
    seen.expect(damaged == 0, f"{damaged} damaged lines in the log")
    if seen.rows_lost == 0 and not doubled(steps):
        seen.expect(rows == expected, "the rows differ from the uninterrupted run's")
    # The killed checkpoint writes and log rewrites leave no staging folder (owners dead).
    staging = [*(output / "checkpoints").glob(".step_*.tmp-*"), *output.glob(".*.tmp-*")]
    seen.expect(not staging, f"staging left: {[path.name for path in staging]}")
    seen.note = f"steps {steps}, each row equal to the uninterrupted run's"


# ---- case: damaged lines ----------------------------------------------------------------------


@dataclass(frozen=True)
class LogTarget:
    """A command whose run log a damage check spoils."""

    prog: str
    log: str  # the log's name in the run folder
    key: str  # what names a row: each must appear once
    argv: Callable[..., list[str]]  # (output, *flags) -> the command
    rows_after_repair: int  # the log's rows once --resume --repair has finished


def train_target() -> LogTarget:
    # Two steps, then a resume to three: the repaired run plays one step more.
    def argv(output: Path, *flags: str) -> list[str]:
        return train_argv(output, *flags, steps=3 if "--resume" in flags else 2, keep=1)

    return LogTarget("rllm-train", "metrics.jsonl", "step", argv, rows_after_repair=3)


def eval_target() -> LogTarget:
    # Finished: the resume has nothing left to play, so the log keeps its six episodes.
    return LogTarget("rllm-eval", "episodes.jsonl", "id", eval_argv, rows_after_repair=6)


def case_damaged_lines(case: Case) -> list[Result]:
    results = []
    for target in (train_target(), eval_target()):
        finished = case.folder / f"{target.prog}-finished"

        def finish(seen: Seen, target: LogTarget = target, finished: Path = finished) -> None:
            outcome = case.run(f"{target.prog}-finished", target.argv(finished), seen)
            if outcome.returncode != 0:
                raise Stop(f"the run to damage: {outcome.describe()}")
            seen.rows_lost = 0
            seen.note = f"{len(log_lines(finished / target.log))} lines to damage"

        first = attempt("damaged lines: finished run", target.prog, finish)
        if first.status != "ok":
            results.append(first)
            continue
        for label, damage in (("garbage{", GARBAGE), ("\\xff\\xfe", NOT_UTF8)):
            check = partial(refused_resume, case, target, finished, damage)
            results.append(attempt(f"{label} in {target.log}: --resume", target.prog, check))
        check = partial(repaired_resume, case, target, finished)
        results.append(attempt(f"both in {target.log}: --resume --repair", target.prog, check))
    return results


def damaged_copy(
    case: Case, finished: Path, log_name: str, damage: bytes
) -> tuple[Path, list[bytes], int]:
    """A copy of the finished run with `damage` in the middle of its log: the copy, the log's
    original lines, and the 1-based number of the first damaged line."""
    copy = case.folder / f"{finished.name}-{uuid.uuid4().hex[:6]}"
    shutil.copytree(finished, copy, ignore=shutil.ignore_patterns(".lock"))
    log = copy / log_name
    lines = log_lines(log)
    middle = max(1, len(lines) // 2)
    log.write_bytes(b"".join(lines[:middle]) + damage + b"".join(lines[middle:]))
    return copy, lines, middle + 1


def refused_resume(
    case: Case, target: LogTarget, finished: Path, damage: bytes, seen: Seen
) -> None:
    run, lines, line_number = damaged_copy(case, finished, target.log, damage)
    log = run / target.log
    damaged = log.read_bytes()
    outcome = case.run(f"{run.name}-resume", target.argv(run, "--resume"), seen)
    seen.expect(outcome.returncode == 2, f"{outcome.describe()}, expected exit 2")
    said = outcome.stderr_lines()
    seen.expect(len(said) == 1, f"{len(said)} lines on stderr, expected one")

    def named(line: str) -> bool:
        where = f"{log}:{line_number}: not "
        return line.startswith(f"{target.prog}: ") and where in line and "--repair" in line

    outcome.ends_saying(seen, named, f"refusal naming {target.log}:{line_number}")
    after = log.read_bytes()
    seen.expect(after == damaged, "the refused resume changed the log")
    kept = after.splitlines(keepends=True)
    seen.rows_lost = sum(1 for line in lines if line not in kept)
    seen.note = f"exit 2, one line naming {target.log}:{line_number}"


def repaired_resume(case: Case, target: LogTarget, finished: Path, seen: Seen) -> None:
    run, lines, _ = damaged_copy(case, finished, target.log, GARBAGE + NOT_UTF8)
    log = run / target.log
    outcome = case.run(f"{run.name}-repair", target.argv(run, "--resume", "--repair"), seen)
    seen.expect(outcome.returncode == 0, outcome.describe())
    said = f"{target.prog}: --repair: moved 2 damaged lines of {log} to {log}.damaged"
    seen.expect(said in outcome.stdout, f"no {said!r} on stdout")
    aside = log.with_name(log.name + ".damaged")
    moved = aside.read_bytes() if aside.is_file() else b""
    seen.expect(moved == GARBAGE + NOT_UTF8, f"{aside.name} holds {moved[:80]!r}")
    after = log_lines(log)
    seen.rows_lost = sum(1 for line in lines if line not in after)
    if target.key == "step":  # a training log keeps its order: the old rows come first
        seen.expect(after[: len(lines)] == lines, "the whole rows changed or moved")
    rows, damaged = read_rows(log)
    names = [row.get(target.key) for row in rows]
    seen.expect(not doubled(names) and not damaged, f"{target.key}s {names}, {damaged} damaged")
    seen.expect(len(rows) == target.rows_after_repair, f"{len(rows)} rows after the resume")
    seen.note = f"{len(lines)} whole lines kept byte for byte, 2 moved aside, {len(rows)} rows"


# ---- case: a full disk --------------------------------------------------------------------------


@contextlib.contextmanager
def small_disk(point: Path) -> Iterator[Callable[[], None]]:
    """A tmpfs of SMALL_DISK at `point`; yields a function that grows it to ROOMY_DISK (a
    user freeing space). Unmounted on the way out, whatever happened."""
    point.mkdir()
    try:
        mounted = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={SMALL_DISK}", "tmpfs", str(point)],
            capture_output=True,
            text=True,
        )
    except OSError as error:  # no mount command
        raise CannotMount(str(error)) from error
    if mounted.returncode != 0:
        raise CannotMount(mounted.stderr.strip() or f"mount exited {mounted.returncode}")

    def grow() -> None:
        remount = ["mount", "-o", f"remount,size={ROOMY_DISK}", str(point)]
        grown = subprocess.run(remount, capture_output=True, text=True)
        if grown.returncode != 0:
            raise Stop(f"cannot grow the tmpfs: {grown.stderr.strip()}")

    try:
        yield grow
    finally:
        subprocess.run(["umount", "-l", str(point)], capture_output=True)


def full_disk_line(seen: Seen, outcome: Outcome, prog: str, run: Path) -> None:
    seen.expect(outcome.returncode == 1, f"{outcome.describe()}, expected exit 1")
    start = f"{prog}: the disk is full: writing under {run} failed"
    outcome.ends_saying(
        seen,
        lambda line: line.startswith(start) and line.endswith("continue with --resume"),
        '"the disk is full" line',
    )
    seen.expect("Traceback" not in outcome.stderr, "a traceback on stderr")


def disk_full_train(case: Case, seen: Seen) -> None:
    point = case.folder / "train-disk"
    try:
        with small_disk(point) as grow:
            run = point / "run"
            full = case.run("train-full", train_argv(run, steps=2), seen)
            full_disk_line(seen, full, "rllm-train", run)
            grow()
            resumed = case.run("train-resume", train_argv(run, "--resume", steps=2), seen)
            seen.expect(resumed.returncode == 0, f"the resume: {resumed.describe()}")
            rows, _ = read_rows(run / "metrics.jsonl")
            steps = [row.get("step") for row in rows]
            seen.rows_lost = len({1, 2} - set(steps))
            seen.expect(steps == [1, 2], f"steps {steps} after the resume")
            seen.note = f"exit 1 in one line; resumed: steps {steps}"
    except CannotMount as reason:
        seen.skipped = f"cannot mount a tmpfs ({reason})"


def disk_full_eval(case: Case, seen: Seen) -> None:
    point = case.folder / "eval-disk"
    try:
        with small_disk(point) as grow:
            run = point / "run"
            (point / "filler").write_bytes(b"\0" * EVAL_FILLER_BYTES)
            argv = eval_argv(run, tasks=8)
            full = case.run("eval-full", argv, seen)
            full_disk_line(seen, full, "rllm-eval", run)
            grow()
            resumed = case.run("eval-resume", [*argv, "--resume"], seen)
            seen.expect(resumed.returncode == 0, f"the resume: {resumed.describe()}")
            rows, damaged = read_rows(run / "episodes.jsonl")
            ids = [row.get("id") for row in rows]
            seen.rows_lost = 16 - len(set(ids))
            seen.expect(len(ids) == 16 and not doubled(ids), f"{len(ids)} episodes, some twice")
            seen.expect(not damaged, f"{damaged} damaged lines")
            summary = json.loads((run / "summary.json").read_text())
            failures = summary.get("infra_failures")
            seen.expect(failures == 0, f"{failures} infrastructure failures")
            seen.note = f"exit 1 in one line; resumed: {len(set(ids))} episodes once each"
    except CannotMount as reason:
        seen.skipped = f"cannot mount a tmpfs ({reason})"


def case_disk_full(case: Case) -> list[Result]:
    return [
        attempt("disk full, then --resume", "rllm-train", partial(disk_full_train, case)),
        attempt("disk full, then --resume", "rllm-eval", partial(disk_full_eval, case)),
    ]


# ---- case: signals ----------------------------------------------------------------------------


def signalled_run(case: Case, prog: str, sig: signal.Signals, seen: Seen) -> None:
    output = case.folder / f"{prog}-{sig.name}"
    if prog == "rllm-train":
        argv, log = train_argv(output, steps=200), output / "metrics.jsonl"
    else:
        argv, log = eval_argv(output, tasks=2000, turns=8), output / "episodes.jsonl"
    outcome = case.launcher.run(
        f"{prog}-{sig.name}",
        argv,
        ready=partial(has_a_line, log),  # under way: its first row is written
        send=sig,
        to_group=sig == signal.SIGINT,  # Ctrl-C reaches the terminal's whole foreground group
    )
    seen.add_left(case.launcher.settle(outcome))
    if not outcome.signalled:
        raise Stop(f"ended before its first row: {outcome.describe()}")
    code = 128 + signal.SIGTERM if sig == signal.SIGTERM else 130
    seen.expect(outcome.returncode == code, f"{outcome.status()}, expected exit {code}")
    what = "terminated by SIGTERM" if sig == signal.SIGTERM else "interrupted"
    wanted = f"{prog}: {what}; continue with --resume"
    outcome.ends_saying(seen, lambda line: line.endswith(wanted), repr(wanted))
    rows, damaged = read_rows(log)
    gaps = 0
    if prog == "rllm-train":  # steps 1..k, each once
        steps = [row.get("step") for row in rows]
        gaps = len(set(range(1, max(steps, default=0) + 1)) - set(steps))
        seen.expect(not doubled(steps), f"steps {steps}: some twice")
    seen.rows_lost = damaged + gaps
    seen.note = f"{len(rows)} rows; {len(outcome.at_signal)} children at the signal, all gone"


def case_signals(case: Case) -> list[Result]:
    return [
        attempt(f"{sig.name} while running", prog, partial(signalled_run, case, prog, sig))
        for prog in ("rllm-train", "rllm-eval")
        for sig in (signal.SIGTERM, signal.SIGINT)
    ]


# ---- case: hostile bodies to the gateway -------------------------------------------------------

CHAT, COMPLETIONS = "/chat/completions", "/completions"
CONTEXT_LENGTH = 8192
MAX_BODY_BYTES = 128 * 1024
REPLY = "Fine, thanks."
USER = {"role": "user", "content": "hi"}
RANDOM_BODIES = 400
RANDOM_SEED = 20240611
# Values a field may wrongly hold: wrong types, empty and huge, past 64 bits, odd text.
ODD_VALUES = (
    None, True, False, 0, -1, 2**64, -(2**63) - 1, 10**30, 1.5, -0.0, 1e308, "", "x" * 5000,
    "\ud800", "\x00", "\u202e\ufeff", [], [None], [[[]]], {}, {"type": 1}, "[" * 2000,
    {"role": "user", "content": {"nested": [1]}},
)  # fmt: skip
# Number tokens only raw JSON text carries (json.dumps writes none of them).
RAW_NUMBERS = ("1e400", "-1e400", "NaN", "Infinity", "1" + "0" * 5000, "0.1e999999999", "-0")
CHAT_FIELDS = ("model", "messages", "max_tokens", "max_completion_tokens", "temperature")
CHAT_FIELDS += ("top_p", "n", "stop", "seed", "tools", "tool_choice", "logprobs")
CHAT_FIELDS += ("top_logprobs", "stream", "response_format", "unknown_field")


@dataclass
class InstantEngine:
    """Answers every prompt at once: the probes are about HTTP and JSON, not a model."""

    tokenizer: Any = None
    context_length: int = CONTEXT_LENGTH

    async def generate(
        self,
        messages: list[dict[str, Any]] | None = None,
        *,
        prompt_ids: list[int] | None = None,
        sampling: Any = None,
        tools: list[dict[str, Any]] | None = None,
    ) -> Any:
        from rllm_agents.engines.base import ModelOutput

        ids = self.tokenizer.encode(REPLY) if self.tokenizer is not None else [1, 2, 3]
        return ModelOutput(
            text=REPLY,
            prompt_ids=list(prompt_ids or []),
            completion_ids=ids,
            logprobs=[-0.5] * len(ids),
        )

    async def aclose(self) -> None:
        pass


@dataclass
class Tally:
    """The answers of one probe family: "lost" are 5xx and unanswered requests."""

    sent: int = 0
    statuses: Counter = field(default_factory=Counter)
    lost: int = 0
    wrong: dict[str, str] = field(default_factory=dict)  # problem -> one example

    def count(self, status: int | None, body: bytes, allowed: Callable[[int], bool], what: str):
        self.sent += 1
        self.statuses[status] += 1
        if status is None or status >= 500:
            self.lost += 1
        if status is None:
            self.wrong.setdefault("no answer", what)
        elif not allowed(status):
            self.wrong.setdefault(f"{status} {body[:120]!r}", what)

    def into(self, seen: Seen) -> None:
        seen.rows_lost = (seen.rows_lost or 0) + self.lost
        for problem, example in list(self.wrong.items())[:3]:
            seen.problems.append(f"{problem} for {example[:120]}")
        if len(self.wrong) > 3:
            seen.problems.append(f"{len(self.wrong) - 3} more kinds of wrong answers")
        answers = ", ".join(
            f"{n} x {s or 'none'}" for s, n in sorted(self.statuses.items(), key=str)
        )
        seen.note = f"{self.sent} requests: {answers}"


@dataclass
class Probing:
    """What the gateway probes share: the gateway, a recorded session, an HTTP client."""

    gateway: Any
    session: Any
    http: Any

    async def post(
        self, path: str, body: bytes, base: str | None = None
    ) -> tuple[int | None, bytes]:
        import aiohttp

        url = (base or self.gateway.base_url) + path
        headers = {"Content-Type": "application/json"}
        try:
            timeout = aiohttp.ClientTimeout(total=20)
            async with self.http.post(url, data=body, headers=headers, timeout=timeout) as answer:
                return answer.status, await answer.read()
        except (aiohttp.ClientError, asyncio.TimeoutError):
            return None, b""

    async def raw(self, request: bytes, *, hang_up: bool = False) -> bytes:
        """Send `request` bytes as they are on a new connection; the first answer (nothing
        when the client hangs up right after sending)."""
        reader, writer = await asyncio.open_connection(self.gateway.host, self.gateway.port)
        try:
            writer.write(request)
            await writer.drain()
            if hang_up:
                return b""
            with contextlib.suppress(
                asyncio.TimeoutError,
                ConnectionError,
                asyncio.IncompleteReadError,
                asyncio.LimitOverrunError,
            ):
                return await asyncio.wait_for(read_answer(reader), 10)
            return b""
        finally:
            writer.close()


async def read_answer(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = re.search(rb"(?i)\r\ncontent-length: *(\d+)", head)
    return head + await reader.readexactly(int(length.group(1)) if length else 0)


def http_post(path: str, body: bytes, content_length: str | None = None) -> bytes:
    """An HTTP/1.1 POST saying `content_length` (the true one when None)."""
    length = str(len(body)) if content_length is None else content_length
    head = f"POST /v1{path} HTTP/1.1\r\nHost: gateway\r\nConnection: close\r\n"
    return f"{head}Content-Length: {length}\r\n\r\n".encode() + body


def statuses(answer: bytes) -> list[int]:
    return [int(line.split()[1]) for line in answer.split(b"\r\n") if line.startswith(b"HTTP/1.")]


def is_4xx(status: int) -> bool:
    return 400 <= status < 500


async def probe_deep_nesting(probing: Probing, seen: Seen) -> None:
    tally = Tally()
    bodies = (b"[" * 100_000, b"[" * 129 + b"]" * 129)
    bodies += (b'{"messages":' + b'[{"a":' * 70 + b"1" + b"}]" * 70 + b"}",)
    for body in bodies:
        status, answer = await probing.post(CHAT, body)
        tally.count(status, answer, lambda s, a=answer: s == 400 and b"nest" in a, repr(body[:40]))
    tally.into(seen)


async def probe_oversized(probing: Probing, seen: Seen) -> None:
    tally = Tally()
    # It says 10 GB and sends a few bytes: refused from the length, before a body is read.
    answer = await probing.raw(http_post(CHAT, b'{"messages": [', content_length=str(10**10)))
    for status in statuses(answer) or [None]:
        tally.count(status, answer, lambda s: s == 413, "Content-Length: 10**10")

    async def chunks():  # no length at all: chunked, past the limit
        for _ in range(MAX_BODY_BYTES // 8192 + 2):
            yield b" " * 8192

    import aiohttp

    try:
        async with probing.http.post(probing.gateway.base_url + CHAT, data=chunks()) as response:
            status, body = response.status, await response.read()
    except aiohttp.ClientError:  # the server may close before the client finished sending
        status, body = None, b""
    tally.count(status, body, lambda s: s == 413, "a chunked body past the limit")
    tally.into(seen)


async def probe_content_length(probing: Probing, seen: Seen) -> None:
    tally = Tally()
    valid = json.dumps({"messages": [USER]}).encode()
    cases = (
        (valid, "10"),  # shorter than the body: JSON cut short, the rest a broken request
        (b'{"messages": []}', "abc"),
        (b'{"messages": []}', "-1"),
        (b'{"messages": []}', "1e3"),
        (b'{"messages": []}', "16\r\nContent-Length: 3"),  # two lengths
        (b'{"messages": []}', "16\r\nTransfer-Encoding: chunked"),  # length and chunked
        (b"zz\r\n{}\r\n0\r\n\r\n", "0\r\nTransfer-Encoding: chunked"),  # a bad chunk size
    )
    for body, length in cases:
        answer = await probing.raw(http_post(CHAT, body, content_length=length))
        for status in statuses(answer) or [None]:
            tally.count(status, answer, is_4xx, f"Content-Length: {length!r}")
    tally.into(seen)


async def probe_hang_up(probing: Probing, seen: Seen) -> None:
    session = probing.gateway.open_session()
    try:
        path = f"/sessions/{session.id}/v1{CHAT}"
        request = f"POST {path} HTTP/1.1\r\nHost: g\r\nContent-Length: 1000\r\n\r\n".encode()
        await probing.raw(request + b'{"messages": [{"role"', hang_up=True)
        deadline = time.monotonic() + 5
        while session.failed_calls == 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        seen.expect(session.failed_calls == 1, f"{session.failed_calls} failed calls, not 1")
        seen.expect(not session.calls, "a call recorded from a body never sent")
        seen.rows_lost = 0
        seen.note = "noticed as one failed call of its session"
    finally:
        probing.gateway.close_session(session.id)


async def probe_max_tokens(probing: Probing, seen: Seen) -> None:
    tally = Tally()
    refused = lambda s, a: s == 400 and f"at most {CONTEXT_LENGTH}".encode() in a  # noqa: E731
    for name in ("max_tokens", "max_completion_tokens"):
        body = json.dumps({"messages": [USER], name: 10**12}).encode()
        status, answer = await probing.post(CHAT, body)
        tally.count(status, answer, lambda s, a=answer: refused(s, a), f"chat {name}=10**12")
    body = json.dumps({"prompt": [1, 2, 3], "max_tokens": 10**12}).encode()
    status, answer = await probing.post(COMPLETIONS, body)
    tally.count(status, answer, lambda s: is_4xx(s), "completions max_tokens=10**12")
    # The whole context is still a possible request (the prompt then cuts it short).
    body = json.dumps({"messages": [USER], "max_tokens": CONTEXT_LENGTH}).encode()
    status, answer = await probing.post(CHAT, body)
    tally.count(status, answer, lambda s: s == 200, f"max_tokens={CONTEXT_LENGTH}")
    tally.into(seen)


def random_bodies(seed: int, count: int) -> list[tuple[str, bytes, bool]]:
    """(path, body, whether a correct gateway must answer 200), drawn from a seeded mix of
    families, so every run sends the same bodies and a failure reproduces."""
    rng = random.Random(seed)
    families = (random_bytes, random_json, wrong_field, raw_number, wrong_message, cut_short)
    families += (valid_body,)
    return [rng.choice(families)(rng) for _ in range(count)]


def random_value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(6 if depth < 5 else 3)
    if kind == 0:
        return rng.choice(ODD_VALUES)
    if kind == 1:
        return rng.choice([rng.randint(-(2**70), 2**70), rng.random(), rng.randbytes(8).hex()])
    if kind == 2:
        return rng.choice(["user", "assistant", "system", "tool", "messages", "content"])
    if kind == 3:
        return [random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    keys = (*CHAT_FIELDS, "role", "content", "prompt", "type")
    return {rng.choice(keys): random_value(rng, depth + 1) for _ in range(rng.randrange(4))}


def some_path(rng: random.Random) -> str:
    return rng.choice((CHAT, COMPLETIONS))


def random_bytes(rng: random.Random) -> tuple[str, bytes, bool]:
    return some_path(rng), rng.randbytes(rng.randrange(300)), False


def random_json(rng: random.Random) -> tuple[str, bytes, bool]:
    return some_path(rng), json.dumps(random_value(rng)).encode(), False


def a_valid_chat(rng: random.Random) -> dict[str, Any]:
    return {"model": "m", "messages": [USER], "max_tokens": rng.randint(1, 8)}


def wrong_field(rng: random.Random) -> tuple[str, bytes, bool]:
    body = a_valid_chat(rng)
    body[rng.choice(CHAT_FIELDS)] = rng.choice(ODD_VALUES)
    return CHAT, json.dumps(body).encode(), False


def raw_number(rng: random.Random) -> tuple[str, bytes, bool]:
    name = rng.choice(("max_tokens", "n", "temperature", "top_p", "seed", "top_logprobs"))
    body = '{"messages": [{"role": "user", "content": "hi"}], "%s": %s}'
    return CHAT, (body % (name, rng.choice(RAW_NUMBERS))).encode(), False


def wrong_message(rng: random.Random) -> tuple[str, bytes, bool]:
    message = {"role": random_value(rng, 4), "content": random_value(rng, 3)}
    if rng.random() < 0.3:
        message.pop(rng.choice(["role", "content"]))
    extra = rng.choice([{}, {"tool_calls": random_value(rng, 3)}, {"name": random_value(rng, 4)}])
    return CHAT, json.dumps({"messages": [{**message, **extra}]}).encode(), False


def cut_short(rng: random.Random) -> tuple[str, bytes, bool]:
    body = json.dumps(a_valid_chat(rng)).encode()
    return CHAT, body[: rng.randrange(len(body))], False


def valid_body(rng: random.Random) -> tuple[str, bytes, bool]:
    if rng.random() < 0.5:
        body = a_valid_chat(rng)
        body.update(rng.choice([{}, {"stream": True}, {"n": 2, "seed": 1}, {"temperature": 0}]))
        return CHAT, json.dumps(body).encode(), True
    body = {"prompt": [rng.randint(1, 50) for _ in range(3)], "max_tokens": 2}
    return COMPLETIONS, json.dumps(body).encode(), True


async def probe_random_bodies(probing: Probing, seen: Seen) -> None:
    tally = Tally()
    bases = (probing.gateway.base_url, probing.session.base_url)
    in_flight = asyncio.Semaphore(8)

    async def send(index: int, path: str, body: bytes, valid: bool) -> None:
        async with in_flight:
            status, answer = await probing.post(path, body, base=bases[index % 2])

        def right(status: int) -> bool:
            if valid:
                return status == 200
            # A refusal is an OpenAI error object the official clients can read.
            return status == 200 or answer.startswith(b'{"error":{"message":')

        tally.count(status, answer, right, f"{path} {body[:80]!r}")

    drawn = random_bodies(RANDOM_SEED, RANDOM_BODIES)
    await asyncio.gather(*(send(i, *probe) for i, probe in enumerate(drawn)))
    tally.into(seen)


async def still_serves(probing: Probing, seen: Seen) -> None:
    """A valid request, on the session's URL, gets its answer after the probe."""
    body = json.dumps({"model": "m", "messages": [USER], "max_tokens": 2}).encode()
    status, answer = await probing.post(CHAT, body, base=probing.session.base_url)
    reply = json.loads(answer)["choices"][0]["message"]["content"] if status == 200 else None
    if not seen.expect(reply == REPLY, f"a valid request then got {status} {answer[:120]!r}"):
        seen.rows_lost = (seen.rows_lost or 0) + 1


GATEWAY_PROBES = MappingProxyType(
    {
        "deep nesting": probe_deep_nesting,
        "oversized body": probe_oversized,
        "wrong Content-Length": probe_content_length,
        "client hang-up": probe_hang_up,
        "max_tokens=10**12": probe_max_tokens,
        f"{RANDOM_BODIES} random bodies": probe_random_bodies,
    }
)


class LoudRecords(logging.Handler):
    """Warnings and errors logged while a probe runs: a hostile body is the client's fault,
    worth a debug line at most."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(f"{record.name}: {record.getMessage()}"[:160])


@contextlib.contextmanager
def loud_records() -> Iterator[list[str]]:
    handler = LoudRecords()
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield handler.records
    finally:
        root.removeHandler(handler)


def tiny_tokenizer() -> tuple[Any, str]:
    """The tiny model's tokenizer (the gateway then renders chat prompts itself, the path
    odd messages stress most), or None and why not."""
    try:
        from rllm_agents.models import load_tokenizer

        return load_tokenizer("tiny"), ""
    except Exception as error:  # no transformers: the messages go to the engine as they are
        return None, f" (no tokenizer: {describe_error(error)})"


async def gateway_results() -> list[Result]:
    import aiohttp
    from rllm_agents.gateway import Gateway

    tokenizer, why_not = tiny_tokenizer()
    results = []
    engine = InstantEngine(tokenizer)
    async with Gateway(engine, max_body_bytes=MAX_BODY_BYTES) as gateway:
        async with aiohttp.ClientSession() as http:
            probing = Probing(gateway, gateway.open_session(), http)
            for label, probe in GATEWAY_PROBES.items():
                seen = Seen(rows_lost=0, processes_left=0)  # in-process: nothing started
                started = time.monotonic()
                with loud_records() as records:
                    for step in (probe, still_serves):
                        try:
                            await step(probing, seen)
                        except Exception as error:  # a row with its reason, the rest go on
                            seen.problems.append(describe_error(error))
                if records:
                    seen.problems.append(f"{len(records)} warnings logged: {records[0]}")
                seen.note += why_not
                results.append(result_of(label, "gateway", seen, time.monotonic() - started))
    return results


def case_gateway(case: Case) -> list[Result]:
    return asyncio.run(gateway_results())


# ---- case: processes that escape an agent program ----------------------------------------------

# A daemon's double fork: the grandchild leaves the session and is re-parented to init. The
# program exits once the grandchild has written its pid (argv[1]).
DOUBLE_FORK = """
import os, sys, time
read_end, write_end = os.pipe()
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        open(sys.argv[1], "w").write(str(os.getpid()))
        os.write(write_end, b"x")
        time.sleep(300)
    os._exit(0)
os.read(read_end, 1)
"""


def escaping_argv(how: str, pid_file: Path) -> list[str]:
    if how == "double fork":
        return [sys.executable, "-c", DOUBLE_FORK, str(pid_file)]
    # In the command's group (killed with it), or out of it by setsid; either way it keeps
    # the command's stdout open, which must not hold the run up.
    start = "setsid sleep 300" if how == "setsid sleep 300" else "sleep 300"
    return ["sh", "-c", f"{start} & echo $! > {pid_file}"]


def escaped_process(case: Case, how: str, seen: Seen) -> None:
    from rllm_agents.programs.process import run_command

    pid_file = case.folder / f"{how.replace(' ', '-')}.pid"
    mark = case.launcher.new_mark()
    env = {**child_env(), MARK_VARIABLE: mark}
    done = asyncio.run(
        run_command(escaping_argv(how, pid_file), stdin="", env=env, timeout_s=30, grace_s=2)
    )
    ended = time.monotonic()
    seen.expect(done.returncode == 0, f"exit {done.returncode}: {done.stderr[-200:]!r}")
    seen.expect(done.seconds < 10, f"held up {done.seconds:.1f} s by the left process")
    seen.expect(pid_file.is_file(), "the program started nothing (no pid written)")
    left = marked(mark)
    while left and time.monotonic() - ended < 5:
        time.sleep(0.05)
        left = marked(mark)
    seen.rows_lost = 0
    seen.add_left([f"{pid} {command_line(pid)[:80]}" for pid, _ in sorted(left)])
    kill_all(left)
    pid = pid_file.read_text().strip() if pid_file.is_file() else "?"
    seen.note = f"pid {pid} gone; the run took {done.seconds:.2f} s"


def case_escaping(case: Case) -> list[Result]:
    return [
        attempt(
            f"left by an agent command: {how}", "run_command", partial(escaped_process, case, how)
        )
        for how in ("background child", "setsid sleep 300", "double fork")
    ]


# ---- case: verl ---------------------------------------------------------------------------------


def verl_step_1_saved(output: Path) -> bool:
    """Step 1 both logged (verl's step log) and checkpointed."""
    latest = output / "checkpoints" / "latest_checkpointed_iteration.txt"
    try:
        saved = latest.read_text().strip() == "1"
    except OSError:
        return False
    attempts = sorted((output / "verl_metrics").glob("attempt-*.jsonl"))
    return saved and bool(attempts) and 1 in {row.get("step") for row in read_rows(attempts[-1])[0]}


def count_ray_leftovers(case: Case, outcome: Outcome, seen: Seen) -> None:
    """The run's processes still running after up to 60 s (Ray's among them) and the
    cluster folders it left; both removed once counted."""
    left = case.launcher.settle(outcome, RAY_GONE_WAIT_S)
    seen.add_left(left)
    ray_left = sum(is_ray(line) for line in left)
    seen.expect(not ray_left, f"{ray_left} of them Ray's")
    folders = sorted(path for path in ray_folders(list(outcome.commands.values())) if path.exists())
    seen.expect(not folders, f"{len(folders)} rllm-ray-* folders left: {[str(f) for f in folders]}")
    for folder in folders:
        shutil.rmtree(folder, ignore_errors=True)


def verl_sigterm_then_resume(case: Case, seen: Seen) -> None:
    output = case.folder / "sigterm"
    first = case.launcher.run(
        "verl-sigterm",
        verl_argv(output, steps=3),  # three asked: the SIGTERM surely comes before the end
        env=child_env(one_thread=False),
        timeout_s=VERL_TIMEOUT_S,
        ready=partial(verl_step_1_saved, output),
        send=signal.SIGTERM,
    )
    count_ray_leftovers(case, first, seen)
    if not first.signalled:
        raise Stop(f"step 1 was never checkpointed: {first.describe()}")
    seen.expect(first.returncode == 143, f"{first.status()}, expected exit 143")
    wanted = "terminated by SIGTERM; continue with --resume"
    first.ends_saying(seen, lambda line: line.endswith(wanted), repr(wanted))
    resumed = case.launcher.run(
        "verl-resume",
        verl_argv(output, "--resume", steps=2),
        env=child_env(one_thread=False),
        timeout_s=VERL_TIMEOUT_S,
    )
    count_ray_leftovers(case, resumed, seen)
    seen.expect(resumed.returncode == 0, f"the resume: {resumed.describe()}")
    rows, damaged = read_rows(output / "metrics.jsonl")
    steps = [row.get("step") for row in rows]
    seen.rows_lost = len({1, 2} - set(steps)) + damaged
    seen.expect(steps == [1, 2], f"steps {steps} after the resume")
    seen.note = f"exit 143; resumed: steps {steps}"


def verl_kill_9(case: Case, seen: Seen) -> None:
    output = case.folder / "kill-9"
    outcome = case.launcher.run(
        "verl-kill-9",
        verl_argv(output, steps=3),
        env=child_env(one_thread=False),
        timeout_s=VERL_TIMEOUT_S,
        ready=partial(verl_step_1_saved, output),  # every worker is up by then
        send=signal.SIGKILL,  # the driver alone: what its watchdog must clean up
    )
    count_ray_leftovers(case, outcome, seen)
    if not outcome.signalled:
        raise Stop(f"step 1 was never checkpointed: {outcome.describe()}")
    seen.expect(outcome.returncode == -signal.SIGKILL, outcome.describe())
    seen.rows_lost = 0
    ray = sum(is_ray(outcome.commands.get(entry, "")) for entry in outcome.at_signal)
    seen.note = (
        f"{len(outcome.at_signal)} processes at the kill ({ray} Ray's), none left after 60 s"
    )


def case_verl(case: Case) -> list[Result]:
    return [
        attempt("SIGTERM after step 1, --resume", "verl", partial(verl_sigterm_then_resume, case)),
        attempt("kill -9: Ray left after 60 s", "verl", partial(verl_kill_9, case)),
    ]


# ---- the run ------------------------------------------------------------------------------------

CASES: MappingProxyType[str, Callable[[Case], list[Result]]] = MappingProxyType(
    {
        "kill-9": case_kill_9,
        "damaged-lines": case_damaged_lines,
        "disk-full": case_disk_full,
        "signals": case_signals,
        "gateway": case_gateway,
        "escaping": case_escaping,
        "verl": case_verl,
    }
)
OPT_IN = ("verl",)  # minutes each: only when asked


def run_case(name: str, options: argparse.Namespace) -> list[Result]:
    """One case in a temporary folder of its own; whatever it started and left is ended,
    and counted in a row of its own, also when the case broke."""
    started = time.monotonic()
    folder = Path(tempfile.mkdtemp(prefix=f"rllm-faults-{name}-"))
    launcher = Launcher(folder)
    own_before = set(reaper.descendants(os.getpid()))
    print(f"faults: {name} ... (in {folder})", file=sys.stderr, flush=True)
    try:
        results = CASES[name](Case(name, folder, launcher, options))
    except Exception as error:  # a case that breaks is a row with its reason
        seen = Seen(problems=[describe_error(error)])
        results = [result_of(name, "-", seen, time.monotonic() - started)]
    finally:
        left = launcher.close()
        strays = set(reaper.descendants(os.getpid())) - own_before
        left += [f"{pid} {command_line(pid)[:80]}" for pid, _ in sorted(strays)]
        kill_all(strays)
        if not options.keep:
            shutil.rmtree(folder, ignore_errors=True)
    if left:
        seen = Seen(rows_lost=0)
        seen.add_left(left)
        results.append(result_of(f"{name}: at its end", "-", seen, 0.0))
    for result in results:
        print(f"faults:   {result.case} [{result.target}]: {result.text}", file=sys.stderr)
    return results


def cell(value: int | None) -> str:
    return "?" if value is None else str(value)


def print_table(results: list[Result], footer: str) -> None:
    headers = ("case", "target", "result", "rows lost", "processes left")
    rows = [(r.case, r.target, r.text, cell(r.rows_lost), cell(r.processes_left)) for r in results]
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        widths = [max(len(str(row[i])) for row in [headers, *rows]) for i in range(len(headers))]
        for row in [headers, tuple("-" * w for w in widths), *rows]:
            print(
                " | ".join(
                    str(value).ljust(width) for value, width in zip(row, widths, strict=True)
                )
            )
        print(footer)
        return
    table = Table(*headers, title="fault injection", caption=footer)
    styles = {"ok": "green", "FAIL": "bold red", "skipped": "yellow"}
    for result, row in zip(results, rows, strict=True):
        table.add_row(*row, style=styles.get(result.status))
    console = Console()
    if not console.is_terminal:  # a log or a pipe: no 80-column wrap of every reason
        console = Console(width=200)
    console.print(table)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--verl", action="store_true", help="also the verl case (minutes)")
    parser.add_argument(
        "--cases", help=f"comma-separated, from {', '.join(CASES)} (default: all but verl)"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--keep", action="store_true", help="keep each case's folder")
    options = parser.parse_args(argv)
    names = options.cases.split(",") if options.cases else list(CASES)
    if not options.cases and not options.verl:
        names = [name for name in names if name not in OPT_IN]
    unknown = [name for name in names if name not in CASES]
    if unknown:
        parser.error(f"unknown cases {unknown}; known: {', '.join(CASES)}")
    options.names = names
    return options


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    unignore_sigint()
    started = time.monotonic()
    results = [result for name in options.names for result in run_case(name, options)]
    seconds = time.monotonic() - started
    load = os.getloadavg()
    if options.json:
        rows = [
            {**asdict(result), "seconds": round(result.seconds, 2), "result": result.text}
            for result in results
        ]
        print(json.dumps({
            "results": rows,
            "ok": all(result.status != "FAIL" for result in results),
            "seconds": round(seconds, 1),
            "load_average": [round(value, 2) for value in load],
            "cpus": os.cpu_count(),
        }))  # fmt: skip
    else:
        failed = sum(result.status == "FAIL" for result in results)
        footer = (
            f"{len(results)} checks, {failed} failed, in {seconds:.0f} s; load average "
            f"{load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} on {os.cpu_count()} CPUs"
        )
        print_table(results, footer)
    return 1 if any(result.status == "FAIL" for result in results) else 0


if __name__ == "__main__":
    sys.exit(main())
