"""`HarborEnv` (``rllm/Harbor-v0``): a Harbor task folder as a Gymnasium env (contract in
__init__.py)."""

from __future__ import annotations

import json
import math
import shlex
import time
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from rllm_envs.core.failures import InfrastructureFailure
from rllm_envs.core.tasks import Row, TaskSet, TaskSources
from rllm_envs.core.text_env import TextEnv, Transition
from rllm_envs.harbor.containers import TaskContainer, task_image
from rllm_envs.harbor.task_folder import (
    HarborTask,
    HarborTaskError,
    load_task,
    shipped_task_rows,
    task_rows,
)
from rllm_envs.harbor.tools import (
    FILE_TOOLS,
    format_help,
    tool_schemas,
)
from rllm_envs.harbor.verifier import verify
from rllm_envs.mcp.actions import ToolCall
from rllm_envs.mcp.env import tool_response
from rllm_envs.swe.actions import SUBMIT, parse_swe_action
from rllm_envs.swe.docker_client import docker_client
from rllm_envs.swe.env import clip_middle, shown_size

# Where the file tools' program lives in a task's container (when it has a Python to run it).
TOOLS_DIR = "/tmp/.rllm-tools"

_INTRODUCTION = """\
You are working in a Linux container (working directory {workdir}) on this task:

<task>
{instruction}
</task>

When you are done, submit: the task's tests then run and decide the reward. Commands run as \
root with a {timeout:g} s limit each{network}.

Tools (JSON schemas):
{tools}

{format_help}"""


def harbor_task_set(tasks: str | Path | Sequence[Row] | TaskSet | None, split: str) -> TaskSet:
    """The tasks to play: the shipped ones (None), every task under a folder (one named after
    `split` inside it, when there is one), or rows with a ``task_dir``."""
    if tasks is None:
        return TaskSet("shipped:harbor", tuple(shipped_task_rows()))
    if isinstance(tasks, (str, Path)) and Path(tasks).expanduser().is_dir():
        folder = Path(tasks).expanduser()
        chosen = folder / split if (folder / split).is_dir() else folder
        return TaskSet(str(chosen), tuple(task_rows(chosen)))
    return TaskSources().load(tasks, split=split, required=("task_dir",))


