"""rllm/Math-v0: solve a math problem and give the final answer in ``\\boxed{}``.

Task
    A row with ``question`` and ``answer`` (plus ``id``, ``source`` and, for shipped rows,
    ``solution``). Shipped (``data/NOTICE.txt``): ``gsm8k_train`` (500) and ``gsm8k_test``
    (300) grade-school word problems from GSM8K; ``math_test`` (MATH-500, 500) and
    ``math_train`` (500 other MATH problems) competition problems with LaTeX answers. Any JSONL, JSON or
    Parquet file, Hugging Face ``datasets`` dataset or registered dataset works too, with a
    ``column_map`` such as ``{"problem": "question", "solution": "answer"}``.

Action
    The model's whole reply, any text. Its answer is the last ``\\boxed{...}`` (or
    ``\\fbox{...}``; nested braces fine) after the last ``</think>`` when there is one. A reply
    without a boxed answer (or still inside ``<think>``) is an invalid action
    (``info["action_valid"] = False``).

Observation
    First: the question, a blank line, then ``instruction`` (how to format the answer). After
    a try that was not correct, with tries left: a request to review the solution and answer
    again (naming the wrong answer). At the end: whether the answer was correct.

Reward
    1.0 for a correct answer, 0.0 for a wrong one, ``-format_penalty`` for a reply without a
    boxed answer. Plain-number gold answers (GSM8K) are compared exactly, ignoring thousands
    separators, ``$``, ``%`` and unit words; others are checked with math-verify (fractions,
    radicals, intervals, sets, ...). ``info``: ``is_correct``, ``extracted_answer``,
    ``grade`` (correct | wrong | no_boxed_answer | empty_boxed | unfinished_thinking |
    answer_too_long); at reset ``source``.

Episode end
    ``max_turns=1`` (default): terminated after the one reply, whatever it is. ``max_turns>1``:
    terminated by a correct answer; truncated when the tries run out. When math-verify gives
    no verdict within ``grading_timeout_s`` (pathological LaTeX can make sympy spin) the
    episode ends truncated with ``info["failure"] = "grader"`` (not the agent's fault).

Arguments
    ``tasks`` (alias ``dataset``): ``"shipped:gsm8k_train"`` (default), ``"shipped:gsm8k_test"``,
    ``"shipped:math_train"``, ``"shipped:math_test"``, a file path, ``"hf:<name>[:<config>]"``
    or ``"hf:<local dir>"``, ``"registry:<name>"``, a list of rows or a TaskSet. ``split``
    (for ``hf:``/``registry:``; default ``"train"``), ``column_map``, ``max_turns`` (1),
    ``format_penalty`` (0.0), ``instruction``, ``grading_timeout_s`` (5.0), ``render_mode``
    (``"ansi"``).

Snapshots
    ``snapshot`` / ``restore`` / ``fork`` (``rllm_envs.core.snapshots``) capture the task and
    the tries so far (the verifier worker holds no episode state); snapshots pickle.

Version history
    v0: first version.
    v0, snapshots: ``snapshot`` / ``restore`` / ``fork`` (same id: no change to the episodes).
"""

from rllm_envs.math.env import MathEnv
from rllm_envs.math.grader import GradeResult, GraderFailure, grade_answer

__all__ = ["GradeResult", "GraderFailure", "MathEnv", "grade_answer"]
