"""``rllm-envs``: make and check on this machine what rllm's envs need.

    rllm-envs setup swe              # Docker images for rllm/SWE-v0 (rootfs, base, projects)
    rllm-envs setup code web         # the code sandbox's image and bwrap; the browser check
    rllm-envs setup all --force      # everything, rebuilt even where up to date
    rllm-envs setup serve rllm/FrozenLake-v0 rllm/Math-v0   # an image serving each env id:
                                     #   docker run --rm -p 8000:8000 rllm-serve/frozenlake-v0
    rllm-envs doctor                 # every env: ready or not, and why
    rllm-envs doctor swe code        # exit status 1 unless both are ready
    rllm-envs serve rllm/FrozenLake-v0 --port 8000   # served with the OpenEnv protocol
    rllm-envs harbor-check my_tasks/   # Harbor tasks: oracle scores 1.0, untouched 0.0

Also ``python -m rllm_envs setup|doctor|serve|harbor-check`` (see :mod:`rllm_envs.serve.cli`,
:mod:`rllm_envs.harbor.check`). Setup is idempotent: what is there and up to date
is kept (images record their recipes), so a second run takes seconds. The Docker engine itself,
bubblewrap and Chromium are system packages it does not install; it says so in one line when
one is missing, naming the fix.

Image names default to the environment variables the envs read, so setup builds what the envs
look for: RLLM_SANDBOX_IMAGE (rllm-sandbox:1), RLLM_ROOTFS_IMAGE
(rllm-sandbox-rootfs:bookworm), RLLM_SWE_IMAGE_PREFIX (rllm-swe/); the serve images'
RLLM_SERVE_IMAGE_PREFIX (rllm-serve/). Give an option instead and set the variable for the envs
too (a test keeps its images apart under fresh names this way). ``serve`` takes the env ids
after it (the words that are not targets) and refuses envs that start containers or a browser
themselves (SWE, Code, Harbor, Web): their server runs beside Docker, ``rllm-envs serve ID``.

Exit status: 0 done (setup) or every named env ready (doctor); 1 a build failed (setup) or a
named env is not ready (doctor); 2 bad input, or a part this command cannot make itself is
missing (one line on stderr naming the fix); 130 interrupted.
"""

from __future__ import annotations

import argparse
import re
import sys
import time

from rllm_envs.core.usage import CommandParser, UsageError, one_line, report_usage_error
from rllm_envs.harbor.check import add_check_command
from rllm_envs.sandbox.image_names import rootfs_image, sandbox_image
from rllm_envs.serve.cli import add_serve_command
from rllm_envs.setup.base import SetupError, SetupOptions, SetupRun, StageFailed
from rllm_envs.setup.command import PROG
from rllm_envs.setup.rootfs import default_mirror
from rllm_envs.setup.sandbox_image import BASE_CHOICES
from rllm_envs.setup.serve_images import checked_serve_id, default_prefix, run_command
from rllm_envs.setup.stages import SERVE_TARGET, TARGETS, stages_for
from rllm_envs.swe.builder.images import BASE_IMAGE
from rllm_envs.swe.builder.projects import PROJECTS, image_prefix, local_image, project_named

NOT_READY_EXIT_CODE = 1
INTERRUPTED_EXIT_CODE = 130
# A Docker image reference as this command accepts it: lowercase path components and an
# optional tag, after an optional registry host (a first component with a dot, a port, or
# "localhost", as Docker tells a host from a path).
_IMAGE_NAME = re.compile(
    r"^(?:(?:localhost|[a-zA-Z0-9-]+(?:\.[a-zA-Z0-9-]+)+)(?::[0-9]+)?/|[a-zA-Z0-9-]+:[0-9]+/)?"
    r"[a-z0-9]+(?:[._-]+[a-z0-9]+)*(?:/[a-z0-9]+(?:[._-]+[a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?$"
)
SETUP_WORDS = (*TARGETS, SERVE_TARGET)


