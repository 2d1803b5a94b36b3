"""`SWEEnv` (``rllm/SWE-v0``): fix a real bug in a real repository (contract in __init__.py)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from importlib import resources
from typing import Any

from rllm_envs.core.async_env import NATIVE_ASYNC_KEY, Io, Turn, adrive, drive
from rllm_envs.core.failures import InfrastructureFailure
from rllm_envs.core.tasks import Row, TaskSet
from rllm_envs.core.text_env import TextEnv, Transition
from rllm_envs.mcp.actions import ToolCall
from rllm_envs.mcp.env import tool_response
from rllm_envs.sandbox.execution import SCRATCH_DIR
from rllm_envs.sandbox.policy import SandboxPolicy
from rllm_envs.setup.command import setup_command
from rllm_envs.swe.actions import FORMAT_HELP, SUBMIT, TOOL_SCHEMAS, parse_swe_action
from rllm_envs.swe.builder.images import BASE_LABEL
from rllm_envs.swe.containers import ContainerSettings, Workspace, WorkspacePool
from rllm_envs.swe.grading import (
    GIT_IDENTITY,
    AgentPatch,
    Grade,
    buggy_state_job,
    prepare_workdir,
    run_graded_tests,
    take_agent_patch,
)
from rllm_envs.swe.snapshots import SNAPSHOT_METHODS, SWEEpisodeState, sweep_snapshot_images
from rllm_envs.swe.tasks import SWETask, TaskRowError, load_swe_tasks, to_swe_task

# Per command: wall_seconds is the command's time limit; memory and processes are the
# container's (the agent's commands, their children and the tests they run share them).
DEFAULT_POLICY = SandboxPolicy(
    cpu_seconds=60,
    wall_seconds=60,
    memory_mb=2048,
    max_processes=128,
    max_output_bytes=1 << 20,
    scratch_mb=64,
    max_file_mb=64,
)
FILE_TOOLS = "file_tools.py"
# Roughly four characters a token for code and English: info["output_tokens"] is an estimate.
CHARS_PER_TOKEN = 4

_INTRODUCTION = """\
You are working in a Git repository at {workdir} (the project {repo}). A user reported this \
problem:

<problem_statement>
{statement}
</problem_statement>

Change the library code (not the tests) so that the problem is fixed. Hidden tests check your \
fix when you submit; you may write and run your own tests. Commands run without network \
access, as an unprivileged user, with a {timeout:g} s limit each.

Tools (JSON schemas):
{tools}

