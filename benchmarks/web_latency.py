"""Latency of rllm/Web-v0 on a warm browser: reset and step p50/p99, and N envs in one process.

    python benchmarks/web_latency.py [--episodes 44] [--rounds 1] [--envs 4]
        [--episodes-per-env 6] [--think-ms 300]

1. One env plays `--episodes` suite instances (every family in turn) with their scripted
   solutions, so steps are the real mix of clicks, fills, key presses, page loads and
   submissions. A reset includes taking a spare context, binding the task, booting the page
   and reading its snapshot (closing the last context and preparing the next spare happen
   after it returns, in the background); a step includes the action, waiting for any page
   load, the snapshot and the app-state check. Invalid actions (parsing only) are timed apart.
   With `--think-ms`, the env sits idle that long before each action, as it would while a
   model writes its reply; back to back (0), the background work competes with the episode.
   Goals: reset p50 <= 100 ms, step p50 <= 150 ms.
2. `--envs` envs made in one process share one browser; each plays on its own thread (as the
   execution engine calls them); total steps/s, episodes/s, latency percentiles and how many
   browsers were launched.
The first episode of each part (browser launch, spare context) is left out of the numbers.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from typing import Any

import gymnasium as gym
import rllm_envs  # noqa: F401  (registers the ids even with the start-up hook turned off)

RESET_GOAL_MS = 100.0
STEP_GOAL_MS = 150.0


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def summary(values: list[float]) -> str:
    ms = [value * 1000 for value in values]
    return (
        f"p50 {statistics.median(ms):6.1f} ms   p99 {percentile(ms, 0.99):6.1f} ms   (n={len(ms)})"
    )


def play_timed(
    env: Any, row: dict[str, Any], resets: list[float], steps: list[float], think: float = 0.0
) -> float:
    """One scripted episode; appends the reset and step latencies; returns the reward. `think`
    seconds pass before each action, as a model would take to reply."""
    from rllm_envs.web.solver import step_action
    from rllm_envs.web.tasks import FAMILIES

    instance = FAMILIES[row["family"]].instance(row["seed"])
    started = time.perf_counter()
    observation, _ = env.reset(options={"task": row})
    resets.append(time.perf_counter() - started)
    reward = 0.0
    for step in instance.solution:
        action = step_action(step, observation)
        time.sleep(think)
        started = time.perf_counter()
        observation, reward, terminated, truncated, _ = env.step(action)
        steps.append(time.perf_counter() - started)
        if terminated or truncated:
            break
    return reward


def rows(count: int, offset: int = 0) -> list[dict[str, Any]]:
    from rllm_envs.web.tasks import FAMILIES

    names = sorted(FAMILIES)
    return [{"family": names[index % len(names)], "seed": offset + index} for index in range(count)]


def single_env(
    episodes: int, rounds: int, think: float
) -> tuple[list[float], list[float], list[float], float]:
    env = gym.make("rllm/Web-v0").unwrapped
    resets: list[float] = []
    steps: list[float] = []
    invalid: list[float] = []
    wins = 0.0
    try:
        play_timed(env, rows(1)[0], [], [])  # launch the browser, make the first spare
        for round_index in range(rounds):
            for row in rows(episodes, offset=round_index * episodes):
                wins += play_timed(env, row, resets, steps, think)
                time.sleep(think)
        env.reset(options={"task": rows(1)[0]})
        for _ in range(200):
            started = time.perf_counter()
            env.step("I would like to click the button, please.")
            invalid.append(time.perf_counter() - started)
    finally:
        env.close()
    return resets, steps, invalid, wins / (episodes * rounds)


def many_envs(count: int, episodes_each: int) -> dict[str, Any]:
    envs = [gym.make("rllm/Web-v0").unwrapped for _ in range(count)]
    resets: list[list[float]] = [[] for _ in envs]
    steps: list[list[float]] = [[] for _ in envs]
    try:
        for env in envs:
            play_timed(env, rows(1)[0], [], [])  # warm: browser and spares
        hosts = {id(env.resources.host) for env in envs}

        def worker(index: int) -> None:
            for row in rows(episodes_each, offset=1000 * (index + 1)):
                play_timed(envs[index], row, resets[index], steps[index])

        threads = [threading.Thread(target=worker, args=(index,)) for index in range(count)]
        started = time.perf_counter()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.perf_counter() - started
        launches = envs[0].resources.host.launches
    finally:
        for env in envs:
            env.close()
    all_steps = [value for values in steps for value in values]
    all_resets = [value for values in resets for value in values]
    return {
        "elapsed": elapsed,
        "steps": all_steps,
        "resets": all_resets,
        "hosts": len(hosts),
        "launches": launches,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=44, help="episodes per round, one env")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--envs", type=int, default=4)
    parser.add_argument("--episodes-per-env", type=int, default=6)
    parser.add_argument(
        "--think-ms",
        type=float,
        default=0.0,
        help="pause before each action and reset of the one-env part, as a model's reply takes",
    )
    args = parser.parse_args(argv)

    print(
        f"One env, {args.rounds} x {args.episodes} scripted episodes over every family, "
        f"{args.think_ms:.0f} ms to think before each action:"
    )
    resets, steps, invalid, win_rate = single_env(args.episodes, args.rounds, args.think_ms / 1000)
    print(f"  reset          {summary(resets)}")
    print(f"  step           {summary(steps)}")
    print(f"  invalid action {summary(invalid)}")
    print(f"  scripted solutions won: {win_rate:.0%}")
    reset_p50 = statistics.median(resets) * 1000
    step_p50 = statistics.median(steps) * 1000
    for name, value, goal in (
        ("reset", reset_p50, RESET_GOAL_MS),
        ("step", step_p50, STEP_GOAL_MS),
    ):
        verdict = "meets" if value <= goal else "MISSES"
        print(f"  {name} p50 {value:.1f} ms ({verdict} the goal of at most {goal:.0f} ms)")

    print(
        f"{args.envs} envs in one process, one thread each, {args.episodes_per_env} episodes each:"
    )
    result = many_envs(args.envs, args.episodes_per_env)
    total_steps, total_episodes = len(result["steps"]), len(result["resets"])
    print(f"  reset          {summary(result['resets'])}")
    print(f"  step           {summary(result['steps'])}")
    print(
        f"  throughput: {total_steps / result['elapsed']:.1f} steps/s, "
        f"{total_episodes / result['elapsed']:.1f} episodes/s over {result['elapsed']:.1f} s"
    )
    print(f"  browser hosts: {result['hosts']}, browser launches: {result['launches']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
