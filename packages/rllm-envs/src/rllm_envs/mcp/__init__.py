"""``rllm/MCP-v0``: answer a task with the tools of any Model Context Protocol servers.

The env connects to one or more MCP servers - a command run over stdio, a Streamable HTTP
URL, or plain Python functions served in-process through the same MCP client - discovers
their tools, and lets the agent call them until it gives a final answer. With no arguments it
runs the shipped task set: multi-hop questions over a small fictional encyclopedia, served by
a local BM25 retrieval server (``python -m rllm_envs.mcp.retrieval.server``).

## Observation
Text. The first observation lists the tools as JSON schemas (name, description, parameters),
says how to call them and states the question. ``info["tools"]`` holds the same tools in
OpenAI function format (``{"type": "function", "function": {...}}``), ready for a chat
template's ``tools=``. After tool calls, the observation is one block per call, in order::

    <tool_response name="search">
    1. [work-09] Tritrind fresco (score 10.14): ...
    </tool_response>

with ``status="error"`` on the tag when the tool failed or the call was rejected. Each result
is clipped to ``max_result_chars``.

## Action grammar
A string. Tool calls as ``<tool_call>{"name": "search", "arguments": {"query": "..."}}
</tool_call>`` - several in one reply run in parallel (up to ``max_parallel_calls``) - or
OpenAI-style JSON as the whole reply (``{"name", "arguments"}``, a list of them, or
``{"tool_calls": [{"function": {"name", "arguments"}}]}``; ``arguments`` may be a JSON
string). Anything else is the final answer: the text of the last ``<answer>...</answer>``, or
else the whole reply. Text up to a closing ``</think>`` is ignored.
Malformed JSON, an unknown tool name, or arguments that break the tool's input schema are
invalid: the observation says exactly what was wrong (other calls in the same reply still
run), ``info["action_valid"]`` is False and ``-format_penalty`` applies. A tool that runs and
reports an error is a valid call whose result is the error text.

## Reward
On the final answer, the grader's score in [0, 1]: ``"exact_match"`` (default; normalised
text equal to the row's ``answer`` or one of a list of answers), ``"f1"`` (token F1),
``"math_verify"`` (needs the ``math`` extra), a callable ``grader(answer, task_row)``, or an
import string ``"module:function"``. 0.0 for tool turns; ``reward=None`` grades nothing.

## Episode end
Terminated by a final answer (``info["is_correct"]``: score 1.0). Truncated after
``max_turns`` turns (default 8) or when a step's tool calls run past ``step_timeout``
(``info["step_timeout"] = True``). A server that crashes or hangs past ``call_timeout`` is
restarted and the call retried once; if that fails too the episode ends with
``info["failure"] = "tool_server"`` (``"grader"`` when the reward function raises).

## Arguments
``gym.make("rllm/MCP-v0", servers=None, tasks=None, tools=None, reward="exact_match",
max_turns=8, call_timeout=30.0, step_timeout=60.0, connect_timeout=30.0,
max_parallel_calls=8, max_result_chars=8000, format_penalty=0.0, column_map=None,
render_mode=None)``

* ``servers``: ``{"name": spec}`` (the ``mcpServers`` layout of MCP client configs is read
  too) or a list of specs. A spec is a command line (``"mcp-server-time"``), a URL
  (``"http://127.0.0.1:8000/mcp"``), or a mapping with ``command``, ``args``, ``env``, ``cwd``
  / ``url`` / ``functions``. The command ``python`` means the running interpreter. Tool names
  two servers share are exposed as ``server__tool``.
* ``tools``: Python functions (callables or ``"module:function"`` strings) served as MCP
  tools in-process; their type hints and docstrings become the schemas.
* ``tasks``: rows with ``question`` (and ``answer`` unless ``reward=None``): a list of rows, a
  JSONL/JSON/Parquet file, ``"registry:<name>"``; without servers, ``"shipped:train"``
  (130 questions, default) or ``"shipped:test"`` (32). Required when ``servers`` is given.
* Servers are shared by every env in the process that names the same spec and reused across
  episodes; ``close()`` of the last env stops them, and so does process exit.

## Snapshots
Not supported: ``snapshot()`` (and ``fork``) raise ``SnapshotUnsupported`` naming the tool
servers, whose state (whatever earlier tool calls changed) lives in the servers, outside the
process, and MCP has no way to capture or restore it.

## Async
``await env.areset(...)`` / ``await env.astep(action)`` (or ``rllm_envs.core.async_env.areset`` /
``astep`` on what ``gym.make`` returned) give exactly what ``reset`` / ``step`` give, awaiting
the tool calls on the server manager's loop instead of blocking a thread: one event loop
drives any number of envs (``metadata["rllm.native_async"]``). A cancelled call is cancelled on
the manager's loop; the shared session goes on serving.

## Version history
* v0: first version.
* v0, snapshots: ``snapshot`` / ``fork`` refuse with ``SnapshotUnsupported`` (no change to the
  episodes).
* v0, async: ``areset`` / ``astep`` (same results, no version change).
"""

from rllm_envs.mcp.env import MCPEnv

__all__ = ["MCPEnv"]