{format_help}"""


def shown_size(observation: str) -> dict[str, int]:
    """How much an observation shows the model: its characters and an estimate of its tokens
    (``info["output_chars"]``, ``info["output_tokens"]``)."""
    return {
        "output_chars": len(observation),
        "output_tokens": math.ceil(len(observation) / CHARS_PER_TOKEN),
    }


def clip_middle(text: str, limit: int) -> str:
    """`text` whole, or its start and end around a marker saying how much was cut."""
    if len(text) <= limit:
        return text
    half = limit // 2
    cut = len(text) - 2 * half
    return f"{text[:half]}\n[... {cut} characters of output cut ...]\n{text[-half:]}"


class SWEEnv(TextEnv):
    """Repository-level bug fixing in Docker containers (see the package docstring)."""

    # Commands' replies are read off the container's stream: astep awaits them on the loop.
    metadata = {**TextEnv.metadata, NATIVE_ASYNC_KEY: True}

    def __init__(
        self,
        tasks: str | Sequence[Row] | TaskSet | None = None,
        *,
        split: str = "train",
        max_turns: int = 50,
        command_timeout: float | None = None,
        test_timeout: float = 120.0,
        policy: SandboxPolicy | Mapping[str, Any] | None = None,
        pool_spares: int = 1,
        max_output_chars: int = 10_000,
        hide_tests: bool = True,
        format_penalty: float = 0.0,
        column_map: Mapping[str, str] | None = None,
        docker_url: str | None = None,
        snapshot_method: str = "auto",
        render_mode: str | None = None,
    ) -> None:
        if snapshot_method not in SNAPSHOT_METHODS:
            raise ValueError(
                f"snapshot_method must be one of {sorted(SNAPSHOT_METHODS)}, "
                f"got {snapshot_method!r}"
            )
        super().__init__(
            load_swe_tasks(tasks, split, column_map), max_turns=max_turns, render_mode=render_mode
        )
        if isinstance(policy, Mapping):
            policy = SandboxPolicy(**policy)
        policy = policy or DEFAULT_POLICY
        if command_timeout is not None:
            policy = policy.with_limits(
                wall_seconds=command_timeout, cpu_seconds=max(policy.cpu_seconds, command_timeout)
            )
        if test_timeout <= 0 or max_output_chars < 200:
            raise ValueError("test_timeout must be positive and max_output_chars at least 200")
        self.policy = policy
        self.test_timeout = float(test_timeout)
        self.max_output_chars = int(max_output_chars)
        self.hide_tests = hide_tests
        self.format_penalty = float(format_penalty)
        self.tool_schemas = [dict(schema) for schema in TOOL_SCHEMAS]
        self.pool = WorkspacePool(
            ContainerSettings(policy), spares=pool_spares, base_url=docker_url
        )
        self.snapshot_method = snapshot_method
        sweep_snapshot_images(self.pool.client)
        self.policy_description = {
            **policy.describe(),
            "backend": "docker",
            "filesystem": "writable repository, /tmp and /scratch; the rest read-only to the user",
            "command_timeout_seconds": policy.wall_seconds,
            "user": f"uid {policy.uid} (not root)",
        }
        self.swe_task: SWETask | None = None
        self.workspace: Workspace | None = None
        self.base_commit = ""
        self._file_tools = resources.files("rllm_envs.swe").joinpath(FILE_TOOLS).read_bytes()

    def task_name(self) -> str:
        return "swe"

    # -- episode start ---------------------------------------------------------------------
    def begin(self, task: Row) -> tuple[str, dict[str, Any]]:
        self._drop_workspace()
        try:
            swe_task = to_swe_task(task)
        except TaskRowError as error:
            raise ValueError(f"rllm/SWE-v0 cannot use this task: {error}") from error
        task.setdefault("task_id", swe_task.instance_id)
        self.swe_task = swe_task
        self._check_snapshot(swe_task)
        workspace = self.pool.take(swe_task.image)
        self.workspace = workspace
        prepare_workdir(self.pool, workspace, swe_task)
        job, files = buggy_state_job(swe_task)
        job.update(
            remove=list(swe_task.hidden_files) if self.hide_tests else [],
            clean=True,
            git_init=GIT_IDENTITY,
        )
        reply = workspace.run_job(job, files=files, env=swe_task.environment)
        if reply.get("error"):
            raise InfrastructureFailure(
                "sandbox", f"could not put the repository at the task's state: {reply['error']}"
            )
        self.base_commit = reply["head"]
        observation = _INTRODUCTION.format(
            workdir=swe_task.workdir,
            repo=swe_task.repo or swe_task.instance_id,
            statement=swe_task.problem_statement.strip(),
            timeout=self.policy.wall_seconds,
            tools="\n".join(json.dumps(s["function"], sort_keys=True) for s in self.tool_schemas),
            format_help=FORMAT_HELP,
        )
        return observation, {
            "tools": self.tool_schemas,
            "instance_id": swe_task.instance_id,
            "repo": swe_task.repo,
            "workdir": swe_task.workdir,
            "sandbox_policy": self.policy_description,
            **shown_size(observation),
        }

    def _check_snapshot(self, task: SWETask) -> None:
        if not task.base:
            return
        labelled = self.pool.image_labels(task.image).get(BASE_LABEL)
        if labelled and labelled != task.base:
            raise InfrastructureFailure(
                "sandbox",
                f"the image {task.image} holds snapshot {labelled}, the task wants {task.base}: "
                f"rebuild the images ({setup_command('swe')})",
            )

    # -- turns -----------------------------------------------------------------------------
    def act(self, action: str) -> Transition:
        return drive(self._act_turn(action))

    async def aact(self, action: str) -> Transition:
        return await adrive(self._act_turn(action))

    def _act_turn(self, action: str) -> Turn[Transition]:
        """One turn; the commands' replies are awaited on the container stream (natively), the
        episode's end (patch, a fresh container, the hidden tests) runs in a thread."""
        assert self.swe_task is not None and self.workspace is not None
        parsed = parse_swe_action(action)
        last_turn = self.max_turns is not None and self.turn >= self.max_turns
        if parsed.error is not None:
            transition = Transition.invalid(
                f"Invalid action: {parsed.error}. {FORMAT_HELP}", self.format_penalty
            )
            if last_turn:
                return (
                    yield self._finish_io(transition.observation, "turn_limit", transition.info)
                )
            transition.info.update(shown_size(transition.observation))
            transition.info["sandbox_policy"] = self.policy_description
            return transition
        blocks, names = [], []
        for call in parsed.calls:
            if call.name == SUBMIT:
                info = {"tool_calls": names + [SUBMIT]}
                return (yield self._finish_io("\n".join(blocks), "submit", info))
            output, ok = yield from self._run_tool(call)
            names.append(call.name)
            blocks.append(tool_response(call.name, output, is_error=not ok))
        observation = "\n".join(blocks)
        info = {"tool_calls": names, "sandbox_policy": self.policy_description}
        if last_turn:
            return (yield self._finish_io(observation, "turn_limit", info))
        info.update(shown_size(observation))
        return Transition(observation, info=info)

    def _run_tool(self, call: ToolCall) -> Turn[tuple[str, bool]]:
        if call.name == "bash":
            return (yield from self._bash(call.arguments["command"]))
        assert self.swe_task is not None and self.workspace is not None
        budget = self.max_output_chars
        result = yield self.workspace.io_run(
            (self.pool.settings.python, "-I", "-S", f"{SCRATCH_DIR}/{FILE_TOOLS}"),
            files={FILE_TOOLS: self._file_tools},
            stdin=json.dumps(
                {"tool": call.name, "arguments": call.arguments, "workdir": self.swe_task.workdir}
            ).encode(),
            env=self.swe_task.environment,
        )
        try:
            reply = json.loads(result.stdout)
            return clip_middle(str(reply["output"]), budget), bool(reply["ok"])
        except (ValueError, KeyError, TypeError):
            detail = result.stderr.strip()[-500:] or result.status
            return f"the {call.name} tool failed: {detail}", False

    def _bash(self, command: str) -> Turn[tuple[str, bool]]:
        assert self.swe_task is not None and self.workspace is not None
        script = f"exec 2>&1\ncd {self.swe_task.workdir} || exit 97\n{command}\n"
        result = yield self.workspace.io_run(("bash", "-c", script), env=self.swe_task.environment)
        text = clip_middle(result.stdout, self.max_output_chars)
        limit = self.policy.wall_seconds
        if result.timed_out:
            return f"{text}\n[timed out after {limit:g} s: the command was killed]", False
        if result.output_truncated:
            size = self.policy.max_output_bytes
            text += f"\n[output limit of {size} bytes reached: the command was stopped]"
            return text, False
        return f"exit code: {result.exit_code}\n{text}".rstrip("\n"), True

    # -- the end ---------------------------------------------------------------------------
    def _finish_io(self, observation: str, ended_by: str, info: dict[str, Any]) -> Io:
        # Docker SDK calls (a container removed, one started to grade): blocking, so awaited
        # in a thread. An episode ends once; its seconds of grading dwarf the hop.
        return Io.in_thread(lambda: self._finish(observation, ended_by=ended_by, info=info))

    def _finish(self, observation: str, *, ended_by: str, info: dict[str, Any]) -> Transition:
        """Take the diff, stop the agent's container, grade in a fresh one."""
        assert self.swe_task is not None and self.workspace is not None
        task = self.swe_task
        patch = take_agent_patch(self.workspace, task, self.base_commit)
        self._drop_workspace()  # background processes die with it
        grade = self._grade(task, patch)
        reward = 1.0 if grade.resolved else 0.0
        if info.get("action_valid") is False and self.format_penalty:
            reward -= self.format_penalty
        info.update(
            ended_by=ended_by,
            is_correct=grade.resolved,
            patch=patch.patch,
            dropped_files=list(patch.dropped),
            sandbox_policy=self.policy_description,
            **grade.summary(),
        )
        if patch.error:
            info["patch_error"] = patch.error
        verdict = "resolved: every hidden test passed" if grade.resolved else grade.reason
        ending = "Submitted." if ended_by == "submit" else "The turn limit was reached."
        observation = f"{observation}\n{ending} Result: {verdict}.".strip()
        info.update(shown_size(observation))
        return Transition(observation, reward, terminated=ended_by == "submit", info=info)

    def _grade(self, task: SWETask, patch: AgentPatch) -> Grade:
        # Without a diff the buggy tree is graded as it is: the verdict comes from the tests,
        # not from an assumption.
        graded = "" if patch.error else patch.patch
        return run_graded_tests(self.pool, task, graded, timeout=self.test_timeout)

    # -- snapshots (rllm_envs.core.snapshots) ---------------------------------------------
    def capture_state(self) -> SWEEpisodeState:
        workspace, task = self.workspace, self.swe_task
        captured = None
        if workspace is not None and task is not None:
            captured = SNAPSHOT_METHODS[self.snapshot_method](self.pool, workspace, task)
        return SWEEpisodeState(task, self.base_commit, captured)

    def restore_state(self, state: SWEEpisodeState) -> None:
        self.swe_task, self.base_commit = state.swe_task, state.base_commit
        if state.workspace is None or state.swe_task is None:
            self._drop_workspace()  # the snapshot's episode had ended: no container
            return
        current, self.workspace = self.workspace, None
        self.workspace = state.workspace.restore(self.pool, current, state.swe_task)

    @staticmethod
    def release_state(state: SWEEpisodeState) -> None:
        state.release()

    def _drop_workspace(self) -> None:
        if self.workspace is not None:
            self.workspace.remove()
            self.workspace = None

    def close(self) -> None:
        self._drop_workspace()
        pool = getattr(self, "pool", None)
        if pool is not None:
            pool.close()
        super().close()
