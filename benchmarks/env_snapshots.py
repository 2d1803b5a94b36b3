"""Snapshot and restore times of the envs whose state lives outside Python.

    python benchmarks/env_snapshots.py [--repeats 5] [--blob-mb 4 32] [--sections swe,code,web]
        [--no-web]

1. rllm/SWE-v0, both ways of capturing the agent's container side by side (``tar``: an archive
   of the workspace made inside the container, kept in Python; ``commit``: ``docker commit``),
   on the smallest and the largest shipped project, and on the largest with a file of each
   ``--blob-mb`` size the agent wrote: snapshot; restore into the same env (its container
   alive); restore into a new env (no container yet: the path ``fork`` takes); release; what
   the snapshot holds, and which method ``"auto"`` (the env's default) picks. Medians of
   ``--repeats``, and commit / tar ratios.
2. rllm/Code-v0 (Docker sandbox): its sandbox keeps nothing between runs, so there is no
   container to capture; the in-Python snapshot and restore are timed for scale.
3. rllm/Web-v0: the wizard page after 0, 2 and 6 actions; a restore replays them on a fresh page.

The machine's load average is printed: on a shared machine the figures move with it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import rllm_envs  # noqa: F401  (registers the ids)
from rllm_envs.core.snapshots import release, restore, snapshot
from rllm_envs.swe.integrity import bash
from rllm_envs.swe.snapshots import AUTO_TAR_LIMIT_BYTES, workspace_bytes
from rllm_envs.swe.tasks import load_swe_tasks

METHODS = ("tar", "commit")  # "auto" picks one of them by the workspace's size
EDITS = (
    "echo kept > notes.txt && rm $(git ls-files 'README*' | head -1) && "
    "echo '# edited' >> $(git ls-files '*.py' | head -1) && echo scratch > /tmp/keep"
)
OPERATIONS = ("snapshot", "restore (same env)", "restore (new env)", "release")


def timed(action: Callable[..., Any], *args: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    result = action(*args)
    return time.perf_counter() - started, result


def ms(seconds: float) -> str:
    return f"{seconds * 1000:9.1f} ms"


def held_bytes(snap: Any, client: Any) -> int:
    """What the snapshot holds: the archive, or the committed image's own layer."""
    workspace = snap.state.workspace
    if hasattr(workspace, "archive"):
        return len(workspace.archive)
    image = client.images.get(workspace.image_id)
    base = client.images.get(workspace.task_image)
    return image.attrs["Size"] - base.attrs["Size"]


def swe_case(row: dict[str, Any], method: str, blob_mb: int, repeats: int) -> dict[str, list]:
    def make() -> Any:
        return gym.make("rllm/SWE-v0", tasks=[row], pool_spares=0, snapshot_method=method)

    env = make()
    times: dict[str, list] = {name: [] for name in (*OPERATIONS, "held", "size")}
    try:
        env.reset(options={"task": row})
        blob = f" && head -c {blob_mb << 20} /dev/urandom > blob.bin" if blob_mb else ""
        shown, _, _, _, info = env.step(bash(EDITS + blob))
        if info.get("failure") or "exit code: 0" not in shown:
            raise RuntimeError(f"the edits failed: {shown}")
        client = env.unwrapped.pool.client
        unwrapped = env.unwrapped
        times["size"].append(workspace_bytes(unwrapped.workspace, unwrapped.swe_task))
        for _ in range(repeats):
            elapsed, snap = timed(snapshot, env)
            times["snapshot"].append(elapsed)
            times["held"].append(held_bytes(snap, client))
            env.step(bash("echo later >> notes.txt && rm -rf .git/hooks"))
            times["restore (same env)"].append(timed(restore, env, snap)[0])
            other = make()
            try:
                times["restore (new env)"].append(timed(restore, other, snap)[0])
                shown = other.step(bash("cat notes.txt; ls /tmp/keep"))[0]
                if "later" in shown or "kept" not in shown:
                    raise RuntimeError(f"the restored workspace is wrong:\n{shown}")
            finally:
                other.close()
            release(snap)  # a commit's image goes with the last container of it
            # Release where nothing runs from the snapshot (a commit's image removed at once).
            spare = snapshot(env)
            times["release"].append(timed(release, spare)[0])
    finally:
        env.close()
    return times


