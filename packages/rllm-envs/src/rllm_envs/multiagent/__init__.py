"""Multi-agent text environments in PettingZoo's API.

Each env is a versioned module in PettingZoo's style, with ``env()`` (AEC), ``parallel_env()``
and ``raw_env``; each passes PettingZoo's ``api_test``, ``parallel_api_test``, ``seed_test``
and ``parallel_seed_test`` (and ``max_cycles_test`` where random play can last
``max_cycles`` cycles: the iterated referential game)::

    from rllm_envs.multiagent import tictactoe_v0

    env = tictactoe_v0.env()
    env.reset(seed=0)
    for agent in env.agent_iter():
        observation, reward, terminated, truncated, info = env.last()
        env.step(None if terminated or truncated else info["legal_moves"][0])

===================  ==============================================  ==========================
module               what                                            form, extra
===================  ==============================================  ==========================
``tictactoe_v0``     tic-tac-toe, zero-sum                           turn-based
``kuhn_poker_v0``    Kuhn poker, zero-sum, seeded deal               turn-based
``referential_v0``   a speaker describes a target, a listener picks  phased, cooperative
``solver_judge_v0``  solvers answer a math task, a judge picks one   phased; ``math``
``classic_v0``       PettingZoo's classic games (chess, ...)         turn-based; ``multiagent``
===================  ==============================================  ==========================

What every env here shares (each env's package docstring is its contract card):

* Observations are ``{"text": str}`` (a ``Dict`` over
  :class:`~rllm_envs.core.spaces.UnicodeText`); actions are text (``UnicodeText``). See
  :mod:`rllm_envs.multiagent.spaces` for why.
* Every agent's info, every step: ``task_id``, ``role`` (what per-role statistics and
  baselines group by), ``to_act`` (whether its next action is read), ``legal_moves`` (text;
  empty when the move is free text or it is not the agent's turn), ``turn``,
  ``action_valid``, ``invalid_moves``; at the end ``end_reason`` and, in competitive games,
  ``outcome`` (``win`` | ``draw`` | ``loss``). There is never an ``action_mask`` key:
  PettingZoo's tests would pass it to the text action space's ``sample()``.
* Moves are read from free text by one grammar (:mod:`rllm_envs.multiagent.moves`). A reply
  that names no legal move never raises: the observation says why and the env's
  invalid-move rule applies (turn-based games: the same player retries, then forfeits).
* Infrastructure failures end the episode truncated with ``info["failure"]`` set.

Turn-based games derive from :class:`~rllm_envs.multiagent.turn_env.TurnTextEnv` (AEC; the
parallel form is PettingZoo's ``turn_based_aec_to_parallel``), phased ones from
:class:`~rllm_envs.multiagent.phase_env.PhasedTextEnv` (parallel; the AEC form is
``parallel_to_aec``). Importing this package imports no env.
"""

ENV_MODULES: tuple[str, ...] = (
    "tictactoe_v0",
    "kuhn_poker_v0",
    "referential_v0",
    "solver_judge_v0",
    "classic_v0",
)