class TargetsAction(argparse.Action):
    """Setup's positional words: targets, and after ``serve`` the env ids to serve (the words
    that are not targets). Sets ``targets`` and ``serve_envs``."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        targets, env_ids, serving = [], [], False
        for word in values:
            if word in SETUP_WORDS:
                targets.append(word)
                serving = serving or word == SERVE_TARGET
            elif serving:
                env_ids.append(word)
            else:
                choices = ", ".join(repr(choice) for choice in SETUP_WORDS)
                parser.error(f"argument targets: invalid choice: {word!r} (choose from {choices})")
        if serving and not env_ids:
            parser.error(
                f"{SERVE_TARGET} needs the env ids after it, e.g. "
                f"rllm-envs setup {SERVE_TARGET} rllm/FrozenLake-v0"
            )
        namespace.targets = list(dict.fromkeys(targets))
        namespace.serve_envs = list(dict.fromkeys(env_ids))


def build_parser() -> CommandParser:
    parser = CommandParser(
        prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="setup|doctor|serve|harbor-check"
    )
    setup = commands.add_parser(
        "setup",
        help="make what the envs need",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    setup.add_argument(
        "targets",
        nargs="+",
        action=TargetsAction,
        metavar="|".join(SETUP_WORDS),
        help=f"what to make; {SERVE_TARGET} ID [ID ...]: an image serving each env id",
    )
    setup.add_argument(
        "--sandbox-image",
        default=sandbox_image(),
        help="default: $RLLM_SANDBOX_IMAGE or %(default)s",
    )
    setup.add_argument(
        "--rootfs-image", default=rootfs_image(), help="default: $RLLM_ROOTFS_IMAGE or %(default)s"
    )
    setup.add_argument(
        "--swe-image-prefix",
        default=image_prefix(),
        help="the SWE images' names start with it; default: $RLLM_SWE_IMAGE_PREFIX or %(default)s",
    )
    setup.add_argument(
        "--swe-project",
        action="append",
        default=[],
        metavar="NAME",
        help=f"build only this SWE project (repeatable); one of {', '.join(p.repo for p in PROJECTS)}",
    )
    setup.add_argument(
        "--sandbox-base",
        choices=tuple(BASE_CHOICES),
        default="auto",
        help="the sandbox image's base: the official Python image (pulled), the Debian rootfs, "
        "or the first that works (default)",
    )
    setup.add_argument(
        "--debian-mirror",
        default=default_mirror(),
        help="default: $RLLM_DEBIAN_MIRROR or %(default)s",
    )
    setup.add_argument(
        "--serve-image-prefix",
        default=default_prefix(),
        help="the serve images' names start with it; default: $RLLM_SERVE_IMAGE_PREFIX or "
        "%(default)s",
    )
    setup.add_argument("--force", action="store_true", help="rebuild even what is up to date")
    setup.set_defaults(run=run_setup)
    doctor = commands.add_parser("doctor", help="say which envs are ready here, and why not")
    doctor.add_argument("envs", nargs="*", metavar="ENV", help="env names (default: every env)")
    doctor.set_defaults(run=run_doctor)
    add_serve_command(commands)
    add_check_command(commands)
    return parser


def checked_image_name(option: str, name: str) -> str:
    if not _IMAGE_NAME.match(name):
        raise UsageError(
            f"{option} {name!r} is not a Docker image name (lowercase, e.g. rllm-sandbox:test)"
        )
    return name


def options_from(args: argparse.Namespace) -> SetupOptions:
    """The options of a setup run, every name checked before anything slow starts."""
    checked_image_name("--swe-image-prefix", local_image(BASE_IMAGE, args.swe_image_prefix))
    checked_image_name("--serve-image-prefix", f"{args.serve_image_prefix}env:latest")
    serve_envs = tuple(dict.fromkeys(checked_serve_id(env_id) for env_id in args.serve_envs))
    try:
        projects = tuple(project_named(name).repo for name in args.swe_project)
    except KeyError as error:
        raise UsageError(f"--swe-project: {error.args[0]}") from None
    return SetupOptions(
        sandbox_image=checked_image_name("--sandbox-image", args.sandbox_image),
        rootfs_image=checked_image_name("--rootfs-image", args.rootfs_image),
        swe_image_prefix=args.swe_image_prefix,
        swe_projects=projects,
        sandbox_base=args.sandbox_base,
        debian_mirror=args.debian_mirror,
        serve_envs=serve_envs,
        serve_image_prefix=args.serve_image_prefix,
        force=args.force,
    )


def run_setup(args: argparse.Namespace) -> int:
    from rllm_envs.setup.display import make_console, run_stages

    options = options_from(args)
    console = make_console()
    run = SetupRun(options)
    started = time.monotonic()
    try:
        run_stages(stages_for(args.targets), run, console)
    except SetupError as error:
        return report_usage_error(PROG, error)
    except StageFailed as error:
        # The whole message (a build's log tail) for reading; one line for scripts.
        console.print(str(error), markup=False, highlight=False)
        print(f"{PROG}: error: {one_line(str(error).splitlines()[0])}", file=sys.stderr)
        return 1
    finally:
        run.close()
    console.print(f"ready: {', '.join(args.targets)} ({time.monotonic() - started:.1f} s)")
    for env_id in options.serve_envs:
        command = run_command(options.serve_image_prefix, env_id)
        console.print(f"serve {env_id}: {command}", markup=False, highlight=False, soft_wrap=True)
    return 0


def run_doctor(args: argparse.Namespace) -> int:
    from rllm_envs.setup.display import make_console
    from rllm_envs.setup.doctor import ENVS, Probe, examine, report_table

    unknown = [name for name in args.envs if name not in ENVS]
    if unknown:
        raise UsageError(f"unknown env {unknown[0]!r}; choose from {', '.join(ENVS)}")
    probe = Probe()
    try:
        reports = examine(tuple(dict.fromkeys(args.envs)) or tuple(ENVS), probe)
    finally:
        probe.close()
    make_console().print(report_table(reports))
    named_not_ready = [report.env for report in reports if args.envs and not report.ready]
    return NOT_READY_EXIT_CODE if named_not_ready else 0


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return args.run(args)
    except UsageError as error:
        return report_usage_error(PROG, error)
    except KeyboardInterrupt:
        return INTERRUPTED_EXIT_CODE


if __name__ == "__main__":
    sys.exit(main())
