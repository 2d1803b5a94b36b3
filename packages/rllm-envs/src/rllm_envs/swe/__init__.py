"""``rllm/SWE-v0``: fix a real bug in a real Python repository; hidden tests give the reward.

Each episode is one task instance: a pinned open-source project in a Docker container, put at a
buggy state, and a bug report. The agent explores and edits the repository with tools; when it
submits (or runs out of turns) its diff is tested in a fresh container against hidden tests.
Shipped: 10 small pure-Python projects (sdists with their own test suites, pinned by sha256),
with bugs injected procedurally and kept only when validated (``rllm_envs.swe.builder``;
docs/envs/swe.md gives the counts). SWE-bench-format rows with their own images work too.

## Observation
Text. First: the problem statement, the repository path, the tools as JSON schemas and how to
call them (``info["tools"]`` holds the same tools in OpenAI function format). After a turn:
one block per call, in order::

    <tool_response name="bash">
    exit code: 0
    ...output...
    </tool_response>

with ``status="error"`` on the tag when a tool failed (a timeout, ``old_str`` not found...).
Output longer than ``max_output_chars`` keeps its start and end around
``[... N characters of output cut ...]``; a command killed at its time limit ends with
``[timed out after N s: the command was killed]``, one that writes more than the policy's
``max_output_bytes`` with ``[output limit of N bytes reached: the command was stopped]``.

## Action grammar
Tool calls, as in ``rllm/MCP-v0``: ``<tool_call>{"name": "bash", "arguments": {"command":
"pytest -x"}}</tool_call>`` blocks (up to 8 per reply, run in order) or OpenAI-style JSON.
Or, for bash-only agents, exactly one ```` ```bash ```` block holding a command; a block holding
only ``submit`` submits. Tools:

* ``bash(command)``: a fresh ``bash -c`` in the repository root (no state carries over;
  processes left running are killed when it ends);
* ``view(path, start_line?, end_line?)``: a file with line numbers, or a directory two levels
  deep;
* ``str_replace(path, old_str, new_str)``: ``old_str`` must occur exactly once;
* ``create(path, content)``: a new file (existing files are not overwritten);
* ``search(pattern, path?)``: lines containing a literal string;
* ``submit()``: end the episode and grade the repository as it is.

Anything else (no call, malformed JSON, an unknown tool, wrong arguments) is an invalid action:
nothing runs, the observation says what was wrong, ``info["action_valid"]`` is False and
``-format_penalty`` applies (default 0).

## Reward
On ``submit`` or at the turn limit: the repository's diff (new files included) is taken out of
the agent's container, which is then removed; changes to test files and test configuration
(``tests/``, ``test_*.py``, ``conftest.py``, ``pytest.ini``, ``setup.cfg``, ``tox.ini``,
``pyproject.toml``, ``*.pth``, ``sitecustomize.py``...) are dropped; the rest is applied to a
fresh container at the buggy state with every test file in its original form, and the files
holding FAIL_TO_PASS and PASS_TO_PASS run. Reward 1.0 when every one of those tests passed
(SWE-bench's "resolved"), else 0.0. The report is a JUnit XML file written in that fresh
container, cross-checked with pytest's exit code; a missing test, a collection error or an
interrupted run scores 0. ``info`` then holds ``is_correct``, ``test_results`` (node id →
passed / failed / error / skipped / missing), ``tests_passed``, ``tests_total``, ``patch``,
``dropped_files``, ``patch_applied``, ``test_exit_code`` and ``reason``.

## Episode end
Terminated by ``submit``. Truncated at ``max_turns`` (default 50), graded all the same. A
container that cannot start or breaks, or a grader that cannot run, ends the episode with
``info["failure"]`` (``"sandbox"`` or ``"grader"``), not a reward.

## The container
Started from the task's image (or taken from a warm pool of started ones), the repository at the
buggy state as a fresh Git repository with one commit (fixed author and date; no history, no
reflog of the fix), the test files holding FAIL_TO_PASS tests removed (they come back only for
grading), caches cleared. No network; commands run as an unprivileged user (the repository,
/tmp and /scratch are writable, nothing else), with the policy's memory, process, CPU,
file-size, output and time limits. ``info["sandbox_policy"]`` reports the policy; every step's
info has ``turn``, ``output_chars`` and ``output_tokens`` (an estimate: characters / 4).
Containers carry the sandbox's labels and are removed by ``close()``, at exit, or - when the
owning process was killed - by the next env or sandbox that starts.

## Arguments
``gym.make("rllm/SWE-v0", tasks=None, split="train", max_turns=50, command_timeout=None,
test_timeout=120.0, policy=None, pool_spares=1, max_output_chars=10000, hide_tests=True,
format_penalty=0.0, column_map=None, docker_url=None, snapshot_method="auto", render_mode=None)``

* ``tasks``: ``"shipped:train"`` (default, or ``split="test"``), a JSONL/JSON/Parquet file of
  SWE-bench-format rows, ``"hf:<dataset>"``, ``"registry:<name>"``, or a list of rows (see
  ``rllm_envs.swe.tasks`` for the fields: ``image_name``, ``image_state``, ``workdir``,
  ``test_cmd``, ``log_parser``, ``environment``).
* ``command_timeout``: seconds per command (default: the policy's ``wall_seconds``, 60).
* ``policy``: a :class:`~rllm_envs.sandbox.SandboxPolicy` or a dict of its fields.
* ``pool_spares``: started containers kept ready per image (0: start one per reset).
* ``snapshot_method``: how snapshots capture the agent's container (below).

## Snapshots
``snapshot`` / ``restore`` / ``fork`` (``rllm_envs.core.snapshots``) capture the task, the
repository's one commit and the agent's container: the repository, /tmp, /var/tmp, /run/lock
and /dev/shm - file contents, modes, modification times, links, created and deleted files
(/scratch is emptied after every command; no process outlives one). Inode numbers and change
times are not kept. ``snapshot_method="tar"``: an archive made inside the container, held in
Python (it pickles, outlives the env and holds nothing to release); restoring syncs it into the
env's container when that runs the task's image (only differing files are rewritten), else
into a fresh one. ``"commit"``: ``docker commit``; restoring starts a container of that image,
which ``release`` removes once no container of it is left (so does garbage collection of the
snapshot; images of a dead process are swept by the next env). ``"auto"`` (default): tar up to
4 MiB of workspace, commit above. A snapshot outlives the env it came from with either method.
docs/envs/snapshots-containers.md has the figures.

## Async
``await env.areset(...)`` / ``await env.astep(action)`` (or ``rllm_envs.core.async_env.areset`` /
``astep`` on what ``gym.make`` returned) give exactly what ``reset`` / ``step`` give
(``metadata["rllm.native_async"]``). A command's reply is read off the container's attached
stream on the caller's loop, with no thread waiting; a reset (containers started, the
repository prepared) and an episode's end (the diff, a fresh container, the hidden tests) are
Docker SDK calls and run in a thread. A cancelled command closes the container's stream: the
next step of that env ends the episode as a ``sandbox`` failure and the container is removed.

## Version history
* v0: first version.
* v0, snapshots: ``snapshot`` / ``restore`` / ``fork``, ``snapshot_method`` (same id: no change
  to the episodes).
* v0, async: ``areset`` / ``astep`` (same results, no version change).
"""

from rllm_envs.swe.env import SWEEnv

__all__ = ["SWEEnv"]
