"""The native trainer's episodes on a multi-agent env: rllm-agents' workflow engine, one seam.

:class:`MultiAgentSampler` is an :class:`~rllm_train.native.sampler.EpisodeSampler`: the
trainer asks it for one Episode per task seed, as it asks the single-agent sampler, and gets
back games played by :func:`rllm_agents.execution.multiagent.multiagent_engine` (the engine
``rllm-eval`` evaluates multi-agent envs with). The seat ``trained`` is a ``ModelPolicy`` over
a ``LocalEngine`` serving the very model being trained (no copy: each step plays with the
latest weights); frozen models have engines of their own, scripted players are
``ScriptedPolicy`` functions. Each episode holds one trajectory per seat with its reward and,
for model seats, its tokens and mask; trajectories of seats not played by ``trained`` say
``trainable: False``, and :mod:`rllm_train.native.batch` leaves them out.

The ``n`` samples of a task are games with the same seed (same deal, same items) and the same
seating; task j of a call (in seed order) is played with seating plan j (with
``multiagent.rotate`` the plans move the seating one seat on). Each model request is sampled
with its own seed from the step's sampling seed, the episode, the seat and the turn. Games run
concurrently and their requests join the engine's running batch as they come (the ``async``
dispatch of the single-agent sampler; ``rollout.dispatch`` applies to single-agent envs only).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from rllm_agents.agents.base import BaseAgent
from rllm_agents.agents.opponents import scripted_move
from rllm_agents.engines.local import LocalEngine
from rllm_agents.execution.multiagent import game_tasks, multiagent_engine
from rllm_agents.execution.policies import ModelPolicy, Policy, ScriptedPolicy
from rllm_agents.execution.seat_metrics import summarize_seats
from rllm_agents.types import Episode

from rllm_train.native.batch import trainable, usable
from rllm_train.native.multiagent_setup import TRAINED, MultiAgentSetup
from rllm_train.native.opponents import FrozenModel
from rllm_train.native.sampler import (
    PolicyServing,
    Rollout,
    RolloutLimits,
    ServingSampler,
    timed_rollout,
)

RETRIES = 1  # a game that errors (a model or env exception) is played once more, then dropped


def seat_batch(max_batch_size: int, setup: MultiAgentSetup) -> int:
    """The batch of a game's engines when `max_batch_size` games run at once: turn-based games
    ask one seat at a time, phased ones (solver-judge) several at once."""
    return max_batch_size * len(setup.seats)


class MultiAgentSampler(ServingSampler):
    """Games of `setup`'s env with its seatings (see the module docstring). `serving` serves
    the trained seats, with a batch of :func:`seat_batch`; each frozen model gets a LocalEngine
    of its own, served as the trained model is (device, batch, autocast)."""

    def __init__(
        self,
        serving: PolicyServing,
        setup: MultiAgentSetup,
        agent_factory: Callable[[], BaseAgent],
        limits: RolloutLimits,
        *,
        frozen: dict[str, FrozenModel],
        env_factory: Callable[[], Any] | None = None,
    ) -> None:
        super().__init__(serving, env_factory or setup.env_factory, limits)  # parallel form
        self.setup = setup
        self.agent_factory = agent_factory
        device = str(next(serving.model.parameters()).device)
        self.frozen = {
            name: (
                LocalEngine(
                    other.model,
                    other.tokenizer,
                    device=device,
                    max_batch_size=serving.engine.max_batch_size,
                    autocast_dtype=serving.engine.autocast_dtype,
                ),
                other.tokenizer,
            )
            for name, other in frozen.items()
        }

    def _policies(self, temperature: float, sampling_seed: int | None) -> dict[str, Policy]:
        sampling = self.limits.sampling(temperature)
        policies: dict[str, Policy] = {}
        for name in self.setup.policies:
            if name == TRAINED:
                engine, tokenizer = self.engine, self.tokenizer
            elif name in self.frozen:
                engine, tokenizer = self.frozen[name]
            else:
                policies[name] = ScriptedPolicy(scripted_move(name), name)
                continue
            policies[name] = ModelPolicy(
                engine,
                name,
                tokenizer,
                sampling,
                agent_factory=self.agent_factory,
                trainable=name == TRAINED,
                sampling_seed=sampling_seed,
            )
        return policies

    def tasks(self, seeds: Sequence[int]) -> list[dict[str, Any]]:
        """One game per seed; a task's n samples (equal seeds) share its seating plan."""
        plans = self.setup.plans
        order = {seed: index for index, seed in enumerate(dict.fromkeys(seeds))}
        return game_tasks(seeds, [plans[order[seed] % len(plans)] for seed in seeds])

    def sample(
        self, seeds: Sequence[int], temperature: float, sampling_seed: int | None
    ) -> Rollout:
        self.serve()
        runner = multiagent_engine(
            self.env_factory,
            self._policies(temperature, sampling_seed),
            self.setup.plans[0],
            n_parallel=len(seeds),
            retry_limit=RETRIES,
            max_cycles=self.setup.max_cycles,
            progress=False,
        )
        engines = [self.engine, *(engine for engine, _ in self.frozen.values())]
        return timed_rollout(engines, lambda: runner.run(self.tasks(list(seeds))))

    def close(self) -> None:
        super().close()
        for engine, _ in self.frozen.values():
            engine.close()


# -- what a step reports --------------------------------------------------------------------

# summarize_seats' tally key -> the metric's name in a step's row.
TALLY_METRICS = {
    "mean_reward": "reward_mean",
    "success_rate": "success_rate",
    "win_rate": "win_rate",
    "invalid_moves": "invalid_moves",
}
GROUPINGS = {"seats": "seat", "roles": "role", "policies": "policy"}
# The headline: how the trained model does against the others (a win where games have
# winners, else the env's is_correct, else a positive reward).
TRAINED_SUCCESS = f"policy/{TRAINED}/success_rate"


def seat_metrics(episodes: list[Episode], prefix: str = "") -> dict[str, float]:
    """Per seat, role and policy: mean reward, success and win rate, invalid moves, e.g.
    ``seat/player_0/win_rate``, ``role/judge/reward_mean``, ``policy/trained/success_rate``."""
    summary = summarize_seats(episodes)
    row: dict[str, float] = {}
    for grouping, label in GROUPINGS.items():
        for name, tally in summary[grouping].items():
            for key, metric in TALLY_METRICS.items():
                if key in tally:
                    row[f"{prefix}{label}/{name}/{metric}"] = float(tally[key])
    return row


def trained_rewards(episodes: list[Episode]) -> list[float]:
    """The rewards of the trained seats of the usable episodes (what training raises)."""
    return [
        trajectory.reward
        for episode in episodes
        if usable(episode)
        for trajectory in episode.trajectories
        if trainable(trajectory)
    ]