def swe_section(repeats: int, blob_mb: list[int]) -> None:
    rows = [dict(row) for row in load_swe_tasks(None, "train").rows]
    first = {row["repo"]: row for row in reversed(rows)}
    cases = [("toolz", 0), ("boltons", 0)] + [("boltons", size) for size in blob_mb]
    print(f"rllm/SWE-v0: the agent's container, median of {repeats}")
    print(f"{'project':10s} {'written':>8s}  {'operation':20s} {'tar':>12s} {'commit':>12s} ratio")
    for project, extra in cases:
        row = first[project]
        results = {method: swe_case(row, method, extra, repeats) for method in METHODS}
        written = f"+{extra} MB" if extra else "edits"
        for operation in OPERATIONS:
            tar = statistics.median(results["tar"][operation])
            commit = statistics.median(results["commit"][operation])
            # The tar method's release frees nothing: no ratio to speak of.
            ratio = f"{commit / tar:5.1f}x" if tar >= 1e-4 else "    -"
            print(f"{project:10s} {written:>8s}  {operation:20s} {ms(tar)} {ms(commit)} {ratio}")
        held = {m: statistics.median(results[m]["held"]) / (1 << 20) for m in METHODS}
        picked = "tar" if results["tar"]["size"][0] <= AUTO_TAR_LIMIT_BYTES else "commit"
        print(
            f"{project:10s} {written:>8s}  {'held':20s} {held['tar']:9.2f} MB "
            f"{held['commit']:9.2f} MB (archive in Python / image layer in Docker); "
            f"auto picks {picked}"
        )


def code_section(repeats: int) -> None:
    task = {
        "task_id": "add",
        "prompt": "Write add(a, b).",
        "style": "function",
        "entry_point": "add",
        "public_tests": [{"args": "[1, 2]", "expected": "3"}],
        "hidden_tests": [{"args": "[1, 2]", "expected": "3"}],
    }
    env = gym.make("rllm/Code-v0", tasks=[task], backend="docker", max_turns=3)
    try:
        env.reset(options={"task": task})
        env.step("```python\ndef add(a, b):\n    return a - b\n```")
        snaps, restores = [], []
        for _ in range(repeats * 20):
            elapsed, snap = timed(snapshot, env)
            snaps.append(elapsed)
            restores.append(timed(restore, env, snap)[0])
    finally:
        env.close()
    print(
        "\nrllm/Code-v0 (docker sandbox): no container state to capture (every run starts "
        "from an empty scratch dir on a read-only root)"
    )
    print(
        f"  in-Python snapshot p50 {statistics.median(snaps) * 1e6:.0f} us, "
        f"restore p50 {statistics.median(restores) * 1e6:.0f} us (n={len(snaps)})"
    )


def web_section(repeats: int) -> None:
    from rllm_envs.web.solver import step_action
    from rllm_envs.web.tasks import FAMILIES

    row = {"family": "wizard", "seed": 1}
    solution = FAMILIES["wizard"].instance(1).solution
    env = gym.make("rllm/Web-v0")
    print("\nrllm/Web-v0: the wizard page; restore replays the page actions on a fresh page")
    try:
        for actions in (0, 2, 6):
            snaps, restores = [], []
            for _ in range(repeats):
                observation, _ = env.reset(options={"task": row})
                for step in solution[:actions]:
                    observation = env.step(step_action(step, observation))[0]
                elapsed, snap = timed(snapshot, env)
                snaps.append(elapsed)
                env.step('scroll("down")')
                restores.append(timed(restore, env, snap)[0])
            print(
                f"  after {actions} actions: snapshot p50 {ms(statistics.median(snaps))}, "
                f"restore p50 {ms(statistics.median(restores))}"
            )
    finally:
        env.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--blob-mb", type=int, nargs="*", default=[4, 32])
    parser.add_argument(
        "--sections",
        default=",".join(SECTIONS),
        help="which envs to time (swe and code need Docker, web Chromium)",
    )
    parser.add_argument("--no-web", action="store_true", help="leave the web section out")
    args = parser.parse_args()
    sections = [name for name in args.sections.split(",") if name]
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        parser.error(f"--sections: unknown {unknown}; choose from {', '.join(SECTIONS)}")
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs\n")
    for name in sections:
        if not (name == "web" and args.no_web):
            SECTIONS[name](args)


# Each section by name, run in this order.
SECTIONS: dict[str, Callable[[argparse.Namespace], None]] = {
    "swe": lambda args: swe_section(args.repeats, args.blob_mb),
    "code": lambda args: code_section(args.repeats),
    "web": lambda args: web_section(args.repeats),
}


if __name__ == "__main__":
    main()
