"""Rollouts played ahead of the trainer, on an engine apart, at a bounded staleness.

:class:`PlayAhead` runs a thread that plays the episodes of step after step with an engine that
is not the trained model (:mod:`.engine_apart`), while the trainer takes them one step at a time
and publishes the weights of each update. With ``max_staleness = k`` the episodes of step ``s``
(0-based) are played by the weights after exactly ``max(s - k, v0)`` updates, ``v0`` being the
version the run (or its resume) started from: the thread starts step ``s`` as soon as that
version is published, so step ``s``'s episodes are played while the updates of steps
``s - k .. s - 1`` run. ``k = 0`` is synchronous training on an engine apart (play, update, push,
play...). Pinning the version, rather than taking whichever is newest, makes a run the same
whatever the timing of the two threads: with the lockstep dispatch and per-request seeds it is
reproducible bit for bit, resumes included.

With ``partial_rollouts`` (engines that swap weights between two turns only), each published
version is pushed at once by a second thread, so a multi-turn episode in flight continues on the
new weights; a step then starts once the engine holds at least version ``s - k``, and its turns
carry the versions that played them (``Step.info["policy_version"]``). That timing is not
reproducible, by nature.

A checkpoint keeps the steps already played and not yet trained on (:meth:`PlayAhead.pending`):
the ones played by weights older than the checkpoint cannot be played again after a resume.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rllm_agents.episodes.records import episodes_text, parse_record
from rllm_agents.types import Episode

from rllm_train.native.behaviour_logprobs import trajectory_version
from rllm_train.native.engine_apart import EngineApart, WeightSnapshot
from rllm_train.native.sampler import Rollout

PENDING_KEY = "played_ahead"  # where a checkpoint keeps the steps played and not trained on


@dataclass
class PlayedStep:
    """One step's episodes and the weights version the engine held when it began them."""

    step: int
    version: int
    rollout: Rollout

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "version": self.version,
            "episodes": episodes_text(self.rollout.episodes),
            "generate_seconds": self.rollout.generate_seconds,
            "env_seconds": self.rollout.env_seconds,
            "judge_seconds": self.rollout.judge_seconds,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> PlayedStep:
        episodes = [
            parse_record(json.loads(line), f"checkpoint step {data['step']}")
            for line in data["episodes"].splitlines()
            if line.strip()
        ]
        rollout = Rollout(
            episodes,
            generate_seconds=data["generate_seconds"],
            env_seconds=data["env_seconds"],
            # Checkpoints written before it was kept have none. (Passed by position, it once
            # landed in `groups`.)
            judge_seconds=data.get("judge_seconds", 0.0),
        )
        return cls(int(data["step"]), int(data["version"]), rollout)


def episode_version(episode: Episode) -> int | None:
    """The weights version of an episode's stalest turn (None: no turn says)."""
    versions = [trajectory_version(t) for t in episode.trajectories]
    known = [version for version in versions if version is not None]
    return min(known) if known else None


def is_stale(episode: Episode, step: int, max_staleness: int) -> bool:
    """Whether `episode` was played by weights more than `max_staleness` updates older than
    the ones step `step` trains (the weights after `step` updates)."""
    version = episode_version(episode)
    return version is not None and step - version > max_staleness


class PlayAheadClosed(RuntimeError):
    """The player stopped (the run is ending, or it failed: see the cause)."""


class WeightBoard:
    """Weight snapshots the trainer published, kept until the player has taken them (the
    caller holds PlayAhead's lock around every call)."""

    def __init__(self, served: int) -> None:
        self._snapshots: dict[int, WeightSnapshot] = {}
        self.newest = served  # the engine starts on these weights, published by nobody

    def publish(self, snapshot: WeightSnapshot, keep_only_newest: bool) -> None:
        if keep_only_newest:
            self._snapshots.clear()
        self._snapshots[snapshot.version] = snapshot
        self.newest = max(self.newest, snapshot.version)

    def take(self, version: int) -> WeightSnapshot:
        """The snapshot of `version` (published); older ones are dropped, nothing needs them."""
        snapshot = self._snapshots[version]
        for older in [v for v in self._snapshots if v < version]:
            del self._snapshots[older]
        return snapshot

    def take_newest(self) -> WeightSnapshot:
        return self.take(self.newest)


