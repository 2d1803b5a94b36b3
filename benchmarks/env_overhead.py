"""What the text layer costs: rllm/FrozenLake-v0 against Gymnasium's FrozenLake-v1, math
answers graded per second, and the start-up cost of the zero-import registration hook.

    python benchmarks/env_overhead.py [--steps 50000] [--repeats 3] [--startup-runs 11]

Both FrozenLakes run the same lake (the classic slippery 4x4 map), through `gym.make` with the
same default wrappers, with pre-drawn random actions, episodes reset as they end; the best of
`--repeats` runs counts (the least disturbed by other load). Goals: the text env keeps at
least 1/3 of the raw env's steps/s, and the hook adds under 50 ms to `import gymnasium`.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

import gymnasium as gym
import numpy as np
import rllm_envs  # noqa: F401  (registers the ids even with the start-up hook turned off)
from gymnasium.envs.toy_text.frozen_lake import MAPS

STEP_RATIO_GOAL = 1 / 3
STARTUP_GOAL_MS = 50.0
CLASSIC_LAKE = {"task_id": "classic-4x4", "map": MAPS["4x4"], "slippery": True}
MOVES = ("Left", "Down", "Right", "Up")
HOOK_MODULES = {"rllm_envs_autoregister", "rllm_envs"}
GRADING_SAMPLES = (
    ("The total is 3 + 4 = 7, so the answer is \\boxed{7}.", "7"),
    ("<think>half of one</think>So \\boxed{\\frac{1}{2}}", "\\frac{1}{2}"),
    ("We get x = \\boxed{2\\sqrt{3}}.", "2\\sqrt{3}"),
    ("I believe it is \\boxed{12}", "13"),
    ("No boxed answer here at all.", "5"),
)


def steps_per_second(env: gym.Env, actions: Sequence, reset_options: dict | None) -> float:
    env.reset(seed=0, options=reset_options)
    start = time.process_time()
    for action in actions:
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            env.reset(options=reset_options)
    return len(actions) / (time.process_time() - start)


def frozenlake_rates(steps: int, repeats: int) -> dict[str, float]:
    draws = np.random.default_rng(0).integers(4, size=steps).tolist()
    runs: dict[str, Callable[[], float]] = {
        "FrozenLake-v1 (raw, 4x4 slippery)": lambda: steps_per_second(
            gym.make("FrozenLake-v1"), draws, None
        ),
        "rllm/FrozenLake-v0 (same lake, text)": lambda: steps_per_second(
            gym.make("rllm/FrozenLake-v0"), [MOVES[a] for a in draws], {"task": CLASSIC_LAKE}
        ),
        "rllm/FrozenLake-v0 (shipped train tasks)": lambda: steps_per_second(
            gym.make("rllm/FrozenLake-v0"), [MOVES[a] for a in draws], None
        ),
    }
    best = dict.fromkeys(runs, 0.0)
    for _ in range(repeats):  # interleaved, so slow phases of a busy machine hit all alike
        for name, run in runs.items():
            best[name] = max(best[name], run())
    return best


def grading_rate(seconds: float) -> float | None:
    try:
        from rllm_envs.math.grader import grade_answer, shared_verifier
    except ImportError:
        return None
    # LaTeX answers are verified in a worker process, whose CPU time process_time() would not
    # see: wall time is the honest measure here. Start the worker first so the rate excludes it.
    shared_verifier().verify("1", "1")
    graded = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for response, gold in GRADING_SAMPLES:
            grade_answer(response, gold)
            graded += 1
    return graded / (time.perf_counter() - start)


def child_cpu_ms(code: str, **env: str) -> float:
    """CPU time (user + system) of one `python -c code`: steadier than wall time on a busy
    machine, and what the hook really costs."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, **env})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return 1000 * (after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)


def hook_import_ms() -> float:
    """The hook's share of `import gymnasium` by Python's own import timer (-X importtime):
    the hook module plus the `rllm_envs` package it imports, children included."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import gymnasium"],
        capture_output=True,
        text=True,
        check=True,
    )
    total_us = 0
    for line in result.stderr.splitlines():
        parts = line.removeprefix("import time:").split("|")
        if len(parts) == 3 and parts[2].strip() in HOOK_MODULES:
            total_us += int(parts[1])
    return total_us / 1000


def startup_costs(runs: int) -> dict[str, float]:
    """Median CPU ms of `python -c code` with the hook minus without it, runs interleaved."""
    off = {"RLLM_ENVS_NO_AUTOREGISTER": "1"}
    results = {}
    for code in ("import gymnasium", "pass"):
        with_hook, without_hook = [], []
        for _ in range(runs):
            with_hook.append(child_cpu_ms(code))
            without_hook.append(child_cpu_ms(code, **off))
        on, off_ms = statistics.median(with_hook), statistics.median(without_hook)
        results[code] = on - off_ms
        print(
            f"  python -c '{code}': {on:6.1f} ms CPU with the hook, {off_ms:6.1f} ms without "
            f"-> {on - off_ms:+5.1f} ms"
        )
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--grading-seconds", type=float, default=3.0)
    parser.add_argument("--startup-runs", type=int, default=11)
    args = parser.parse_args(argv)

    print(f"FrozenLake steps/s ({args.steps} random steps, best of {args.repeats}):")
    rates = frozenlake_rates(args.steps, args.repeats)
    for name, rate in rates.items():
        print(f"  {name:42s} {rate:10,.0f}")
    raw, text = list(rates.values())[:2]
    ratio = text / raw
    verdict = "meets" if ratio >= STEP_RATIO_GOAL else "MISSES"
    print(f"  ratio text/raw: {ratio:.2f} ({verdict} the goal of at least {STEP_RATIO_GOAL:.2f})")

    print("Math grading:")
    graded = grading_rate(args.grading_seconds)
    if graded is None:
        print("  skipped: rllm_envs.math.grader is not available (pip install 'rllm-envs[math]')")
    else:
        print(f"  {graded:,.0f} answers graded per second")

    print(f"Start-up cost of the registration hook (median of {args.startup_runs} runs each):")
    costs = startup_costs(args.startup_runs)
    imports = statistics.median(hook_import_ms() for _ in range(args.startup_runs))
    print(f"  import time of the hook and rllm_envs inside 'import gymnasium': {imports:.1f} ms")
    cost = max(costs["import gymnasium"], imports)
    verdict = "meets" if cost < STARTUP_GOAL_MS else "MISSES"
    print(
        f"  hook cost on 'import gymnasium': {cost:.1f} ms, the larger of the two "
        f"({verdict} the goal of under {STARTUP_GOAL_MS:.0f} ms)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
