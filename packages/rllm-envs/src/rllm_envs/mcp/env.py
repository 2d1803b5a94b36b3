"""`MCPEnv` (``rllm/MCP-v0``): answer a task with the tools of any MCP servers (see the package
docstring for the contract card)."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rllm_envs.core import spaces
from rllm_envs.core.async_env import NATIVE_ASYNC_KEY, Turn, adrive, drive
from rllm_envs.core.extras import require_extra
from rllm_envs.core.failures import InfrastructureFailure
from rllm_envs.core.snapshots import SnapshotUnsupported
from rllm_envs.core.tasks import Row, TaskSources
from rllm_envs.core.text_env import TextEnv, Transition
from rllm_envs.mcp.actions import ParsedAction, ToolCall, parse_action
from rllm_envs.mcp.rewards import resolve_grader
from rllm_envs.mcp.servers import ServerSpec, functions_spec, parse_servers

RETRIEVAL_DATA = Path(__file__).parent / "retrieval" / "data"
SHIPPED_TASKS = TaskSources(
    shipped={"train": RETRIEVAL_DATA / "train.jsonl", "test": RETRIEVAL_DATA / "test.jsonl"}
)
RETRIEVAL_SERVER = {
    "retrieval": {"command": sys.executable, "args": ["-m", "rllm_envs.mcp.retrieval.server"]}
}

FORMAT_HELP = (
    'Call a tool with <tool_call>{"name": "TOOL", "arguments": {...}}</tool_call> (several '
    "calls in one reply run in parallel). When you know the answer, reply "
    "<answer>your answer</answer>."
)


@dataclass(frozen=True)
class RoutedTool:
    """A tool as the agent sees it, and where its calls go."""

    exposed_name: str
    server: ServerSpec
    name: str  # the server's own name for it
    schema: dict[str, Any]  # the MCP tool listing entry

    def openai_schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.exposed_name,
                "description": self.schema.get("description", ""),
                "parameters": self.schema.get("input_schema", {"type": "object"}),
            },
        }


def route_tools(
    listings: Sequence[tuple[ServerSpec, list[dict[str, Any]]]],
) -> dict[str, RoutedTool]:
    """Expose every server's tools under their own names; names two servers share get the
    server's name as a prefix (``server__tool``) so every call has one destination."""
    counts: dict[str, int] = {}
    for _, tools in listings:
        for tool in tools:
            counts[tool["name"]] = counts.get(tool["name"], 0) + 1
    routed = {}
    for spec, tools in listings:
        for tool in tools:
            exposed = tool["name"] if counts[tool["name"]] == 1 else f"{spec.name}__{tool['name']}"
            routed[exposed] = RoutedTool(exposed, spec, tool["name"], tool)
    return routed


def schema_validator(schema: dict[str, Any]) -> Any:
    """A JSON-schema validator for a tool's input schema, or None when the server's schema is
    itself invalid (the server then judges the arguments)."""
    import jsonschema

    validator_class = jsonschema.validators.validator_for(
        schema, default=jsonschema.Draft7Validator
    )
    try:
        validator_class.check_schema(schema)
    except jsonschema.SchemaError:
        return None
    return validator_class(schema)


def argument_errors(validator: Any, arguments: dict[str, Any]) -> str | None:
    """Why `arguments` break the tool's input schema (the first few problems), or None."""
    if validator is None:
        return None
    errors = sorted(validator.iter_errors(arguments), key=lambda error: list(error.path))
    if not errors:
        return None
    return "; ".join(
        f"{'.'.join(map(str, error.path)) or 'arguments'}: {error.message}" for error in errors[:5]
    )


def tool_response(name: str, text: str, *, is_error: bool) -> str:
    status = ' status="error"' if is_error else ""
    return f'<tool_response name="{name}"{status}>\n{text}\n</tool_response>'


