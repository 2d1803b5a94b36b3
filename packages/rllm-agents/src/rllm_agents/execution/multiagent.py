"""Multi-agent workflows: one episode of a PettingZoo text env, each seat played by a policy.

:class:`MultiAgentWorkflow` plays one game through the env's *parallel* API, so the seats that
act in the same cycle (every solver of a solver-judge round) ask their models at once. Who acts
is the env's ``info["to_act"]`` (every live agent when an env has no such key, the plain
parallel API); the other live agents send an empty action the env ignores. A seat's agent sees
the env's observation only on the seat's own turns (multi-agent envs here write each turn's
observation so that it tells what happened since), and gets its rewards as they come.

:func:`multiagent_engine` wraps it in :class:`~rllm_agents.execution.AgentWorkflowEngine`,
which runs games in parallel, retries failed ones and writes episodes::

    engine = multiagent_engine(
        tictactoe_v0.parallel_env,
        policies={"model": ModelPolicy(local_engine, tokenizer=tok), "random": random_policy},
        seating={"player_0": "model", "player_1": "random"},
    )
    episodes = engine.run(game_tasks(seeds=range(32)))

A task of such an engine is a dict ``{"id": str, "seed": int | None, "task": env task row |
None, "seating": {seat: policy name} | None}`` (:func:`game_tasks` makes them; a task's seating
overrides the engine's for the seats it names, ``"*"`` names every other seat).

The Episode: one :class:`~rllm_agents.types.Trajectory` per seat, in the env's agent order,
``name`` = the seat; its ``reward`` the seat's total; its steps the seat's turns (observation,
reply, action, reward, per-turn prompt/response token ids and logprobs); with token-level
rendering its ``prompt_ids`` / ``response_ids`` / ``response_mask`` / ``response_logprobs``
are the seat's whole conversation as one sequence (mask 1 on generated tokens). ``info``:
``seat``, ``role`` (the env's; a trainer groups by ``task_key:role``), ``policy``,
``trainable``, ``outcome``, ``is_correct``, ``invalid_moves``, ``end_reason``,
``prefix_consistent``. ``Episode.info``: ``task_key`` (the env's ``task_id``), ``seed``,
``seating``, ``roles``, ``outcomes``, ``end_reason``; ``Episode.metrics``: ``turns``,
``cycles``, ``llm_time``, ``env_time``, ``prompt_tokens``, ``completion_tokens`` and
``reward/<seat>``. ``Episode.env``: the game's :class:`~rllm_agents.types.EnvRecord` (api
``pettingzoo.parallel``; each transition one cycle's joint action and the env's answer by
seat), named when the env factory is a
:class:`~rllm_agents.execution.env_spec.ParallelEnvSpec`; ``Episode.policy["seats"]``: the
policy name per seat.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rllm_agents.engines.event_loop import all_or_none
from rllm_agents.engines.weight_sync import record_policy_version
from rllm_agents.execution.env_slot import EnvSlot, FactoryProbe, LoopPacer, check_call_policy
from rllm_agents.execution.env_spec import PARALLEL_API, env_identity
from rllm_agents.execution.policies import Policy, SeatPlay
from rllm_agents.execution.turns import env_ending, record_tokens
from rllm_agents.execution.workflow import AgentWorkflowEngine, Workflow
from rllm_agents.types import (
    EnvRecord,
    Episode,
    Step,
    TerminationReason,
    Trajectory,
    Transition,
    kept_info,
)

ANY_SEAT = "*"
DEFAULT_MAX_CYCLES = 200


def game_tasks(
    seeds: Iterable[int | None],
    seatings: Iterable[Mapping[str, str] | None] | None = None,
    task: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """Tasks of a multi-agent engine: one per seed, with optional per-game seatings (cycled)."""
    seeds = list(seeds)
    cycle = list(seatings) if seatings is not None else [None]
    if not cycle:
        raise ValueError("seatings is empty")
    return [
        {
            "id": f"seed-{seed}" if seed is not None else f"game-{i}",
            "seed": seed,
            "task": dict(task) if task is not None else None,
            "seating": dict(cycle[i % len(cycle)]) if cycle[i % len(cycle)] else None,
        }
        for i, seed in enumerate(seeds)
    ]


def role_groups(
    episodes: Iterable[Episode], *, trainable_only: bool = True
) -> dict[str, list[Trajectory]]:
    """Seat trajectories grouped by ``"<task_key>:<role>"``: the groups a trainer baselines
    within (samples of one task compared role by role, opposing seats never pooled). Failed
    episodes (error, timeout, env failure) are left out; so are seats of non-trainable
    policies unless ``trainable_only`` is False."""
    failed = (TerminationReason.ERROR, TerminationReason.TIMEOUT, TerminationReason.ENV_FAILURE)
    groups: dict[str, list[Trajectory]] = {}
    for episode in episodes:
        if episode.termination_reason in failed:
            continue
        task_key = str(episode.info.get("task_key", episode.id))
        for trajectory in episode.trajectories:
            if trainable_only and not trajectory.info.get("trainable", False):
                continue
            role = str(trajectory.info.get("role", trajectory.name))
            groups.setdefault(f"{task_key}:{role}", []).append(trajectory)
    return groups


class EnvPool:
    """Env slots reused across the games of one run (made on demand, closed by :meth:`aclose`)."""

    def __init__(self, env_factory: Callable[[], Any], calls: str = "auto") -> None:
        check_call_policy(calls, "env_calls")
        self.env_factory = env_factory
        self.calls = calls
        self._idle: list[EnvSlot] = []
        self._all: list[EnvSlot] = []
        self._probe = FactoryProbe()
        self._pacer: LoopPacer | None = None

    def acquire(self) -> EnvSlot:
        if self._idle:
            return self._idle.pop()
        if self._pacer is None:
            self._pacer = LoopPacer()
        slot = EnvSlot(
            self.env_factory, f"rllm-game-{len(self._all)}", self.calls, self._probe, self._pacer
        )
        self._all.append(slot)
        return slot

    def release(self, slot: EnvSlot) -> None:
        self._idle.append(slot)

    async def aclose(self) -> None:
        slots, self._all, self._idle = self._all, [], []
        await asyncio.gather(*(slot.aclose() for slot in slots))
        self._pacer = None  # the next run has its own event loop


class _EnvCallFailed(Exception):
    """The env raised: the episode ends in ERROR and its env is not reused."""


class MultiAgentWorkflow(Workflow):
    """One game of a PettingZoo text env with a policy on every seat (module docstring)."""

    def __init__(
        self,
        pool: EnvPool,
        policies: Mapping[str, Policy],
        seating: Mapping[str, str],
        *,
        max_cycles: int = DEFAULT_MAX_CYCLES,
    ) -> None:
        super().__init__(engine=None)
        self.pool = pool
        self.policies = policies
        self.seating = dict(seating)
        self.max_cycles = max_cycles

    def seat_policies(self, seats: Iterable[str], override: Mapping[str, str] | None) -> dict:
        """Which policy plays each seat: the task's seating over the engine's, ``"*"`` last."""
        chosen = {**self.seating, **(override or {})}
        names = {}
        for seat in seats:
            name = chosen.get(seat, chosen.get(ANY_SEAT))
            if name is None:
                raise ValueError(f"no policy for seat {seat!r}; seating is {chosen}")
            if name not in self.policies:
                raise ValueError(
                    f"seat {seat!r}: unknown policy {name!r} ({sorted(self.policies)})"
                )
            names[seat] = name
        return names

    async def run(self, task: dict[str, Any], uid: str) -> Episode:
        slot = self.pool.acquire()
        reusable = False
        try:
            episode = await self._play(slot, task, uid)
            reusable = not episode.info.get("env_error")
            return episode
        finally:
            if not reusable:  # raised, cancelled (timeout) or the env broke: start afresh
                slot.discard()
            self.pool.release(slot)

    async def _play(self, slot: EnvSlot, task: dict[str, Any], uid: str) -> Episode:
        seed = task.get("seed")
        options = {"task": task["task"]} if task.get("task") is not None else None
        clock = _Clock()
        started_at = time.time()
        try:
            observations, infos = await clock.env(slot.call("reset", seed=seed, options=options))
        except Exception as exc:
            raise _EnvCallFailed(f"reset: {type(exc).__name__}: {exc}") from exc
        names = self.seat_policies(observations, task.get("seating"))
        # Each seat's own generator, fixed by the game's seed (scripted policies draw from it).
        seat_seeds = np.random.SeedSequence(seed).spawn(len(names))
        seats = {}
        for (seat, name), seat_seed in zip(names.items(), seat_seeds, strict=True):
            policy = self.policies[name]
            play = SeatPlay(
                seat=seat,
                policy=policy,
                agent=policy.new_agent(),
                rng=np.random.default_rng(seat_seed),
                episode=uid,
            )
            play.agent.reset()
            policy.start(play)
            seats[seat] = play
        identity = env_identity(self.pool.env_factory)
        record = EnvRecord(
            api=PARALLEL_API,
            id=identity.id,
            kwargs=identity.kwargs,
            seed=seed,
            options=options,
            reset_observation=dict(observations),
            reset_info={seat: kept_info(info) for seat, info in infos.items()},
        )
        state = _Game(
            seats=seats,
            infos=dict(infos),
            observations=dict(observations),
            record=record,
            started_at=started_at,
        )
        reason, error = await self._cycles(slot, state, clock)
        return self._episode(uid, task, state, reason, error, clock)

    async def _cycles(
        self, slot: EnvSlot, state: _Game, clock: _Clock
    ) -> tuple[TerminationReason, str | None]:
        seats = state.seats
        for _ in range(self.max_cycles):
            live = [seat for seat, play in seats.items() if not play.done]
            if not live:
                return state.ending(), None
            acting = [seat for seat in live if state.infos.get(seat, {}).get("to_act", True)]
            try:
                replies = await all_or_none(self._turn(seats[seat], state) for seat in acting)
            except Exception as exc:  # noqa: BLE001 - a model failure ends this episode only
                return TerminationReason.ERROR, f"model: {type(exc).__name__}: {exc}"
            actions = dict.fromkeys(live, "")
            actions.update(zip(acting, replies, strict=True))
            try:
                result = await clock.env(slot.call("step", actions))
            except Exception as exc:  # noqa: BLE001 - recorded, and the env is replaced
                state.env_error = True
                return TerminationReason.ERROR, f"env: {type(exc).__name__}: {exc}"
            state.cycles += 1
            state.record_cycle(actions, *result)
            self._take(state, *result, acting=acting, env_time=clock.last)
            if any(info.get("failure") for info in state.infos.values()):
                self._finish_all(state)
                return TerminationReason.ENV_FAILURE, None
        self._finish_all(state)
        return (
            state.ending() if all(p.done for p in seats.values()) else TerminationReason.MAX_TURNS
        ), None

    async def _turn(self, play: SeatPlay, state: _Game) -> str:
        play.observation = state.observations.get(play.seat)
        play.info = dict(state.infos.get(play.seat, {}))
        play.agent.update_from_env(play.observation, play.pending_reward, False, play.info)
        play.pending_reward = 0.0
        response = await play.policy.respond(play)
        output = response.output
        action = play.agent.update_from_model(output.text or "")
        step = play.agent.trajectory.steps[-1] if play.agent.trajectory.steps else Step()
        step.prompt_ids = response.prompt_ids or list(output.prompt_ids)
        step.response_ids = list(output.completion_ids)
        step.logprobs = list(output.logprobs)
        step.finish_reason = output.finish_reason
        step.llm_time = response.llm_time
        record_policy_version(step.info, output)
        return action.action if isinstance(action.action, str) else str(action.action)

    def _take(
        self,
        state: _Game,
        observations: dict,
        rewards: dict,
        terminations: dict,
        truncations: dict,
        infos: dict,
        *,
        acting: list[str],
        env_time: float,
    ) -> None:
        state.observations.update(observations)
        state.infos.update(infos)
        for seat in acting:
            steps = state.seats[seat].agent.trajectory.steps
            if steps:
                steps[-1].env_time = env_time
        for seat, reward in rewards.items():
            if seat in state.seats:
                state.seats[seat].pending_reward += float(reward)
                state.seats[seat].total_reward += float(reward)
        for seat, play in state.seats.items():
            ended = terminations.get(seat, False) or truncations.get(seat, False)
            if ended and not play.done:
                state.ended[seat] = env_ending(
                    infos.get(seat, {}), terminations.get(seat, False), truncations.get(seat, False)
                )
                self._finish(play, state)

    def _finish(self, play: SeatPlay, state: _Game) -> None:
        info = dict(state.infos.get(play.seat, {}))
        play.agent.update_from_env(
            state.observations.get(play.seat), play.pending_reward, True, info
        )
        play.pending_reward = 0.0
        play.info = info
        play.done = True

    def _finish_all(self, state: _Game) -> None:
        for play in state.seats.values():
            if not play.done:
                self._finish(play, state)

    def _episode(
        self,
        uid: str,
        task: dict[str, Any],
        state: _Game,
        reason: TerminationReason,
        error: str | None,
        clock: _Clock,
    ) -> Episode:
        trajectories = [self._trajectory(play, task) for play in state.seats.values()]
        infos = {seat: play.info or state.infos.get(seat, {}) for seat, play in state.seats.items()}
        first_info = next(iter(infos.values()), {})
        failure = next((info["failure"] for info in infos.values() if info.get("failure")), None)
        steps = [step for trajectory in trajectories for step in trajectory.steps]
        metrics = {
            "turns": float(len(steps)),
            "cycles": float(state.cycles),
            "llm_time": sum(step.llm_time for step in steps),
            "env_time": clock.total,
            "prompt_tokens": float(sum(p.prompt_tokens for p in state.seats.values())),
            "completion_tokens": float(sum(p.completion_tokens for p in state.seats.values())),
            **{f"reward/{t.name}": t.reward for t in trajectories},
        }
        outcomes = {t.name: t.info["outcome"] for t in trajectories if t.info.get("outcome")}
        episode = Episode(
            id=uid,
            task=task,
            termination_reason=reason,
            trajectories=trajectories,
            failure=failure,
            error=error,
            metrics=metrics,
            env=state.record,
            policy={"seats": {t.name: t.info["policy"] for t in trajectories}},
            timings={"started_at": state.started_at, "finished_at": time.time()},
            info={
                "task_key": str(first_info.get("task_id", uid.rsplit(":", 1)[0])),
                "seed": task.get("seed"),
                "seating": {t.name: t.info["policy"] for t in trajectories},
                "roles": {t.name: t.info["role"] for t in trajectories},
                "outcomes": outcomes,
                "end_reason": first_info.get("end_reason"),
            },
        )
        if state.env_error:
            episode.info["env_error"] = True
        return episode

    @staticmethod
    def _trajectory(play: SeatPlay, task: dict[str, Any]) -> Trajectory:
        trajectory = play.agent.trajectory
        trajectory.name = play.seat
        trajectory.task = task.get("task")
        trajectory.reward = play.total_reward
        info = play.info
        trajectory.info.update(
            seat=play.seat,
            role=str(info.get("role", play.seat)),
            policy=play.policy.name,
            trainable=bool(play.policy.trainable),
            invalid_moves=int(info.get("invalid_moves", 0)),
        )
        for key in ("outcome", "is_correct", "end_reason"):
            if info.get(key) is not None:
                trajectory.info[key] = info[key]
        record_tokens(trajectory, play.conversation)
        return trajectory


@dataclass
class _Game:
    """The live state of one game (kept together so a failure keeps what was played)."""

    seats: dict[str, SeatPlay]
    infos: dict[str, dict[str, Any]]
    observations: dict[str, Any]
    cycles: int = 0
    env_error: bool = False
    record: EnvRecord | None = None
    started_at: float = 0.0

    def __post_init__(self) -> None:
        self.ended: dict[str, TerminationReason | None] = {}

    def record_cycle(
        self,
        actions: dict,
        observations: dict,
        rewards: dict,
        terminations: dict,
        truncations: dict,
        infos: dict,
    ) -> None:
        """Keep one cycle's joint action and the env's whole answer (for replay)."""
        if self.record is not None:
            self.record.transitions.append(
                Transition(
                    dict(actions),
                    dict(observations),
                    dict(rewards),
                    dict(terminations),
                    dict(truncations),
                    {seat: kept_info(info) for seat, info in infos.items()},
                )
            )

    def ending(self) -> TerminationReason:
        reasons = set(self.ended.values())
        if TerminationReason.ENV_FAILURE in reasons:
            return TerminationReason.ENV_FAILURE
        if TerminationReason.ENV_TRUNCATED in reasons:
            return TerminationReason.ENV_TRUNCATED
        return TerminationReason.ENV_DONE


class _Clock:
    """Seconds spent in env calls."""

    def __init__(self) -> None:
        self.total = 0.0
        self.last = 0.0

    async def env(self, call: Any) -> Any:
        started = time.perf_counter()
        try:
            return await call
        finally:
            self.last = time.perf_counter() - started
            self.total += self.last


class MultiAgentWorkflowFactory:
    """Makes the workflows of one engine; owns their env pool (closed after each run)."""

    def __init__(
        self,
        env_factory: Callable[[], Any],
        policies: Mapping[str, Policy],
        seating: Mapping[str, str] | None = None,
        *,
        max_cycles: int = DEFAULT_MAX_CYCLES,
        env_calls: str = "auto",
    ) -> None:
        if not policies:
            raise ValueError("give at least one policy")
        if max_cycles < 1:
            raise ValueError(f"max_cycles must be at least 1, got {max_cycles}")
        self.policies = dict(policies)
        self.seating = dict(seating) if seating else {ANY_SEAT: next(iter(self.policies))}
        unknown = sorted(set(self.seating.values()) - set(self.policies))
        if unknown:
            raise ValueError(
                f"seating names unknown policies {unknown}; known: {sorted(self.policies)}"
            )
        self.max_cycles = max_cycles
        self.pool = EnvPool(env_factory, env_calls)

    def __call__(self) -> MultiAgentWorkflow:
        return MultiAgentWorkflow(
            self.pool, self.policies, self.seating, max_cycles=self.max_cycles
        )

    async def aclose(self) -> None:
        await self.pool.aclose()


def multiagent_engine(
    env_factory: Callable[[], Any],
    policies: Mapping[str, Policy],
    seating: Mapping[str, str] | None = None,
    *,
    n_parallel: int = 8,
    retry_limit: int = 3,
    timeout: float | None = None,
    max_cycles: int = DEFAULT_MAX_CYCLES,
    env_calls: str = "auto",
    output_path: str | Path | None = None,
    progress: bool | None = None,
) -> AgentWorkflowEngine:
    """An :class:`AgentWorkflowEngine` playing `env_factory`'s games (module docstring).

    ``env_factory`` makes a PettingZoo *parallel* env (e.g. ``tictactoe_v0.parallel_env``).
    ``policies`` are named; ``seating`` maps seats to policy names (``"*"``: every other seat;
    default: the first policy everywhere). ``timeout`` bounds one attempt of one game;
    ``retry_limit`` retries games that end in ``error`` or ``timeout``; ``max_cycles`` caps
    the parallel steps of a game (then ``max_turns``).
    """
    return AgentWorkflowEngine(
        MultiAgentWorkflowFactory(
            env_factory, policies, seating, max_cycles=max_cycles, env_calls=env_calls
        ),
        n_parallel=n_parallel,
        retry_limit=retry_limit,
        timeout=timeout,
        output_path=output_path,
        progress=progress,
    )
