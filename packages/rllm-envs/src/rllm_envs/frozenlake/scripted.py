"""Play FrozenLake with an optimal solver that reads the board from the observation text.

    python -m rllm_envs.frozenlake.scripted --episodes 20 --split test [--slippery]

It goes through ``gym.make("rllm/FrozenLake-v0")`` like any agent, answers in the documented
grammar, and prints the success rate: 100% on solid ice, and the best achievable rate on
slippery ice.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import gymnasium as gym

import rllm_envs  # noqa: F401  (registers the ids when the start-up hook is disabled)
from rllm_envs.frozenlake.board import parse_board
from rllm_envs.frozenlake.solver import MOVE_NAMES, best_policy


@dataclass(frozen=True)
class EpisodeResult:
    task_id: str
    reached_goal: bool
    moves: int


def play_episode(env: gym.Env, seed: int) -> EpisodeResult:
    observation, info = env.reset(seed=seed)
    slippery = bool(info["slippery"])
    lake, _ = parse_board(observation)
    policy = best_policy(lake, slippery)  # the lake does not change during an episode
    moves = 0
    while True:
        _, player = parse_board(observation)
        observation, reward, terminated, truncated, _ = env.step(
            f"I move `{MOVE_NAMES[int(policy[player])]}`."
        )
        moves += 1
        if terminated or truncated:
            return EpisodeResult(info["task_id"], reward > 0, moves)


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--split", default="test", choices=["train", "test"])
    parser.add_argument("--seed", type=int, default=0, help="seed of the first episode")
    parser.add_argument("--slippery", action="store_true", help="play on slippery ice")
    args = parser.parse_args(argv)
    env = gym.make(
        "rllm/FrozenLake-v0",
        tasks=f"shipped:{args.split}",
        is_slippery=True if args.slippery else None,
    )
    try:
        results = [play_episode(env, args.seed + index) for index in range(args.episodes)]
    finally:
        env.close()
    for result in results:
        outcome = "goal" if result.reached_goal else "failed"
        print(f"{result.task_id}: {outcome} after {result.moves} moves")
    success_rate = sum(r.reached_goal for r in results) / len(results)
    print(f"success rate: {success_rate:.1%} over {len(results)} episodes")
    return success_rate


if __name__ == "__main__":
    main()