class PlayAhead:
    """Plays steps ``first_step .. last_step - 1`` ahead of the trainer (see the module doc).

    `play(step)` plays one step's episodes on the engine apart's sampler and returns its
    Rollout. `restored` are steps a checkpoint kept; they are handed out first, not played
    again.
    """

    def __init__(
        self,
        apart: EngineApart,
        play: Callable[[int], Rollout],
        *,
        first_step: int,
        last_step: int,
        max_staleness: int,
        partial_rollouts: bool,
        restored: list[PlayedStep] | None = None,
    ) -> None:
        if partial_rollouts and not apart.swaps_between_turns:
            raise ValueError(f"{apart.kind} cannot take weights while episodes are in flight")
        self.apart = apart
        self._play = play
        self.first_version = first_step  # the weights the run (or its resume) starts from
        self.last_step = last_step
        self.max_staleness = max_staleness
        self.partial_rollouts = partial_rollouts
        self._condition = threading.Condition()
        self._board = WeightBoard(served=first_step)
        self._ready: dict[int, PlayedStep] = {p.step: p for p in restored or []}
        self._next_to_play = first_step
        while self._next_to_play in self._ready:
            self._next_to_play += 1
        self._playing: tuple[int, int] | None = None  # (step, version) under way
        self._error: BaseException | None = None
        self._closed = False
        self._threads = [threading.Thread(target=self._run_player, daemon=True, name="play-ahead")]
        if partial_rollouts:
            self._threads.append(
                threading.Thread(target=self._run_pusher, daemon=True, name="weight-push")
            )
        for thread in self._threads:
            thread.start()

    # -- the trainer's side ------------------------------------------------------------------
    def take(self, step: int) -> tuple[PlayedStep, float]:
        """Step `step`'s episodes, and how long the trainer waited for them."""
        started = time.perf_counter()
        with self._condition:
            while step not in self._ready:
                self._raise_if_stopped()
                self._condition.wait()
            played = self._ready.pop(step)
        return played, time.perf_counter() - started

    def publish(self, snapshot: WeightSnapshot) -> None:
        """The weights after `snapshot.version` updates, for the steps that wait for them."""
        with self._condition:
            self._board.publish(snapshot, keep_only_newest=self.partial_rollouts)
            self._condition.notify_all()

    def wants(self, version: int) -> bool:
        """Whether a step still to be played can use the weights of `version`."""
        with self._condition:
            if self.partial_rollouts:
                return version < self.last_step  # an episode in flight may take them
            upcoming = range(self._next_to_play, self.last_step)
            return any(self._version_for(step) == version for step in upcoming)

    def pending(self, version: int) -> list[PlayedStep]:
        """The steps played (or to be played) by weights older than `version`, once done, and
        not yet taken: what a checkpoint at `version` must keep, since those weights are gone
        after a resume. Steps the engine plays at `version` or later are played again."""
        with self._condition:
            while self._owes_step_older_than(version):
                self._raise_if_stopped()
                self._condition.wait()
            return sorted(
                (p for p in self._ready.values() if p.version < version), key=lambda p: p.step
            )

    def _owes_step_older_than(self, version: int) -> bool:
        """Whether a step played by weights older than `version` is under way, or is the next
        to start (its weights already published, so it will start without the trainer)."""
        if self._playing is not None:
            return self._playing[1] < version
        upcoming = self._next_to_play
        return upcoming < self.last_step and self._version_for(upcoming) < version

    def close(self) -> None:
        with self._condition:
            self._closed = True
            self._condition.notify_all()
        for thread in self._threads:
            thread.join()

    # -- the player ----------------------------------------------------------------------------
    def _version_for(self, step: int) -> int:
        return max(step - self.max_staleness, self.first_version)

    def _run_player(self) -> None:
        try:
            while self._next_to_play < self.last_step:
                step = self._next_to_play
                version = self._engine_ready_for(step)
                if version is None:
                    return  # closed
                rollout = self._play(step)
                with self._condition:
                    self._ready[step] = PlayedStep(step, version, rollout)
                    self._playing = None
                    self._next_to_play += 1
                    self._condition.notify_all()
        except BaseException as error:  # handed to the trainer, which raises it
            self._fail(error)

    def _engine_ready_for(self, step: int) -> int | None:
        """Wait until the engine may play `step`, mark the step under way, push its weights if
        that is ours to do; the version the engine holds (None: closed meanwhile)."""
        wanted = self._version_for(step)
        with self._condition:
            while not self._closed and not self._available(wanted):
                self._condition.wait()
            if self._closed:
                return None
            snapshot = None
            if not self.partial_rollouts and self.apart.version != wanted:
                snapshot = self._board.take(wanted)
            # Claimed before the push: a checkpoint taken meanwhile waits for this step.
            self._playing = (step, wanted if not self.partial_rollouts else self.apart.version)
        if snapshot is not None:
            self.apart.push(snapshot)  # seconds for llama.cpp: outside the lock
        return self._playing[1]

    def _available(self, wanted: int) -> bool:
        if self.partial_rollouts:
            return self.apart.version >= wanted
        return self.apart.version == wanted or self._board.newest >= wanted

    def _run_pusher(self) -> None:
        try:
            while True:
                with self._condition:
                    while not self._closed and self._board.newest <= self.apart.version:
                        self._condition.wait()
                    if self._closed:
                        return
                    snapshot = self._board.take_newest()
                self.apart.push(snapshot)  # waits for the decoding batch, then swaps
                with self._condition:
                    self._condition.notify_all()
        except BaseException as error:
            self._fail(error)

    def _fail(self, error: BaseException) -> None:
        with self._condition:
            self._error = error
            self._closed = True
            self._condition.notify_all()

    def _raise_if_stopped(self) -> None:
        if self._error is not None:
            raise PlayAheadClosed(f"playing episodes ahead failed: {self._error}") from self._error
        if self._closed:
            raise PlayAheadClosed("the player was closed")
