"""Steps per second of the multi-agent text envs under random legal play, side by side.

    python benchmarks/multiagent_envs.py [--steps 20000] [--repeats 3] [--envs tictactoe_v0 ...]

Every env plays whole games with uniformly random legal moves (``info["legal_moves"]``;
free-text turns send a fixed reply: a speaker's message, a solver's ``\\boxed{7}``), resetting
as games end, through its AEC form (``env()``: every ``step`` call counts, the final ``None``
steps of finished agents too) and its parallel form (``parallel_env()``: one call a cycle).
Where PettingZoo ships the same game (its classic tic-tac-toe, Connect Four and chess), the
raw PettingZoo env plays random legal integer actions from its action mask in the same way,
and the ratio text/raw says what the text layer costs. Rates use CPU time and the best of
``--repeats`` interleaved runs, so other load on the machine disturbs them as little as possible.
"""

from __future__ import annotations

import argparse
import importlib
import os
import time
from collections.abc import Callable
from typing import Any

import numpy as np

FREE_TEXT = {"speaker_0": "It is the round thing.", "solver": "So the answer is \\boxed{7}."}


def _free_text(agent: str) -> str:
    return FREE_TEXT.get(agent, FREE_TEXT["solver"])


def text_move(info: dict[str, Any], agent: str, rng: np.random.Generator) -> str:
    moves = info.get("legal_moves") or []
    return str(moves[int(rng.integers(len(moves)))]) if moves else _free_text(agent)


def aec_rate(make: Callable[[], Any], steps: int, choose: Callable) -> float:
    """AEC steps per CPU second over `steps` steps of whole random games."""
    env, rng = make(), np.random.default_rng(0)
    env.reset(seed=0)
    done = 0
    started = time.process_time()
    while done < steps:
        for agent in env.agent_iter():
            observation, _, terminated, truncated, info = env.last()
            env.step(None if terminated or truncated else choose(observation, info, agent, rng))
            done += 1
            if done >= steps:
                break
        else:
            env.reset()
    elapsed = time.process_time() - started
    env.close()
    return done / elapsed


def parallel_rate(make: Callable[[], Any], steps: int) -> float:
    """Parallel steps (cycles) per CPU second."""
    env, rng = make(), np.random.default_rng(0)
    _, infos = env.reset(seed=0)
    done = 0
    started = time.process_time()
    while done < steps:
        if not env.agents:
            _, infos = env.reset()
        actions = {agent: text_move(infos[agent], agent, rng) for agent in env.agents}
        _, _, _, _, infos = env.step(actions)
        done += 1
    elapsed = time.process_time() - started
    env.close()
    return done / elapsed


def text_choice(observation: Any, info: dict, agent: str, rng: np.random.Generator) -> str:
    return text_move(info, agent, rng)


def raw_choice(observation: Any, info: dict, agent: str, rng: np.random.Generator) -> int:
    return int(rng.choice(np.flatnonzero(observation["action_mask"])))


def raw_pettingzoo(game: str) -> Callable[[], Any]:
    import pettingzoo

    return lambda: pettingzoo.make("aec", f"classic/{game}")


def cases(names: list[str]) -> list[tuple[str, Callable, Callable, Callable | None]]:
    """(label, AEC maker, parallel maker, raw PettingZoo maker or None)."""
    out = []
    for name in names:
        module = importlib.import_module(f"rllm_envs.multiagent.{name}")
        if name == "classic_v0":
            for game in ("tictactoe_v3", "connect_four_v3", "chess_v6"):
                out.append(
                    (
                        f"classic_v0 ({game})",
                        lambda g=game, m=module: m.env(game=g),
                        lambda g=game, m=module: m.parallel_env(game=g),
                        raw_pettingzoo(game),
                    )
                )
            continue
        raw = raw_pettingzoo("tictactoe_v3") if name == "tictactoe_v0" else None
        out.append((name, module.env, module.parallel_env, raw))
    return out


def main() -> None:
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    from rllm_envs.multiagent import ENV_MODULES

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000, help="steps per env per run")
    parser.add_argument("--repeats", type=int, default=3, help="runs per env; the best counts")
    parser.add_argument("--envs", nargs="*", default=list(ENV_MODULES), choices=ENV_MODULES)
    args = parser.parse_args()

    rows = []
    for label, make_aec, make_parallel, make_raw in cases(args.envs):
        best = {"aec": 0.0, "parallel": 0.0, "raw": 0.0}
        for _ in range(args.repeats):  # interleaved, so a burst of load hits every form alike
            best["aec"] = max(best["aec"], aec_rate(make_aec, args.steps, text_choice))
            best["parallel"] = max(best["parallel"], parallel_rate(make_parallel, args.steps))
            if make_raw is not None:
                best["raw"] = max(best["raw"], aec_rate(make_raw, args.steps, raw_choice))
        rows.append((label, best))

    header = f"{'env':<32} {'AEC steps/s':>12} {'parallel steps/s':>17} {'raw PZ steps/s':>15} {'text/raw':>9}"
    print(header)
    print("-" * len(header))
    for label, best in rows:
        raw = f"{best['raw']:>15,.0f}" if best["raw"] else f"{'-':>15}"
        ratio = f"{best['aec'] / best['raw']:>9.2f}" if best["raw"] else f"{'-':>9}"
        print(f"{label:<32} {best['aec']:>12,.0f} {best['parallel']:>17,.0f} {raw} {ratio}")
    print(f"({args.steps} steps per run, best of {args.repeats}, CPU time)")


if __name__ == "__main__":
    main()
