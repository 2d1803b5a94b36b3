"""A scripted solver: plays a suite instance's solution through the action grammar.

Each :class:`~rllm_envs.web.tasks.base.Step` names an element by role and accessible name; the
solver finds that element's ref in the latest observation's snapshot and writes the action a
model would. Winning every family this way shows that the pages expose what the goals ask for
and that the validators accept a correct outcome.

    python -m rllm_envs.web.solver [--seeds 3] [--families login cart ...]
"""

from __future__ import annotations

import argparse
import json
import re
import time
from typing import Any

from rllm_envs.web.actions import WebAction
from rllm_envs.web.tasks import FAMILIES
from rllm_envs.web.tasks.base import Step

# `- role "name" [attributes] [ref=eN]` lines of an aria snapshot.
_LINE = re.compile(r'^\s*- (?P<role>[\w-]+)(?: "(?P<name>(?:[^"\\]|\\.)*)")?(?P<rest>.*)$')
_REF = re.compile(r"\[ref=((?:f\d+)?e\d+)\]")


def find_ref(observation: str, role: str, name: str) -> str | None:
    """The ref of the first element with exactly this role and accessible name."""
    for line in observation.splitlines():
        match = _LINE.match(line)
        if not match or match.group("role") != role:
            continue
        found = re.sub(r"\\(.)", r"\1", match.group("name") or "")
        ref = _REF.search(match.group("rest"))
        if found == name and ref:
            return ref.group(1)
    return None


def step_action(step: Step, observation: str) -> str:
    """The action text for `step` against the current observation."""
    if step.role is None:
        return str(WebAction(step.verb, text=step.text))
    ref = find_ref(observation, step.role, step.name or "")
    if ref is None:
        raise LookupError(f"no {step.role} named {step.name!r} in the page:\n{observation[-3000:]}")
    return str(WebAction(step.verb, ref=ref, text=step.text))


def play(env: Any, row: dict[str, Any]) -> dict[str, Any]:
    """Run `row`'s scripted solution in `env`; what happened (reward, steps, seconds)."""
    family = FAMILIES[row["family"]]
    instance = family.instance(int(row.get("seed", 0)))
    started = time.perf_counter()
    observation, _ = env.reset(options={"task": row})
    text = observation["text"] if isinstance(observation, dict) else observation
    reward, terminated, truncated, info, steps = 0.0, False, False, {}, 0
    for step in instance.solution:
        action = step_action(step, text)
        steps += 1
        observation, reward, terminated, truncated, info = env.step(action)
        text = observation["text"] if isinstance(observation, dict) else observation
        if terminated or truncated:
            break
    return {
        "family": family.name,
        "seed": row.get("seed", 0),
        "reward": reward,
        "terminated": terminated,
        "steps": steps,
        "seconds": round(time.perf_counter() - started, 3),
        "failure": info.get("failure"),
        "last_observation": text if reward != 1.0 else "",
    }


def main() -> None:
    import gymnasium as gym

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--families", nargs="*", default=sorted(FAMILIES))
    args = parser.parse_args()
    env = gym.make("rllm/Web-v0")
    try:
        for name in args.families:
            for seed in range(args.seeds):
                try:
                    result = play(env.unwrapped, {"family": name, "seed": seed})
                except LookupError as error:
                    result = {"family": name, "seed": seed, "reward": 0.0, "error": str(error)}
                print(json.dumps({k: v for k, v in result.items() if k != "last_observation"}))
    finally:
        env.close()


if __name__ == "__main__":
    main()