class HarborEnv(TextEnv):
    """Harbor tasks in Docker containers (see the package docstring)."""

    def __init__(
        self,
        tasks: str | Path | Sequence[Row] | TaskSet | None = None,
        *,
        split: str = "train",
        max_turns: int = 30,
        command_timeout: float = 60.0,
        max_output_chars: int = 10_000,
        allow_network: bool = False,
        format_penalty: float = 0.0,
        docker_url: str | None = None,
        render_mode: str | None = None,
    ) -> None:
        if command_timeout <= 0 or max_output_chars < 200:
            raise ValueError("command_timeout must be positive and max_output_chars at least 200")
        super().__init__(
            harbor_task_set(tasks, split), max_turns=max_turns, render_mode=render_mode
        )
        self.command_timeout = float(command_timeout)
        self.max_output_chars = int(max_output_chars)
        self.allow_network = bool(allow_network)
        self.format_penalty = float(format_penalty)
        self.client = docker_client(docker_url)
        self.harbor_task: HarborTask | None = None
        self.container: TaskContainer | None = None
        self.image = ""
        self.tool_schemas: list[dict[str, Any]] = []
        self.deadline = math.inf
        self._loaded: dict[str, HarborTask] = {}
        self._images: dict[str, str] = {}
        self._has_python: dict[str, bool] = {}
        self._file_tools = resources.files("rllm_envs.swe").joinpath(FILE_TOOLS).read_bytes()

    def task_name(self) -> str:
        return "harbor"

    # -- episode start ---------------------------------------------------------------------
    def begin(self, task: Row) -> tuple[str, dict[str, Any]]:
        self._drop_container()
        harbor_task = self._task_of(task)
        task.setdefault("task_id", harbor_task.name)
        self.harbor_task = harbor_task
        image = self._images.get(str(harbor_task.path))
        if image is None:
            image = self._images[str(harbor_task.path)] = task_image(self.client, harbor_task)
        self.image = image
        network = self.allow_network and harbor_task.allow_internet
        self.container = TaskContainer.start(self.client, image, harbor_task, allow_network=network)
        self.tool_schemas = tool_schemas(with_file_tools=self._install_file_tools(image))
        self.deadline = time.monotonic() + harbor_task.agent_timeout
        observation = _INTRODUCTION.format(
            workdir=self.container.workdir,
            instruction=harbor_task.instruction.strip(),
            timeout=self.command_timeout,
            network="" if network else ", without network access",
            tools="\n".join(json.dumps(s["function"], sort_keys=True) for s in self.tool_schemas),
            format_help=format_help(),
        )
        return observation, {
            "tools": self.tool_schemas,
            "task_name": harbor_task.name,
            "task_dir": str(harbor_task.path),
            "workdir": self.container.workdir,
            "verifier_mode": harbor_task.verifier_mode,
            **shown_size(observation),
        }

    def _task_of(self, row: Row) -> HarborTask:
        folder = row.get("task_dir")
        if not isinstance(folder, str | Path):
            raise ValueError(f"rllm/Harbor-v0 needs a task row with a task_dir, got {sorted(row)}")
        if str(folder) not in self._loaded:
            try:
                self._loaded[str(folder)] = load_task(folder)
            except HarborTaskError as error:
                raise ValueError(f"rllm/Harbor-v0 cannot use this task: {error}") from error
        return self._loaded[str(folder)]

    def _install_file_tools(self, image: str) -> bool:
        """Whether the image has a Python for the file tools (they are copied in when it has)."""
        assert self.container is not None
        if image not in self._has_python:
            probe = self.container.exec("command -v python3", timeout=30)
            self._has_python[image] = probe.exit_code == 0
        if self._has_python[image]:
            self.container.put_files(TOOLS_DIR, {FILE_TOOLS: self._file_tools}, {FILE_TOOLS: 0o644})
        return self._has_python[image]

    # -- turns -----------------------------------------------------------------------------
    def act(self, action: str) -> Transition:
        assert self.harbor_task is not None and self.container is not None
        parsed = parse_swe_action(action)
        last_turn = self.max_turns is not None and self.turn >= self.max_turns
        if parsed.error is not None:
            transition = Transition.invalid(
                f"Invalid action: {parsed.error}. {format_help()}", self.format_penalty
            )
            if last_turn:
                return self._finish(transition.observation, "turn_limit", transition.info)
            transition.info.update(shown_size(transition.observation))
            return transition
        blocks, names = [], []
        for call in parsed.calls:
            if call.name == SUBMIT:
                return self._finish("\n".join(blocks), "submit", {"tool_calls": names + [SUBMIT]})
            if time.monotonic() > self.deadline:
                info = {"tool_calls": names}
                return self._finish("\n".join(blocks), "agent_timeout", info)
            output, ok = self._run_tool(call)
            names.append(call.name)
            blocks.append(tool_response(call.name, output, is_error=not ok))
        observation = "\n".join(blocks)
        info: dict[str, Any] = {"tool_calls": names}
        if last_turn:
            return self._finish(observation, "turn_limit", info)
        info.update(shown_size(observation))
        return Transition(observation, info=info)

    def play_oracle(self) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """The running episode played by the task's own solution (``solution/solve.sh``), then
        graded: one step's result. A task's built-in check (its oracle should score 1.0)."""
        refused = self._refused_step()
        if refused is not None:
            return refused
        assert self.harbor_task is not None and self.container is not None
        self.turn += 1
        task = self.harbor_task
        try:
            if not task.has_oracle:
                raise ValueError(f"Harbor task {task.name!r} has no solution/solve.sh")
            self.container.put_folder("/solution", task.solution_dir)
            run = self.container.exec("bash /solution/solve.sh", timeout=task.agent_timeout)
            result = self._finish(clip_middle(run.output, self.max_output_chars), "oracle", {})
        except InfrastructureFailure as failure:
            result = self._failed_turn(failure)
        return self._step_result(result)

    def _run_tool(self, call: ToolCall) -> tuple[str, bool]:
        assert self.container is not None
        if call.name == "bash":
            return self._bash(call.arguments["command"])
        if not any(s["function"]["name"] == call.name for s in self.tool_schemas):
            return f"the {call.name} tool needs a python3 in the task's image: use bash", False
        request = json.dumps(
            {"tool": call.name, "arguments": call.arguments, "workdir": self.container.workdir}
        ).encode()
        self.container.put_files(TOOLS_DIR, {"request.json": request}, {"request.json": 0o600})
        program = shlex.quote(f"{TOOLS_DIR}/{FILE_TOOLS}")
        result = self.container.exec(
            f"python3 -I -S {program} < {TOOLS_DIR}/request.json", timeout=self.command_timeout
        )
        try:
            reply = json.loads(result.output)
            return clip_middle(str(reply["output"]), self.max_output_chars), bool(reply["ok"])
        except (ValueError, KeyError, TypeError):
            return f"the {call.name} tool failed: {result.output.strip()[-500:]}", False

    def _bash(self, command: str) -> tuple[str, bool]:
        assert self.container is not None
        result = self.container.exec(command, timeout=self.command_timeout)
        text = clip_middle(result.output, self.max_output_chars)
        if result.timed_out:
            limit = self.command_timeout
            return f"{text}\n[timed out after {limit:g} s: the command was killed]", False
        return f"exit code: {result.exit_code}\n{text}".rstrip("\n"), True

    # -- the end ---------------------------------------------------------------------------
    def _finish(self, observation: str, ended_by: str, info: dict[str, Any]) -> Transition:
        """Run the task's tests on what the agent left; the reward is theirs."""
        assert self.harbor_task is not None and self.container is not None
        task = self.harbor_task
        try:
            verdict = verify(
                self.client, task, self.container, self.image, allow_network=self.allow_network
            )
        finally:
            self._drop_container()
        reward = verdict.reward
        if info.get("action_valid") is False and self.format_penalty:
            reward -= self.format_penalty
        info.update(ended_by=ended_by, is_correct=verdict.reward >= 1.0, **verdict.summary())
        ending = {
            "submit": "Submitted.",
            "oracle": "The task's solution ran.",
            "agent_timeout": f"The agent's time ({task.agent_timeout:g} s) ran out.",
        }.get(ended_by, "The turn limit was reached.")
        result = f"reward {verdict.reward:g}" + (f" ({verdict.error})" if verdict.error else "")
        observation = f"{observation}\n{ending} The tests ran: {result}.".strip()
        info.update(shown_size(observation))
        terminated = ended_by in ("submit", "oracle")
        return Transition(
            observation, reward, terminated=terminated, truncated=not terminated, info=info
        )

    def _drop_container(self) -> None:
        if self.container is not None:
            self.container.remove()
            self.container = None

    def close(self) -> None:
        self._drop_container()
        super().close()
