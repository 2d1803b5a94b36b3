"""solver_judge_v0: solvers answer a math problem at once, then a judge picks one answer.

``from rllm_envs.multiagent import solver_judge_v0``; ``solver_judge_v0.parallel_env()``
(native), ``solver_judge_v0.env()`` (AEC through ``parallel_to_aec``), ``.raw_env``. Needs the
``math`` extra (``pip install 'rllm-envs[math]'``).

Task
    A math row with ``question`` and ``answer``, from the same sources as ``rllm/Math-v0``
    (default ``shipped:gsm8k_train``; any shipped set, file, ``hf:`` or ``registry:`` source;
    ``column_map``). The reset seed draws the row; ``options={"task": row}`` gives one.

Agents and phases
    ``solver_0`` ... ``solver_{n-1}`` (role ``solver``, ``num_solvers`` default 2) and
    ``judge_0`` (role ``judge``). Cycle 1: every solver answers (simultaneously in the
    parallel form, in turn in the AEC form; a solver never sees another's answer). Cycle 2:
    the judge picks one answer. Actions of agents outside the phase are ignored.

Observation
    ``{"text": str}``. A solver: the question and ``instruction`` (answer in ``\\boxed{}``).
    The judge: the question and every solver's reply, numbered (each cut to its last
    ``max_solution_chars`` characters, default 2000), and a request for the number of the
    correct one. The end: whether each was right, and the gold answer.

Action grammar
    Solver: a reply whose final answer is the last ``\\boxed{...}``, graded exactly as
    ``rllm/Math-v0`` grades it (plain numbers compared exactly, otherwise math-verify).
    Judge: a solution number, by the shared grammar of :mod:`rllm_envs.multiagent.moves`
    (backticks, ``Answer:``, or the number named last: ``I pick solution 2``).

Reward
    Solver: 1.0 for a correct answer, 0.0 for a wrong one, ``-format_penalty`` (default 0.0)
    for a reply without a boxed answer. Judge: 1.0 when the solution it picks is correct, 0.0
    when not, ``-format_penalty`` when its reply names no solution. (A judge can only score
    when some solver is right: ``info["any_solver_correct"]`` tells which tasks count.)

Episode end
    terminated after the judge's reply. truncated when ``max_cycles`` (default 2) runs out
    first, or when math-verify gives no verdict within ``grading_timeout_s``: then every info
    carries ``failure: "grader"`` (not the agents' fault; trainers drop such episodes).

Info (every agent, every step)
    ``task_id``, ``role``, ``to_act``, ``legal_moves`` (the judge's choices ``"1"``.. on its
    turn, else empty), ``turn``, ``action_valid``, ``invalid_moves``; a solver after its
    answer: ``is_correct``, ``extracted_answer``, ``grade``; the judge after its pick:
    ``picked`` (a solver's name or None), ``is_correct``, ``any_solver_correct``; at the end
    ``end_reason``.

Arguments
    ``tasks`` (alias ``dataset``), ``split``, ``column_map``, ``num_solvers`` (2),
    ``instruction``, ``format_penalty`` (0.0), ``max_solution_chars`` (2000),
    ``grading_timeout_s`` (5.0), ``max_cycles`` (2), ``render_mode`` (``"ansi"``),
    ``max_observation_chars`` (8192; the judge's prompt is clipped to it).

Version history
    v0: first version.
"""

from rllm_envs.multiagent.solver_judge.env import JUDGE, SolverJudgeEnv, solver_names

__all__ = ["JUDGE", "SolverJudgeEnv", "solver_names"]
