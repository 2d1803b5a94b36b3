"""What a judge reward costs and how much its scores say: SmolLM2 on llama.cpp judging groups of
SmolLM2's own replies to rllm/OpenEnded-v0's prompts.

    python benchmarks/judge_cost.py [--groups 16] [--n 4] [--slots N] [--reply-tokens 48]
        [--judge-tokens 256]

For each of `--groups` prompts, `--n` replies are sampled (temperature 1, `--reply-tokens` each)
from the same server; then each group is judged three ways, timed per call:

* group: one prompt holding the n replies (``{"scores": [...]}``), the default schema-held reply;
* group, reversed: the same replies in the opposite order - a judge that reads the replies
  gives each reply the same score in both orders; one that scores by position does not;
* pointwise: one call per reply (``{"score": N}``), all in flight at once.

Printed: seconds per judged group (median and p90) for each way, parse failures, how often a
group's scores simply rise with the position (1, 2, 3, 4 ...), and how often a reply keeps its
score when the order is reversed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time

import gymnasium as gym
import rllm_envs  # noqa: F401  (registers rllm/OpenEnded-v0)
from rllm_agents.engines.base import SamplingParams
from rllm_agents.engines.llamacpp.server import LlamaCppEngine
from rllm_agents.rewards import Judge, JudgeCall, JudgeSettings, Turn

RUBRIC = "The reply does what the prompt asks, correctly and in plain words."


def prompts(count: int) -> list[str]:
    env = gym.make("rllm/OpenEnded-v0")
    rows = env.unwrapped.tasks.rows
    return [str(rows[i % len(rows)]["prompt"]) for i in range(count)]


async def sample_replies(engine: LlamaCppEngine, prompt: str, n: int, tokens: int) -> list[str]:
    sampling = SamplingParams(temperature=1.0, max_tokens=tokens, logprobs=False)
    messages = [{"role": "user", "content": prompt}]
    outputs = await asyncio.gather(
        *(engine.generate(messages, sampling=sampling) for _ in range(n))
    )
    return [output.text.strip() for output in outputs]


def timed(judge: Judge, coroutine) -> tuple[list[JudgeCall], float]:
    """The calls `coroutine` makes, and the wall seconds they took."""
    started = time.perf_counter()
    result = judge.run(coroutine)
    return result, time.perf_counter() - started


async def as_group(judge: Judge, transcripts: list[tuple[Turn, ...]]) -> list[JudgeCall]:
    return [await judge.score(transcripts)]


async def one_by_one(judge: Judge, transcripts: list[tuple[Turn, ...]]) -> list[JudgeCall]:
    return list(await asyncio.gather(*(judge.score([t]) for t in transcripts)))


def describe(name: str, seconds: list[float], calls: list[JudgeCall]) -> str:
    ordered = sorted(seconds)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    failures = sum(call.parse_failure is not None for call in calls)
    return (
        f"{name:<18} {statistics.median(seconds):6.2f} s median, {p90:6.2f} s p90 per group; "
        f"{failures} of {len(calls)} replies did not parse"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--groups", type=int, default=16)
    parser.add_argument("--n", type=int, default=4)
    parser.add_argument("--slots", type=int, default=None, help="default: one per core, at most 4")
    parser.add_argument("--reply-tokens", type=int, default=48, help="per sampled reply")
    parser.add_argument("--judge-tokens", type=int, default=256, help="per judge reply")
    args = parser.parse_args()
    started = time.perf_counter()
    engine = LlamaCppEngine.start("smollm2", slots=args.slots)
    up = time.perf_counter() - started
    print(f"llama.cpp SmolLM2, {engine.serving_slots} server(s): up in {up:.1f} s")
    settings = JudgeSettings(rubric=RUBRIC, max_tokens=args.judge_tokens)
    judge = Judge(engine, settings, owns_engine=True)
    times: dict[str, list[float]] = {"group": [], "group, reversed": [], "pointwise": []}
    calls: dict[str, list[JudgeCall]] = {name: [] for name in times}
    rising = kept = replies = 0
    try:
        for prompt in prompts(args.groups):
            answers = judge.run(sample_replies(engine, prompt, args.n, args.reply_tokens))
            group = [(Turn("task", prompt), Turn("agent", answer)) for answer in answers]
            [forward], seconds = timed(judge, as_group(judge, group))
            times["group"].append(seconds)
            calls["group"].append(forward)
            [backward], seconds = timed(judge, as_group(judge, group[::-1]))
            times["group, reversed"].append(seconds)
            calls["group, reversed"].append(backward)
            single, seconds = timed(judge, one_by_one(judge, group))
            times["pointwise"].append(seconds)
            calls["pointwise"].extend(single)
            rising += forward.scores == sorted(forward.scores) and len(set(forward.scores)) > 1
            kept += sum(a == b for a, b in zip(forward.scores, backward.scores[::-1], strict=True))
            replies += len(answers)
    finally:
        judge.close()
    for name in times:
        print(describe(name, times[name], calls[name]))
    print(f"load average at the end (1 min): {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"groups whose scores rise with the position: {rising} of {args.groups}")
    print(f"replies scored the same in both orders: {kept} of {replies}")


if __name__ == "__main__":
    main()