class MCPEnv(TextEnv):
    """Answer tasks with tools from MCP servers; reward from a grader on the final answer."""

    # Tool calls go to the server manager's loop: areset/astep await them, no thread waits.
    metadata = {**TextEnv.metadata, NATIVE_ASYNC_KEY: True}

    def __init__(
        self,
        servers: Any = None,
        tasks: Any = None,
        *,
        tools: Sequence[Callable[..., Any] | str] | None = None,
        reward: str | Callable[..., float] | None = "exact_match",
        max_turns: int = 8,
        call_timeout: float = 30.0,
        step_timeout: float = 60.0,
        connect_timeout: float = 30.0,
        max_parallel_calls: int = 8,
        max_result_chars: int = 8000,
        format_penalty: float = 0.0,
        column_map: dict[str, str] | None = None,
        render_mode: str | None = None,
    ) -> None:
        require_extra("mcp", "mcp")
        if servers is None and tools is None:
            servers, tasks = RETRIEVAL_SERVER, ("shipped:train" if tasks is None else tasks)
        if tasks is None:
            raise ValueError(
                "pass tasks= (rows with a 'question', and an 'answer' to grade) for your servers"
            )
        for name, value in (("call_timeout", call_timeout), ("step_timeout", step_timeout)):
            if value <= 0:
                raise ValueError(f"{name} must be positive, got {value}")
        required = ["question"] if reward is None else ["question", "answer"]
        super().__init__(
            SHIPPED_TASKS.load(tasks, column_map=column_map, required=required),
            max_turns=max_turns,
            render_mode=render_mode,
        )
        self.grader = None if reward is None else resolve_grader(reward)
        self.call_timeout = call_timeout
        self.step_timeout = step_timeout
        self.max_parallel_calls = max_parallel_calls
        self.max_result_chars = max_result_chars
        self._result_space = spaces.observation_space(max_result_chars)
        self.format_penalty = format_penalty
        specs = list(parse_servers(servers)) if servers is not None else []
        if tools:
            specs.append(functions_spec(tools))
        from rllm_envs.mcp.manager import shared_manager

        self._manager = shared_manager()
        self.connect_timeout = connect_timeout
        self._connections: dict[ServerSpec, Any] = {}
        try:
            for spec in specs:
                self._connections[spec] = self._manager.acquire(spec, connect_timeout)
        except BaseException:
            self.close()
            raise
        self.tools = route_tools([(spec, conn.tools) for spec, conn in self._connections.items()])
        self.tool_schemas = [tool.openai_schema() for tool in self.tools.values()]
        self._validators = {
            name: schema_validator(tool.schema.get("input_schema", {}))
            for name, tool in self.tools.items()
        }

    # -- episode ---------------------------------------------------------------------------
    def begin(self, task: Row) -> tuple[str, dict[str, Any]]:
        listing = "\n".join(
            json.dumps(schema["function"], sort_keys=True) for schema in self.tool_schemas
        )
        observation = (
            "Answer the question. You can use these tools (JSON schemas):\n"
            f"{listing}\n\n{FORMAT_HELP}\n\nQuestion: {task['question']}"
        )
        return observation, {"tools": self.tool_schemas}

    async def abegin(self, task: Row) -> tuple[str, dict[str, Any]]:
        return self.begin(task)  # no I/O: the servers were connected when the env was made

    def act(self, action: str) -> Transition:
        return drive(self._act_turn(action))

    async def aact(self, action: str) -> Transition:
        return await adrive(self._act_turn(action))

    def _act_turn(self, action: str) -> Turn[Transition]:
        parsed = parse_action(action)
        if parsed.error is not None:
            return self._invalid(f"Invalid tool call: {parsed.error}.")
        if parsed.answer is not None:
            return self._final(parsed.answer)
        if len(parsed.tool_calls) > self.max_parallel_calls:
            return self._invalid(
                f"Too many tool calls in one reply ({len(parsed.tool_calls)}); "
                f"the limit is {self.max_parallel_calls}."
            )
        return (yield from self._run_calls(parsed))

    def _invalid(self, message: str) -> Transition:
        return Transition.invalid(f"{message} {FORMAT_HELP}", self.format_penalty)

    def _final(self, answer: str) -> Transition:
        if self.grader is None:
            return Transition("Answer recorded.", terminated=True, info={"answer": answer})
        try:
            score = float(self.grader(answer, self.task))
        except Exception as error:  # noqa: BLE001 - a broken grader is not the agent's fault
            raise InfrastructureFailure("grader", f"the reward function failed: {error}") from error
        correct = score >= 1.0
        verdict = "correct" if correct else "not correct"
        return Transition(
            f"Your answer {answer!r} is {verdict}.",
            reward=score,
            terminated=True,
            info={"answer": answer, "is_correct": correct},
        )

    def _check(self, call: ToolCall) -> str | None:
        """Why a call cannot be sent (unknown tool, arguments off-schema), or None."""
        tool = self.tools.get(call.name)
        if tool is None:
            return f"Unknown tool {call.name!r}. Available tools: {', '.join(sorted(self.tools))}."
        problems = argument_errors(self._validators[call.name], call.arguments)
        return f"Invalid arguments for {call.name!r}: {problems}." if problems else None

    def _run_calls(self, parsed: ParsedAction) -> Turn[Transition]:
        problems = [self._check(call) for call in parsed.tool_calls]
        sendable = [
            call for call, problem in zip(parsed.tool_calls, problems, strict=True) if not problem
        ]
        results = iter((yield from self._call_all(sendable)) if sendable else [])
        blocks, errors = [], 0
        for call, problem in zip(parsed.tool_calls, problems, strict=True):
            if problem:
                blocks.append(tool_response(call.name, problem, is_error=True))
                errors += 1
                continue
            result = next(results)
            if result is None:  # the step's time limit ran out before this call finished
                return Transition(
                    f"The tool calls did not finish within the step time limit "
                    f"({self.step_timeout:g} s).",
                    truncated=True,
                    info={"tool_calls": [c.name for c in parsed.tool_calls], "step_timeout": True},
                )
            text = spaces.fit_observation(result.text, self._result_space)
            blocks.append(tool_response(call.name, text, is_error=result.is_error))
            errors += int(result.is_error)
        return Transition(
            "\n".join(blocks),
            reward=(-self.format_penalty or 0.0) if any(problems) else 0.0,
            info={
                "action_valid": not any(problems),
                "tool_calls": [call.name for call in parsed.tool_calls],
                "tool_errors": errors,
            },
        )

    def _call_all(self, calls: Sequence[ToolCall]) -> Turn[list[Any]]:
        """Run calls concurrently on the manager's loop; None for calls the step limit cut."""
        import anyio  # with the mcp extra, like everything on the manager's loop

        from rllm_envs.mcp.connection import ServerUnavailable

        async def one(call: ToolCall) -> Any:
            tool = self.tools[call.name]
            return await self._connections[tool.server].call(
                tool.name, call.arguments, self.call_timeout
            )

        async def all_calls() -> list[Any]:
            if len(calls) == 1:  # the common case, without the task bookkeeping
                try:
                    with anyio.fail_after(self.step_timeout):
                        return [await one(calls[0])]
                except TimeoutError:
                    return [None]
            tasks = [asyncio.ensure_future(one(call)) for call in calls]
            done, pending = await asyncio.wait(tasks, timeout=self.step_timeout)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
            return [task.result() if task in done else None for task in tasks]

        # A call may restart its server once (connect + second try) inside the step limit.
        deadline = self.step_timeout + 2 * self.connect_timeout
        try:
            return (yield self._manager.io(all_calls, deadline))
        except ServerUnavailable as error:
            raise InfrastructureFailure("tool_server", str(error)) from error

    # -- snapshots (rllm_envs.core.snapshots) ---------------------------------------------
    def capture_state(self) -> Any:
        # The episode's state is partly in the servers (whatever earlier tool calls changed
        # there), which the protocol gives no way to read or set: a restored episode could
        # not promise the same tool results.
        servers = (
            ", ".join(f"{spec.name!r} ({spec.transport})" for spec in self._connections) or "none"
        )
        raise SnapshotUnsupported(
            f"MCPEnv cannot be snapshotted: the state of its tool server(s) {servers} lives "
            "in the server, outside this process, and MCP has no way to capture or restore it"
        )

    # -- cleanup ---------------------------------------------------------------------------
    def close(self) -> None:
        connections, self._connections = getattr(self, "_connections", {}), {}
        for spec in connections:
            self._manager.release(spec)
        super().close()
