"""Tree-structured GRPO rollouts: continuations branched from one mid-episode state.

With ``rollout.tree.enabled``, each task of a step is played once as a *trunk* up to its
branch turn (``rollout.tree.branch_turns``, cycled over the step's tasks). There the env is
snapshotted (:mod:`rllm_envs.core.snapshots`), and ``rollout.n`` *branches* continue from that
very state: the env restored from the snapshot (its randomness included) and the agent given
the trunk's conversation so far. The branches of one trunk are one group: GRPO and RLOO
compare continuations of the same state, not whole episodes of the same task, so the luck of
the turns before the branch no longer adds to the advantages' variance.

What is trained: each branch's own continuation. Its first prompt is the whole shared prefix
(context, never trained on), its reward what it earned after the branch point (the prefix's
rewards are the same for every branch of a group and would cancel in the group's centring).
The trunk itself is not trained, so a turn before every branch turn is never trained: branch
turn 0 (branches from the reset, a plain GRPO group) in ``branch_turns`` keeps the first moves
trained too. A trunk that ended before its branch turn (a hole, an answer) leaves no state to
branch from: its task's branches start from the reset instead.

Every phase (the trunks, then the branches from each start turn) is played by
:class:`~.sampler.ExecutionSampler` on the shared engine, as plain steps are:
:class:`BranchingEnv` wraps each env (it cuts a trunk at its branch turn, snapshots it there,
and starts a branch from the snapshot) and :class:`TreeAgent` wraps each agent (it records the
trunk's calls and replays them into a branch's agent). Where an episode stands in the tree
travels in its task row under :data:`PLACE_KEY`, which the env wrapper strips before the env
sees the row.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
from rllm_agents.agents.base import BaseAgent
from rllm_agents.types import Action, EnvRecord, Episode, Trajectory
from rllm_envs.core.snapshots import (
    EnvSnapshot,
    SnapshotUnsupported,
    release,
    restore,
    snapshot,
)

from rllm_train.config import ConfigError, TrainConfig
from rllm_train.native.sampler import (
    ExecutionSampler,
    PolicyServing,
    Rollout,
    RolloutLimits,
    ServingSampler,
)

PLACE_KEY = "rllm.tree"  # in a task row: the episode's place in the tree (stripped by the env)
BRANCH_INFO = "rllm.tree_branch"  # in reset's info: the trunk whose branch point this starts at
POINT_INFO = "rllm.tree_point"  # in a step's info: the trunk was cut here, at its branch point
TRUNK, BRANCH, FRESH = "trunk", "branch", "fresh"  # the places


@dataclass
class BranchPoint:
    """A trunk where it was cut: the env's snapshot, what the env said last, and the calls its
    agent had taken before that."""

    snapshot: EnvSnapshot
    observation: Any
    reward: float
    info: dict[str, Any]
    agent_calls: list[tuple[Any, ...]] = field(default_factory=list)


@dataclass
class TreeStore:
    """The branch points of one step (by trunk number), shared by its env and agent wrappers."""

    points: dict[int, BranchPoint] = field(default_factory=dict)
    refusals: list[SnapshotUnsupported] = field(default_factory=list)

    def release(self) -> None:
        for point in self.points.values():
            release(point.snapshot)
        self.points.clear()


def split_place(options: dict[str, Any] | None) -> tuple[dict[str, Any] | None, Any]:
    """(the tree place in `options`' task row or None, the options the env should get)."""
    task = (options or {}).get("task")
    if not isinstance(task, dict) or PLACE_KEY not in task:
        return None, options
    row = {key: value for key, value in task.items() if key != PLACE_KEY}
    rest = {key: value for key, value in options.items() if key != "task"}
    if row:
        rest["task"] = row
    return task[PLACE_KEY], rest or None


class BranchingEnv(gym.Wrapper):
    """An env that cuts trunks at their branch turn (snapshotting them there) and starts
    branches from a trunk's snapshot instead of a reset (see the module docstring)."""

    def __init__(self, env: gym.Env, store: TreeStore) -> None:
        super().__init__(env)
        self.store = store
        self.trunk: int | None = None
        self.branch_turn = 0
        self.turns = 0

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        place, options = split_place(options)
        self.trunk = None
        if place is not None and place["role"] == BRANCH:
            point = self.store.points[place["trunk"]]
            restore(self.env, point.snapshot)
            info = {**copy.deepcopy(point.info), BRANCH_INFO: place["trunk"]}
            return copy.deepcopy(point.observation), info
        if place is not None and place["role"] == TRUNK:
            self.trunk, self.branch_turn, self.turns = place["trunk"], place["turn"], 0
        return self.env.reset(seed=seed, options=options)

    def step(self, action: Any):
        observation, reward, terminated, truncated, info = self.env.step(action)
        if self.trunk is None:
            return observation, reward, terminated, truncated, info
        self.turns += 1
        if self.turns < self.branch_turn or terminated or truncated:
            return observation, reward, terminated, truncated, info
        try:
            snap = snapshot(self.env)
        except SnapshotUnsupported as refusal:
            self.store.refusals.append(refusal)
            raise
        trunk, self.trunk = self.trunk, None
        self.store.points[trunk] = BranchPoint(
            snap, copy.deepcopy(observation), float(reward), copy.deepcopy(info)
        )
        # The trunk ends here: what follows is the branches' to play.
        return observation, reward, False, True, {**info, POINT_INFO: trunk}


class TreeAgent(BaseAgent):
    """An agent that records a trunk's calls up to its branch point and, at a branch's start,
    replays them into a fresh agent: the branch continues the trunk's very conversation."""

    def __init__(self, agent: BaseAgent, store: TreeStore) -> None:
        self.agent = agent
        self.store = store
        self.calls: list[tuple[Any, ...]] = []

    def reset(self) -> None:
        self.agent.reset()
        self.calls = []

    def update_from_env(
        self, observation: Any, reward: float, done: bool, info: dict[str, Any], **kwargs: Any
    ) -> None:
        if BRANCH_INFO in info:
            self._start_branch(observation, info)
            return
        if POINT_INFO in info:
            self.store.points[info[POINT_INFO]].agent_calls = list(self.calls)
        self.calls.append(("env", observation, reward, done, copy.deepcopy(info)))
        self.agent.update_from_env(observation, reward, done, info, **kwargs)

    def update_from_model(self, response: str, **kwargs: Any) -> Action:
        self.calls.append(("model", response))
        return self.agent.update_from_model(response, **kwargs)

    def _start_branch(self, observation: Any, info: dict[str, Any]) -> None:
        point = self.store.points[info[BRANCH_INFO]]
        info = {key: value for key, value in info.items() if key != BRANCH_INFO}
        self.agent.reset()
        for call in copy.deepcopy(point.agent_calls):
            if call[0] == "env":
                self.agent.update_from_env(*call[1:])
            else:
                self.agent.update_from_model(call[1])
        self.agent.update_from_env(observation, point.reward, False, info)
        # The trunk's steps are context: the branch's trajectory (its trained steps and its
        # reward) starts here.
        trajectory = self.agent.trajectory
        trajectory.steps.clear()
        trajectory.reward = 0.0

    @property
    def chat_completions(self) -> list[dict[str, Any]]:
        return self.agent.chat_completions

    @property
    def trajectory(self) -> Trajectory:
        return self.agent.trajectory

    @property
    def tools(self) -> list[dict[str, Any]] | None:
        return self.agent.tools


@dataclass(frozen=True)
class TaskBlock:
    """One task of a step: its seed and row, its trunk's branch turn, its episodes' slots."""

    number: int
    seed: int
    row: dict[str, Any] | None
    branch_turn: int
    first: int  # index of its first episode in the step

    def group(self, start_turn: int) -> str:
        return f"{self.seed}/{self.number}@turn{start_turn}"


def task_blocks(
    seeds: Sequence[int],
    tasks: Sequence[dict[str, Any]] | None,
    branches: int,
    branch_turns: Sequence[int],
) -> list[TaskBlock]:
    """The step's tasks: `seeds` (and `tasks`) hold each task `branches` times in a row, as
    the trainer lays a step out."""
    if len(seeds) % branches:
        raise ValueError(f"{len(seeds)} episodes are not whole groups of {branches}")
    blocks = []
    for number, first in enumerate(range(0, len(seeds), branches)):
        row = tasks[first] if tasks is not None else None
        same = all(
            seeds[i] == seeds[first] and (tasks is None or tasks[i] == row)
            for i in range(first, first + branches)
        )
        if not same:
            raise ValueError(f"episodes {first}..{first + branches - 1} are not one task")
        turn = branch_turns[number % len(branch_turns)]
        blocks.append(TaskBlock(number, seeds[first], row, turn, first))
    return blocks


def phase_seed(sampling_seed: int | None, phase: int) -> int | None:
    """The sampling seed of one phase of a step (trunks: 0; branches from turn t: 1 + t)."""
    if sampling_seed is None:
        return None
    state = np.random.SeedSequence([sampling_seed, phase]).generate_state(1, np.uint64)
    return int(state[0] >> np.uint64(1))


class TreeSampler(ServingSampler):
    """A step's episodes as branch groups (module docstring): the trainer's training sampler
    with ``rollout.tree.enabled``. ``sample`` returns one episode per seed, in order, and the
    group of each in ``Rollout.groups``."""

    def __init__(
        self,
        serving: PolicyServing,
        env_factory: Callable[[], gym.Env],
        agent_factory: Callable[[], BaseAgent],
        limits: RolloutLimits,
        *,
        branches: int,
        branch_turns: Sequence[int],
    ) -> None:
        if not branch_turns or not all(0 <= turn < limits.max_turns for turn in branch_turns):
            raise ValueError(
                f"branch turns must lie in 0..{limits.max_turns - 1}, got {list(branch_turns)}"
            )
        super().__init__(serving, env_factory, limits)
        self.agent_factory = agent_factory
        self.branches = branches
        self.branch_turns = list(branch_turns)

    def sample(
        self,
        seeds: Sequence[int],
        temperature: float,
        sampling_seed: int | None,
        tasks: Sequence[dict[str, Any]] | None = None,
    ) -> Rollout:
        blocks = task_blocks(seeds, tasks, self.branches, self.branch_turns)
        store = TreeStore()
        rollouts: list[Rollout] = []
        episodes: list[Episode | None] = [None] * len(seeds)
        groups = [""] * len(seeds)
        try:
            # Branch turn 0 branches from the reset: no trunk to play.
            trunk_jobs = [
                (block, {"role": TRUNK, "trunk": block.number, "turn": block.branch_turn})
                for block in blocks
                if block.branch_turn > 0
            ]
            trunks: dict[int, Episode] = {}
            if trunk_jobs:
                played = self._play(
                    store,
                    trunk_jobs,
                    max(self.branch_turns),
                    temperature,
                    phase_seed(sampling_seed, 0),
                )
                rollouts.append(played)
                trunks = {
                    block.number: episode
                    for (block, _), episode in zip(trunk_jobs, played.episodes, strict=True)
                }
            if store.refusals:
                raise store.refusals[0]
            starts = {
                block.number: block.branch_turn if block.number in store.points else 0
                for block in blocks
            }
            for start in sorted(set(starts.values())):
                chosen = [block for block in blocks if starts[block.number] == start]
                place = (
                    (lambda block: {"role": BRANCH, "trunk": block.number})
                    if start
                    else (lambda block: {"role": FRESH})
                )
                jobs = [(block, place(block)) for block in chosen for _ in range(self.branches)]
                played = self._play(
                    store,
                    jobs,
                    self.limits.max_turns - start,
                    temperature,
                    phase_seed(sampling_seed, 1 + start),
                )
                rollouts.append(played)
                for offset, episode in enumerate(played.episodes):
                    block = chosen[offset // self.branches]
                    slot = block.first + offset % self.branches
                    episodes[slot] = _settled(episode, block, start, trunks.get(block.number))
                    groups[slot] = block.group(start)
        finally:
            store.release()
        return Rollout(
            [episode for episode in episodes if episode is not None],
            generate_seconds=sum(rollout.generate_seconds for rollout in rollouts),
            env_seconds=sum(rollout.env_seconds for rollout in rollouts),
            groups=groups,
        )

    def _play(
        self,
        store: TreeStore,
        jobs: list[tuple[TaskBlock, dict[str, Any]]],
        max_turns: int,
        temperature: float,
        sampling_seed: int | None,
    ) -> Rollout:
        """One phase's episodes, on the plain sampler's path with the tree's wrappers."""
        player = ExecutionSampler(
            self.serving,  # shared: the phase's sampler is not closed
            lambda: BranchingEnv(self.env_factory(), store),
            lambda: TreeAgent(self.agent_factory(), store),
            dataclasses.replace(self.limits, max_turns=max_turns),
        )
        rows = [{**(block.row or {}), PLACE_KEY: place} for block, place in jobs]
        seeds = [block.seed for block, _ in jobs]
        return player.sample(seeds, temperature, sampling_seed, tasks=rows)


def _settled(episode: Episode, block: TaskBlock, start: int, trunk: Episode | None) -> Episode:
    """A branch's episode as the step reports it: its task row without the tree's place, its
    place in ``info["tree"]``, and an env record that replays it from the reset (the trunk's
    transitions up to the branch point, then its own)."""
    task = block.row if block.row is not None else {"seed": block.seed}
    episode.task = task
    for trajectory in episode.trajectories:
        trajectory.task = block.row
    episode.info["tree"] = {"group": block.group(start), "start_turn": start}
    record = episode.env
    if record is not None:
        options = {"task": block.row} if block.row is not None else None
        prefix: list = []
        reset = (record.reset_observation, record.reset_info)
        if start and trunk is not None and trunk.env is not None:
            prefix = [dataclasses.replace(t) for t in trunk.env.transitions[:start]]
            prefix[-1].truncated = False  # cut by the tree, not by the env
            reset = (trunk.env.reset_observation, trunk.env.reset_info)
        episode.env = EnvRecord(
            api=record.api,
            id=record.id,
            kwargs=record.kwargs,
            seed=record.seed,
            options=options,
            reset_observation=reset[0],
            reset_info={k: v for k, v in reset[1].items() if k != BRANCH_INFO},
            transitions=prefix + list(record.transitions),
        )
    return episode


def check_tree_env(config: TrainConfig, env_factory: Callable[[], gym.Env] | None = None) -> None:
    """With ``rollout.tree.enabled``: that the env is single-agent and can be snapshotted (a
    ConfigError naming the key if not). Makes one env and snapshots it before its first reset;
    quick, and done before the run folder is claimed."""
    if not config.rollout.tree.enabled:
        return
    from rllm_train.native.multiagent_setup import multiagent_module

    if multiagent_module(config.env.id) is not None:
        raise ConfigError(
            f"rollout.tree.enabled: {config.env.id} is a multi-agent game, whose seats are not "
            "snapshotted; tree rollouts branch single-agent envs"
        )
    if env_factory is None:
        from rllm_train.envs import make_env_factory

        env_factory = make_env_factory(config.env.id, config.env.kwargs, config.env.entry_point)
    env = env_factory()
    try:
        release(snapshot(env))
    except SnapshotUnsupported as refusal:
        raise ConfigError(
            f"rollout.tree.enabled: tree rollouts branch from env snapshots, and "
            f"{config.env.id} cannot be snapshotted: {refusal}"
        ) from refusal
    finally:
        env.close()
