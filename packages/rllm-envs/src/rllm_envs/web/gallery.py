"""Screenshots of every task family for the docs, taken through the env itself.

    python -m rllm_envs.web.gallery docs/envs/web [--seed 0] [--colors 64]

Each family's scripted solution is played up to its last step or two (so the page shows the
task half done: a form filled in, a dialog open, a calendar on the right month), then the
viewport is saved as a small palette PNG.
"""

from __future__ import annotations

import argparse
import io
from pathlib import Path

from rllm_envs.web.solver import step_action
from rllm_envs.web.tasks import FAMILIES

# Steps left unplayed, where the last one alone would close what is worth showing (an open
# calendar, an open dialog).
STEPS_LEFT = {"date_picker": 2, "modal": 2}


def shoot(env, family: str, seed: int) -> object:
    """The family's page, played up to its last scripted step, as a PIL image."""
    from PIL import Image

    observation, _ = env.reset(options={"task": {"family": family, "seed": seed}})
    for step in FAMILIES[family].instance(seed).solution[: -STEPS_LEFT.get(family, 1)]:
        observation, _, terminated, truncated, _ = env.step(step_action(step, observation["text"]))
        if terminated or truncated:
            break
    return Image.fromarray(observation["screenshot"])


def save_small(image: object, path: Path, colors: int) -> int:
    """Save as an optimised palette PNG (flat web pages quantise well); returns the bytes."""
    small = image.quantize(colors=colors, dither=0)
    buffer = io.BytesIO()
    small.save(buffer, format="PNG", optimize=True)
    path.write_bytes(buffer.getvalue())
    return len(buffer.getvalue())


def main() -> None:
    import gymnasium as gym

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--colors", type=int, default=64)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    env = gym.make("rllm/Web-v0", screenshot=True, viewport=(800, 600)).unwrapped
    total = 0
    try:
        for family in sorted(FAMILIES):
            size = save_small(
                shoot(env, family, args.seed), args.out / f"{family}.png", args.colors
            )
            total += size
            print(f"{family:14s} {size / 1024:6.1f} KiB")
    finally:
        env.close()
    print(f"total {total / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
