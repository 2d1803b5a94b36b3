"""rllm/Code-v0: write a Python program that passes hidden unit tests, run in a sandbox.

Task
    A programming problem (HumanEval/MBPP-style: define a function; or APPS-style: a program
    reading stdin and writing stdout). Shipped: 157 HumanEval, 422 MBPP and 234 MBPP problems
    rewritten for stdin/stdout (``data/NOTICE.txt``). Any JSONL/Parquet/HF dataset in the
    HumanEval, MBPP, APPS/TACO or LiveCodeBench format also works (``rllm_envs.code.formats``).

Action
    The model's reply, any text. The last fenced code block (```python ... ```) is the
    solution. A reply without one is an invalid action (``info["action_valid"] = False``,
    reward 0).

Observation
    First the problem statement and what to write; after a failed try (``max_turns > 1``) the
    failing *public* tests with the program's output — hidden tests are never shown.

Reward
    1.0 when every hidden test passes, else 0.0 (``reward_mode="fraction"``: the share of
    hidden tests passed). With several tries the reward comes with the episode's last answer.
    ``info["is_correct"]``, ``tests_passed``, ``tests_total``, ``test_status`` (counts of
    passed / wrong_answer / error / timeout / output_limit) and ``sandbox_policy``.

Grading
    Each test is its own sandboxed run holding only the solution and that test's input; the
    expected output stays on the host, which judges what came out (``harness.py``). Reading,
    overwriting or patching the tests, exiting early, writing result files or printing
    "passed" cannot earn reward.

Episode end
    terminated when all hidden tests pass or the last try (``max_turns``, default 1) is used.
    A sandbox that breaks ends the episode with ``info["failure"] = "sandbox"``.

Arguments
    ``tasks``: a source string (``"shipped:humaneval"``, ``"shipped:mbpp"``,
    ``"shipped:mbpp_stdio"``, a file path, ``"hf:<name>"``, ``"registry:<name>"``), rows, or a
    TaskSet; default: all shipped sets. ``backend``: ``"bwrap"`` (default) or ``"docker"``.
    ``policy``: a :class:`~rllm_envs.sandbox.SandboxPolicy` or dict of its fields.
    ``sandbox_options``: backend options (docker: ``image``, ``pool_size``). ``max_turns``,
    ``reward_mode`` (``"all"`` | ``"fraction"``), ``split``, ``column_map``.

Snapshots
    ``snapshot`` / ``restore`` / ``fork`` (``rllm_envs.core.snapshots``) capture the task and
    the tries so far. The sandbox holds nothing of an episode (every test run starts from an
    empty scratch dir on a read-only root, emptied after it), so no container is captured and
    nothing needs releasing; snapshots pickle. docs/envs/snapshots-containers.md.

Version history
    v0: first version.
    v0, snapshots: ``snapshot`` / ``restore`` / ``fork`` (same id: no change to the episodes).
"""

from rllm_envs.code.env import CodeEnv, last_code_block

__all__ = ["CodeEnv", "last_code_block"]
