"""Agent programs: agents that are not ``BaseAgent`` classes, run and trained as they are.

An agent program is code that talks to a model over the OpenAI API - written with the
``openai`` SDK, a framework, or as a command-line tool - and is handed a task. rllm runs it
against a gateway (:mod:`rllm_agents.gateway`) that serves the rollout engine and records every
call's tokens, so the program needs no change to be evaluated (``rllm-eval --agent-program`` /
``--agent-cmd``) or trained (``rllm-train`` with ``program.function`` / ``program.command``).

The protocol (docs/agents/gateway.md has it with examples):

* **function** ``async def run(task: dict, base_url: str, api_key: str) -> float | str | dict``,
  named ``module:function`` or ``path/to/file.py:function``;
* **command** ``python my_agent.py``: the task as one JSON line on stdin, the endpoint in
  ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` / ``OPENAI_MODEL``, its answer as the last line of
  stdout (a plain ``print(answer)``; a JSON object there is a result object); killed with its
  whole process group at the time limit;
* **result**: an answer, graded by the env (reset on the task row, stepped once with the
  answer), or ``{"reward": ..., "answer": ..., "info": {...}}``; a function may also return a
  number, its reward (a command's bare number is an answer).

Modules: :mod:`.spec` (the two forms and how they are named), :mod:`.process` (running a
command), :mod:`.result` (results and failure kinds), :mod:`.grading` (answers graded by the
env), :mod:`.workflow` (an episode per run, on the workflow engine).
"""

from rllm_agents.programs.grading import EnvGrader, Grade
from rllm_agents.programs.result import (
    FAILURE_ENDINGS,
    ProgramFailure,
    ProgramResult,
    parse_output,
    parse_result,
)
from rllm_agents.programs.spec import (
    PROGRAM_KINDS,
    AgentProgram,
    CommandProgram,
    Endpoint,
    FunctionProgram,
    ProgramSpecError,
    command_program,
    function_program,
    program_from_options,
)
from rllm_agents.programs.workflow import (
    ProgramExecutionEngine,
    ProgramWorkflow,
    ProgramWorkflows,
    failure_counts,
    program_episode,
    program_jobs,
)

__all__ = [
    "FAILURE_ENDINGS",
    "PROGRAM_KINDS",
    "AgentProgram",
    "CommandProgram",
    "Endpoint",
    "EnvGrader",
    "FunctionProgram",
    "Grade",
    "ProgramExecutionEngine",
    "ProgramFailure",
    "ProgramResult",
    "ProgramSpecError",
    "ProgramWorkflow",
    "ProgramWorkflows",
    "command_program",
    "failure_counts",
    "function_program",
    "parse_output",
    "parse_result",
    "program_episode",
    "program_from_options",
    "program_jobs",
]
