"""``python -m rllm_envs.swe.builder images|instances``: build project images, make task rows."""

from __future__ import annotations

import argparse
import sys
import time

from rllm_envs.swe.builder.projects import PROJECTS, project_named


def _projects(names: list[str] | None):
    return [project_named(name) for name in names] if names else list(PROJECTS)


def build_images(args: argparse.Namespace) -> int:
    from rllm_envs.swe.builder import images
    from rllm_envs.swe.docker_client import docker_client

    client = docker_client()
    cache = images.cache_dir()
    started = time.monotonic()
    tools = images.tools_python(cache)
    base = images.build_base_image(client, cache, nocache=args.nocache)
    print(f"swe images: {base.tag} {'built' if base.built else 'up to date'}", flush=True)
    for project in _projects(args.projects):
        image = images.build_project_image(
            client, project, cache, tools, base=base, nocache=args.nocache
        )
        state = "built" if image.built else "up to date"
        print(f"swe images: {image.tag} {state} (base {image.base})", flush=True)
    print(f"swe images: ready in {time.monotonic() - started:.1f} s")
    return 0


def make_instances(args: argparse.Namespace) -> int:
    from rllm_envs.swe.builder.pipeline import run_pipeline

    return run_pipeline(
        _projects(args.projects),
        per_project=args.per_project,
        seed=args.seed,
        output=args.output,
        workers=args.workers,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rllm_envs.swe.builder", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    images_parser = commands.add_parser("images", help="build the project images (cached)")
    images_parser.add_argument("projects", nargs="*", help="short names; default: all")
    images_parser.add_argument("--nocache", action="store_true", help="rebuild from nothing")
    images_parser.set_defaults(run=build_images)
    rows = commands.add_parser("instances", help="mutate, validate and write the task rows")
    rows.add_argument("projects", nargs="*", help="short names; default: all")
    rows.add_argument("--per-project", type=int, default=30, help="verified instances wanted")
    rows.add_argument("--seed", type=int, default=0)
    rows.add_argument("--workers", type=int, default=2, help="projects validated at once")
    rows.add_argument("--output", default=None, help="folder for the JSONL files (default data/)")
    rows.set_defaults(run=make_instances)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
