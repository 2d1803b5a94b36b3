"""A judge model that scores episodes by a rubric, one at a time or a group at once.

``Judge(engine, JudgeSettings(rubric=...))`` asks any rollout engine (``engines``) for scores:

* pointwise, :meth:`Judge.score` with one transcript: "score this agent from 0 to scale";
* as a group, with several transcripts of the same task in one prompt: "score each of these
  agents, comparing them with each other" - relative scores, which is what a group-relative
  advantage (GRPO, RLOO) uses anyway, and one call per group instead of one per episode.

Each call gives a :class:`JudgeCall`: the prompt, the raw reply, the scores on 0..1, and what
went wrong. A reply that does not parse (:mod:`.judge_parse`) never raises: the scores it
lacks take ``default_score`` and the call says why (``failure``), so a run counts its parse
failures instead of crashing. An engine that fails (a server down, a prompt over the context)
raises :class:`JudgeFailed`, carrying the call with its ``error``: a trainer drops those
episodes rather than learn from a made-up score.

With ``constrain`` the request asks the server to decode only JSON of the expected shape
(``{"score": N}`` or ``{"scores": [...]}`` with the right count, whole numbers 0..scale):
``json_object`` for llama.cpp's server, ``json_schema`` for OpenAI-style servers (vLLM,
SGLang, hosted APIs). Engines that cannot constrain decoding ignore it.

Blocking code (a Gymnasium wrapper, a trainer's step, a re-scoring grader) calls
:meth:`Judge.run`, which runs the coroutine on the judge's own event loop thread: every call
of one judge shares one loop, as an HTTP engine's connection pool needs, whichever thread or
loop the caller is on.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Coroutine, Sequence
from concurrent.futures import Future
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from rllm_agents.engines.base import RolloutEngine, SamplingParams
from rllm_agents.rewards.judge_parse import OUT_OF_RANGE, parse_scores
from rllm_agents.rewards.judge_prompt import (
    DEFAULT_RUBRIC,
    MAX_SCALE,
    RESPONSE_FORMATS,
    JudgePrompt,
    Transcript,
    episode_transcript,
    response_format,
)
from rllm_agents.types import Episode

Result = TypeVar("Result")


@dataclass(frozen=True)
class JudgeSettings:
    rubric: str = DEFAULT_RUBRIC
    prompt: JudgePrompt = field(default_factory=JudgePrompt)
    scale: int = 10  # the judge writes whole numbers 0..scale; scores are divided by it
    default_score: float = 0.0  # on 0..1: what a score the reply lacks becomes
    # A score outside 0..scale: "clip" it to the nearest end, or "refuse" it (it takes the
    # default score).
    out_of_range: str = "clip"
    constrain: str = "json_object"  # RESPONSE_FORMATS: how replies are held to the schema
    temperature: float = 0.0
    max_tokens: int = 256
    max_chars: int = 2000  # per turn of a transcript: longer ones keep their head and tail

    def __post_init__(self) -> None:
        if not self.rubric.strip():
            raise ValueError("the judge's rubric is empty")
        if isinstance(self.scale, bool) or not isinstance(self.scale, int):
            raise ValueError(f"scale must be a whole number, got {self.scale!r}")
        if not 1 <= self.scale <= MAX_SCALE:
            raise ValueError(f"scale must be from 1 to {MAX_SCALE}, got {self.scale}")
        if not 0.0 <= self.default_score <= 1.0:
            raise ValueError(f"default_score must be from 0 to 1, got {self.default_score}")
        if self.out_of_range not in OUT_OF_RANGE:
            raise ValueError(
                f"out_of_range must be one of {OUT_OF_RANGE}, got {self.out_of_range!r}"
            )
        if self.constrain not in RESPONSE_FORMATS:
            raise ValueError(
                f"constrain must be one of {', '.join(RESPONSE_FORMATS)}, got {self.constrain!r}"
            )
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {self.max_tokens}")

    def sampling(self, count: int) -> SamplingParams:
        return SamplingParams(
            temperature=self.temperature,
            max_tokens=self.max_tokens,
            logprobs=False,
            response_format=response_format(self.constrain, count, self.scale),
        )


@dataclass
class JudgeCall:
    """One request to the judge and what came of it (a line of a judge log)."""

    mode: str  # "pointwise" (one transcript) or "group"
    messages: list[dict[str, str]]
    reply: str = ""
    finish_reason: str | None = None
    scores: list[float] = field(default_factory=list)  # on 0..1, the default where unknown
    raw_scores: list[float | None] = field(default_factory=list)  # as the judge wrote them
    parse_failure: str | None = None  # why some or all scores are unknown
    defaulted: list[int] = field(default_factory=list)  # positions that took the default
    clipped: int = 0  # scores outside 0..scale brought to the nearest end
    error: str | None = None  # the engine failed: no reply at all
    seconds: float = 0.0
    episode_ids: list[str] = field(default_factory=list)
    label: str = ""  # the caller's name for it (a trainer: the task group)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class JudgeFailed(RuntimeError):
    """The judge's engine failed; ``call`` holds the prompt and the error."""

    def __init__(self, call: JudgeCall) -> None:
        super().__init__(f"the judge failed: {call.error}")
        self.call = call


