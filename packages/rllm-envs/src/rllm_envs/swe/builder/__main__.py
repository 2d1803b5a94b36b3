"""``python -m rllm_envs.swe.builder instances``: make the shipped task rows.

The images the rows are made on come from ``rllm-envs setup swe`` (one way to build them).
"""

from __future__ import annotations

import argparse
import sys

from rllm_envs.swe.builder.projects import PROJECTS, project_named


def _projects(names: list[str] | None):
    return [project_named(name) for name in names] if names else list(PROJECTS)


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
