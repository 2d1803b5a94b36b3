"""Who plays which seat of a multi-agent env: the ``multiagent`` config section, checked.

``env.id`` names a multi-agent env when it is a PettingZoo-style module with ``parallel_env()``
(``kuhn_poker_v0``, ``rllm_envs.multiagent.referential_v0``, ``my_pkg.my_game_v1``; see
:func:`rllm_agents.cli.eval_multiagent.multiagent_env_module`); a Gymnasium id never is.
``multiagent.seats`` maps seats to policies (``"*"``: every seat not named):

================================  =========================================================
``trained``                       the model being trained; only its seats are trained on
``frozen``                        a frozen copy of the model's starting weights
``frozen:<run or step dir>``      a frozen copy with a checkpoint's weights (``runs/a``,
                                  ``runs/a/checkpoints/step_20``)
``model:<name or dir>``           another model (``smollm2``, a Hugging Face dir), frozen
a scripted player                 ``random``, ``first``, ... (``rllm_agents.agents.opponents``)
================================  =========================================================

Every check here runs before any model loads and fails with a :class:`ConfigError` naming the
key and what is valid.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from rllm_train.config import ConfigError, MultiAgentConfig, TrainConfig

TRAINED = "trained"
FROZEN = "frozen"
FROZEN_CHECKPOINT = "frozen:"
OTHER_MODEL = "model:"
ANY_SEAT = "*"
MODEL_PREFIXES = (FROZEN_CHECKPOINT, OTHER_MODEL)


def multiagent_module(env_id: str) -> ModuleType | None:
    """The PettingZoo-style module `env_id` names, or None for a Gymnasium id."""
    from rllm_agents.cli.eval_multiagent import multiagent_env_module

    return multiagent_env_module(env_id)


def scripted_players() -> list[str]:
    from rllm_agents.agents.opponents import OPPONENTS

    return sorted(OPPONENTS)


def policy_choices() -> str:
    return ", ".join(
        [TRAINED, FROZEN, "frozen:<run or step dir>", "model:<name or dir>", *scripted_players()]
    )


def is_model_policy(name: str) -> bool:
    """Whether `name` is played by a model (the trained one or a frozen one)."""
    return name in (TRAINED, FROZEN) or name.startswith(MODEL_PREFIXES)


def check_policy(key: str, name: Any) -> str:
    """`name` if it names a policy (and what it loads exists), else a ConfigError."""
    model_policy = isinstance(name, str) and is_model_policy(name) and name not in MODEL_PREFIXES
    if not (model_policy or (isinstance(name, str) and name in scripted_players())):
        raise ConfigError(f"{key}: unknown policy {name!r}; choose from {policy_choices()}")
    if name.startswith(FROZEN_CHECKPOINT):
        from rllm_train.native.checkpoint import checkpoint_file

        try:
            checkpoint_file(name.removeprefix(FROZEN_CHECKPOINT))
        except FileNotFoundError as error:
            raise ConfigError(f"{key}: {error}") from error
    elif name.startswith(OTHER_MODEL):
        from rllm_agents.models import EMBEDDED_MODELS, resolve_model

        other = name.removeprefix(OTHER_MODEL)
        if other not in EMBEDDED_MODELS:
            try:
                resolve_model(other)
            except FileNotFoundError as error:
                raise ConfigError(f"{key}: {error}") from error
    return name


def seating_plans(seats: list[str], spec: Mapping[str, str], rotate: bool) -> list[dict[str, str]]:
    """The seatings games are played with, seat -> policy; task j uses plan j mod len.

    With ``rotate`` there is one plan per seat, each the previous one moved one seat on, so
    every policy plays every seat equally often (a first-move edge averages out).
    """
    base = [spec.get(seat, spec.get(ANY_SEAT)) for seat in seats]
    shifts = range(len(seats)) if rotate else range(1)
    return [
        {seat: base[(index - shift) % len(seats)] for index, seat in enumerate(seats)}
        for shift in shifts
    ]


@dataclass(frozen=True)
class MultiAgentSetup:
    """A checked multi-agent run: the env, its seats and the seatings games are played with."""

    module: ModuleType
    kwargs: dict[str, Any]
    seats: list[str]
    plans: list[dict[str, str]]
    max_cycles: int

    @property
    def env_factory(self) -> Callable[[], Any]:
        # A ParallelEnvSpec names the env, so sampled episodes record it (and replay).
        from rllm_agents.execution.env_spec import ParallelEnvSpec

        return ParallelEnvSpec(self.module.__name__, dict(self.kwargs))

    @property
    def policies(self) -> list[str]:
        """Every policy some seat is played by, in first-seen order."""
        return list(dict.fromkeys(name for plan in self.plans for name in plan.values()))

    @property
    def frozen_models(self) -> list[str]:
        return [name for name in self.policies if is_model_policy(name) and name != TRAINED]


def env_seats(module: ModuleType, kwargs: dict[str, Any], env_id: str) -> list[str]:
    try:
        env = module.parallel_env(**kwargs)
    except Exception as error:  # noqa: BLE001 - whatever the env refuses, the user must read
        raise ConfigError(
            f"env.kwargs: cannot make {env_id!r} with {kwargs}: {type(error).__name__}: {error}"
        ) from error
    try:
        return list(env.possible_agents)
    finally:
        env.close()


def check_seats(section: MultiAgentConfig, seats: list[str], env_id: str) -> None:
    for seat, name in section.seats.items():
        key = f"multiagent.seats.{seat}"
        if seat != ANY_SEAT and seat not in seats:
            raise ConfigError(
                f"{key}: {env_id} has no seat {seat!r}; its seats: {', '.join(seats)} "
                f"({ANY_SEAT} for every seat not named)"
            )
        check_policy(key, name)
    unplayed = [
        seat for seat in seats if seat not in section.seats and ANY_SEAT not in section.seats
    ]
    if unplayed:
        raise ConfigError(
            f"multiagent.seats: no policy for {', '.join(unplayed)}; name them or set "
            f"'{ANY_SEAT}' (every seat not named)"
        )


def multiagent_setup(config: TrainConfig) -> MultiAgentSetup | None:
    """The run's multi-agent setup, or None when ``env.id`` is a Gymnasium env.

    A ConfigError names what is wrong: an unknown seat or policy, no trained seat, options
    the multi-agent rollouts do not support, a ``multiagent`` section on a Gymnasium env.
    """
    section = config.multiagent
    module = multiagent_module(config.env.id)
    if module is None:
        if section.seats != MultiAgentConfig().seats or section.rotate:
            raise ConfigError(
                f"multiagent: env.id {config.env.id!r} is a Gymnasium env (one agent); the "
                "multiagent section is for multi-agent envs such as kuhn_poker_v0"
            )
        return None
    if config.rollout.executor != "inline":
        raise ConfigError(
            "rollout.executor: multi-agent games run in the trainer's process; set it to inline"
        )
    seats = env_seats(module, dict(config.env.kwargs), config.env.id)
    check_seats(section, seats, config.env.id)
    plans = seating_plans(seats, section.seats, section.rotate)
    if TRAINED not in plans[0].values():
        raise ConfigError(
            f"multiagent.seats: no seat is played by {TRAINED!r}, so nothing would be trained "
            f"(seating: {plans[0]})"
        )
    return MultiAgentSetup(module, dict(config.env.kwargs), seats, plans, section.max_cycles)
