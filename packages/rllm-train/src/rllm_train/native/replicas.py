"""More than one rollout replica (``rollout.engine_replicas``): N engines apart behind one front.

:func:`start_engines_apart` starts ``rollout.engine_replicas`` engines of the kind
``rollout.engine`` names (:mod:`.engine_apart`), each with its part of the machine
(:class:`~.engine_apart.EngineShare`), and serves the run through one :class:`EngineApart` whose
engine is a :class:`ReplicaRouter` and whose push reaches every replica. With one replica it is
the engine itself, unchanged.

Routing. The engines receive no request or session id: a call is a prompt (``prompt_ids`` in
token-level rollouts, else ``messages``), its sampling settings and tools. What ties the turns
of one conversation together is the tokens: a later turn's ``prompt_ids`` begin with an earlier
turn's prompt and completion. The router remembers, for each answered token-level request, which
replica served that prefix (:class:`ConversationAffinity`), and sends the next turn there, where
an engine that keeps a finished turn's cache (llama.cpp's sequences, vLLM's prefix cache) reuses
it. Every other request - a first turn, a chat request with messages only, a turn whose prefix
changed (a compacted context) - goes to the replica with the fewest requests in flight, ties
taken in turn (round robin). A lockstep round (``generate_together``) is split the same way,
call by call in order, and each replica gets its part as one round, so the same round is played
as the same batches again: routing depends only on the calls, never on timing.

Weights. A push hands the snapshot to every replica at once, one thread each (a push blocks
until the engine serves the weights), and returns when all of them have it; if any fails, the
push fails (:class:`ReplicaPushFailed`), never a silent partial sync. The router's
``policy_version`` is the OLDEST version any replica serves, so the trainer's staleness
accounting, and the player waiting for a version, stay conservative.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rllm_agents.engines.base import ModelOutput, SamplingParams

from rllm_train.config import TrainConfig
from rllm_train.native.engine_apart import (
    EngineApart,
    EngineShare,
    WeightSnapshot,
    start_engine_apart,
)
from rllm_train.native.sampler import close_engine

REQUESTS_METRIC = "rollout/replica_requests/"  # + replica index: requests sent in the step
VERSION_METRIC = "rollout/replica_version/"  # + replica index: the weights it then held
AFFINITY_CAPACITY = 4096  # conversations remembered; the oldest are forgotten first
FINGERPRINT_TOKENS = 64  # the tokens of a prefix its key is made of (its last ones)


def least_loaded(in_flight: Sequence[int], start: int) -> int:
    """The replica with the fewest requests in flight; among equals, the first from `start`
    on (so ties are taken in turn)."""
    count = len(in_flight)
    return min(((start + k) % count for k in range(count)), key=lambda i: in_flight[i])


def fingerprint(tokens: Sequence[int], length: int) -> int:
    """The first `length` tokens of `tokens`, as a key: their last FINGERPRINT_TOKENS (a turn's
    completion is among them, which tells apart the conversations of one task). A lookup then
    costs the same whatever the conversation's length; two prefixes of one length that share
    their tail only ever share a replica."""
    return hash(tuple(tokens[max(0, length - FINGERPRINT_TOKENS) : length]))


class ConversationAffinity:
    """Which replica served the token prefix a request continues (module doc). Entries are
    keyed by (length, :func:`fingerprint`); one is dropped once a later turn matched it, so a
    conversation in flight holds one entry, and the oldest go first past `capacity`."""

    def __init__(self, capacity: int = AFFINITY_CAPACITY) -> None:
        self.capacity = capacity
        self._by_length: dict[int, dict[int, int]] = {}
        self._order: OrderedDict[tuple[int, int], None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._order)

    def claim(self, prompt_ids: Sequence[int]) -> int | None:
        """The replica that served the longest remembered prefix of `prompt_ids` (forgotten
        now: the conversation moves on), or None."""
        for length in sorted(self._by_length, reverse=True):
            if length > len(prompt_ids):
                continue
            key = fingerprint(prompt_ids, length)
            replica = self._by_length[length].get(key)
            if replica is not None:
                self._forget(length, key)
                return replica
        return None

    def remember(self, tokens: Sequence[int], replica: int) -> None:
        """`replica` served `tokens` (a turn's prompt and completion)."""
        length = len(tokens)
        key = fingerprint(tokens, length)
        self._by_length.setdefault(length, {})[key] = replica
        self._order[(length, key)] = None
        self._order.move_to_end((length, key))
        while len(self._order) > self.capacity:
            self._forget(*next(iter(self._order)))

    def _forget(self, length: int, key: int) -> None:
        self._order.pop((length, key), None)
        entries = self._by_length.get(length, {})
        entries.pop(key, None)
        if not entries:
            self._by_length.pop(length, None)


@dataclass
class ReplicaLoad:
    in_flight: int = 0
    sent: int = 0  # requests routed to it, ever
    reported: int = 0  # `sent` when the last step's metrics were taken


@dataclass
class RouterStats:
    """``LocalEngine.stats``'s reading for the router: seconds with at least one request in
    flight on any replica. Not the replicas' busy times summed: replicas decode at once, and
    a sum would count a step's generation once per replica."""

    busy_seconds: float = 0.0


class ReplicaRouter:
    """The RolloutEngine the samplers see in front of the replicas (module doc). Thread-safe:
    the player's event loop routes, the trainer's thread reads the metrics."""

    def __init__(self, engines: Sequence[Any]) -> None:
        if not engines:
            raise ValueError("a replica router needs at least one engine")
        self.engines = list(engines)
        self.loads = [ReplicaLoad() for _ in self.engines]
        self.affinity = ConversationAffinity()
        self._next = 0  # where the next tie starts
        self._lock = threading.Lock()
        self._busy = 0.0
        self._busy_since: float | None = None

    # -- what callers read ----------------------------------------------------------------------
    @property
    def policy_version(self) -> int | None:
        """The oldest weights version any replica serves (None: none tracks one)."""
        known = [v for v in (e.policy_version for e in self.engines) if v is not None]
        return min(known) if known else None

    @property
    def versions(self) -> list[int | None]:
        return [engine.policy_version for engine in self.engines]

    @property
    def context_length(self) -> int | None:
        known = [getattr(e, "context_length", None) for e in self.engines]
        known = [length for length in known if length is not None]
        return min(known) if known else None

    @property
    def stats(self) -> RouterStats:
        with self._lock:
            since = self._busy_since
            ongoing = time.perf_counter() - since if since is not None else 0.0
            return RouterStats(self._busy + ongoing)

    def step_metrics(self) -> dict[str, float]:
        """Requests sent to each replica since the last call, and the version each holds now."""
        metrics: dict[str, float] = {}
        with self._lock:
            for index, load in enumerate(self.loads):
                metrics[f"{REQUESTS_METRIC}{index}"] = load.sent - load.reported
                load.reported = load.sent
        for index, version in enumerate(self.versions):
            if version is not None:
                metrics[f"{VERSION_METRIC}{index}"] = version
        return metrics

    # -- routing --------------------------------------------------------------------------------
    def _route(self, prompt_ids: Sequence[int] | None) -> int:
        """The replica for a request, counted in flight from now."""
        with self._lock:
            index = self.affinity.claim(prompt_ids) if prompt_ids else None
            if index is None:
                index = least_loaded([load.in_flight for load in self.loads], self._next)
                self._next = (index + 1) % len(self.engines)
            if not any(load.in_flight for load in self.loads):
                self._busy_since = time.perf_counter()
            self.loads[index].in_flight += 1
            self.loads[index].sent += 1
            return index

    def _finish(self, index: int, prompt_ids: Sequence[int] | None, answer: Any) -> None:
        with self._lock:
            self.loads[index].in_flight -= 1
            if not any(load.in_flight for load in self.loads) and self._busy_since is not None:
                self._busy += time.perf_counter() - self._busy_since
                self._busy_since = None
            # Token-level requests only: a chat request's next turn carries messages, not ids.
            if prompt_ids and isinstance(answer, ModelOutput):
                turn = list(answer.prompt_ids or prompt_ids) + list(answer.completion_ids)
                self.affinity.remember(turn, index)

    async def generate(
        self,
        messages: list[dict[str, Any]] | None = None,
        *,
        prompt_ids: list[int] | None = None,
        sampling: SamplingParams | None = None,
        tools: list[dict[str, Any]] | None = None,
    ) -> ModelOutput:
        index = self._route(prompt_ids)
        call: dict[str, Any] = {"prompt_ids": prompt_ids, "tools": tools}
        if sampling is not None:
            call["sampling"] = sampling
        answer: Any = None
        try:
            answer = await self.engines[index].generate(messages, **call)
            return answer
        finally:
            self._finish(index, prompt_ids, answer)

    async def generate_together(
        self, calls: Sequence[Mapping[str, Any]]
    ) -> list[ModelOutput | Exception]:
        """A lockstep round: each call routed in order, each replica's part sent as one round
        of its own (``generate_together`` where it has it); answers in the calls' order."""
        routed = [self._route(call.get("prompt_ids")) for call in calls]
        parts: dict[int, list[int]] = {}
        for position, index in enumerate(routed):
            parts.setdefault(index, []).append(position)
        answers: list[Any] = [None] * len(calls)

        async def play(index: int, positions: list[int]) -> None:
            part = [calls[p] for p in positions]
            got: list[Any] = [None] * len(part)
            try:
                got = await _round(self.engines[index], part)
            except Exception as error:  # noqa: BLE001 - the part failed: each call hears it
                got = [error] * len(part)
            finally:  # cancelled too: the calls leave the replica's count
                for position, answer in zip(positions, got, strict=True):
                    answers[position] = answer
                    self._finish(index, calls[position].get("prompt_ids"), answer)

        await asyncio.gather(*(play(index, positions) for index, positions in parts.items()))
        return answers

    # -- closing --------------------------------------------------------------------------------
    def close(self) -> None:
        """Close every replica, also when one fails to close (the first error is raised)."""
        errors = []
        for engine in self.engines:
            try:
                close_engine(engine)
            except BaseException as error:  # noqa: BLE001 - the others still close
                errors.append(error)
        if errors:
            raise errors[0]

    async def aclose(self) -> None:
        errors = []
        for engine in self.engines:
            try:
                close = getattr(engine, "close", None)
                if close is not None:
                    close()
                else:
                    await engine.aclose()
            except BaseException as error:  # noqa: BLE001 - the others still close
                errors.append(error)
        if errors:
            raise errors[0]


async def _round(engine: Any, calls: list[Mapping[str, Any]]) -> list[Any]:
    together = getattr(engine, "generate_together", None)
    if together is not None:
        return await together(calls)
    return await asyncio.gather(
        *(engine.generate(**call) for call in calls), return_exceptions=True
    )


# -- weights ----------------------------------------------------------------------------------------
class ReplicaPushFailed(RuntimeError):
    """A replica did not take the pushed weights; the others may have."""


def push_to_all(aparts: Sequence[EngineApart], snapshot: WeightSnapshot) -> None:
    """`snapshot` into every replica, one thread each; returns once all serve it, raises
    :class:`ReplicaPushFailed` (naming the replica) once all have finished if any failed."""
    errors: list[BaseException | None] = [None] * len(aparts)

    def push(index: int) -> None:
        try:
            aparts[index].push(snapshot)
        except BaseException as error:  # noqa: BLE001 - raised on the caller's thread
            errors[index] = error

    threads = [
        threading.Thread(target=push, args=(index,), name=f"weight-push-{index}", daemon=True)
        for index in range(len(aparts))
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    failed = [(index, error) for index, error in enumerate(errors) if error is not None]
    if failed:
        index, error = failed[0]
        others = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
        raise ReplicaPushFailed(
            f"replica {index} of {len(aparts)} did not take the weights of version "
            f"{snapshot.version}{others}: {type(error).__name__}: {error}"
        ) from error


def replica_set(aparts: Sequence[EngineApart]) -> EngineApart:
    """One engine apart made of `aparts`: a router in front, pushes to all."""
    aparts = list(aparts)
    return EngineApart(
        ReplicaRouter([apart.engine for apart in aparts]),
        f"{len(aparts)} {aparts[0].kind} replicas",
        lambda snapshot: push_to_all(aparts, snapshot),
        swaps_between_turns=all(apart.swaps_between_turns for apart in aparts),
    )


def start_engines_apart(
    config: TrainConfig,
    model: Any,
    tokenizer: Any,
    *,
    version: int,
    max_batch_size: int,
    autocast_dtype: Any = None,
) -> EngineApart:
    """``rollout.engine_replicas`` engines apart serving `model`'s weights after `version`
    updates (one: the engine itself). Started one after the other, on this thread: a process
    engine's child dies with the thread that started it (PR_SET_PDEATHSIG)."""
    count = config.rollout.engine_replicas
    started: list[EngineApart] = []
    try:
        for index in range(count):
            started.append(
                start_engine_apart(
                    config,
                    model,
                    tokenizer,
                    version=version,
                    max_batch_size=max_batch_size,
                    autocast_dtype=autocast_dtype,
                    share=EngineShare(index, count),
                )
            )
    except BaseException:
        for apart in started:
            try:
                close_engine(apart.engine)
            except Exception:  # noqa: BLE001, S110 - the start's own error is the one to raise
                pass
        raise
    return started[0] if count == 1 else replica_set(started)


def replica_metrics(engine: Any) -> dict[str, float]:
    """A step's ``rollout/replica_*`` metrics when `engine` is a router (else none: a single
    engine's rows stay as they were)."""
    return engine.step_metrics() if isinstance(engine, ReplicaRouter) else {}