class _LoopThread:
    """An event loop on a daemon thread, for coroutines handed over from any thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None

    def submit(self, coroutine: Coroutine[Any, Any, Result]) -> Future[Result]:
        return asyncio.run_coroutine_threadsafe(coroutine, self._running_loop())

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(target=loop.run_forever, daemon=True, name="judge")
                thread.start()
                self._loop, self._thread = loop, thread
            return self._loop

    def stop(self, last: Coroutine[Any, Any, Any] | None = None) -> None:
        """Run `last` (a clean-up) on the loop, then end the loop and its thread."""
        with self._lock:
            loop, thread, self._loop, self._thread = self._loop, self._thread, None, None
        if loop is None or thread is None:
            if last is not None:
                asyncio.run(last)
            return
        try:
            if last is not None:
                asyncio.run_coroutine_threadsafe(last, loop).result()
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join()
            loop.close()


class Judge:
    """Scores transcripts with `engine` by `settings` (module doc). With ``owns_engine`` the
    judge closes the engine on :meth:`close`."""

    def __init__(
        self,
        engine: RolloutEngine,
        settings: JudgeSettings | None = None,
        *,
        owns_engine: bool = False,
    ) -> None:
        self.engine = engine
        self.settings = settings or JudgeSettings()
        self.owns_engine = owns_engine
        self._loop = _LoopThread()

    async def score(
        self, transcripts: Sequence[Transcript], *, label: str = "", episode_ids: Sequence[str] = ()
    ) -> JudgeCall:
        """One call scoring `transcripts` (one: pointwise; several: as a group)."""
        if not transcripts:
            raise ValueError("nothing to judge: no transcripts")
        settings = self.settings
        count = len(transcripts)
        call = JudgeCall(
            mode="pointwise" if count == 1 else "group",
            messages=settings.prompt.messages(
                transcripts, settings.rubric, settings.scale, settings.max_chars
            ),
            episode_ids=list(episode_ids),
            label=label,
        )
        started = time.perf_counter()
        try:
            output = await self.engine.generate(call.messages, sampling=settings.sampling(count))
        except Exception as error:  # noqa: BLE001 - any engine failure: the call records it
            call.error = f"{type(error).__name__}: {error}"
            call.seconds = time.perf_counter() - started
            raise JudgeFailed(call) from error
        call.seconds = time.perf_counter() - started
        call.reply, call.finish_reason = output.text, output.finish_reason
        parsed = parse_scores(output.text, count, settings.scale, settings.out_of_range)
        call.scores = parsed.with_default(settings.default_score)
        call.raw_scores = list(parsed.raw)
        call.parse_failure = parsed.failure
        call.defaulted = [i for i, score in enumerate(parsed.scores) if score is None]
        call.clipped = parsed.clipped
        return call

    async def score_episodes(self, episodes: Sequence[Episode], *, label: str = "") -> JudgeCall:
        """One call on `episodes`' main trajectories (one episode: pointwise; several: a group
        of the same task)."""
        return await self.score(
            [episode_transcript(episode) for episode in episodes],
            label=label,
            episode_ids=[episode.id for episode in episodes],
        )

    def run(self, coroutine: Coroutine[Any, Any, Result]) -> Result:
        """Wait for `coroutine` (a judge call), run on this judge's own event loop thread."""
        return self._loop.submit(coroutine).result()

    def close(self) -> None:
        """Stop the judge's loop thread, and its engine if the judge owns it."""
        self._loop.stop(self.engine.aclose() if self.owns_engine else None)

    def __enter__(self) -> Judge:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class JudgeLog:
    """Judge calls appended to a JSON-lines file as they happen (safe from several threads)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    def write(self, call: JudgeCall, **extra: Any) -> None:
        line = json.dumps({**call.to_dict(), **extra}, ensure_ascii=False)
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as handle:
                handle.write(line + "\n")
