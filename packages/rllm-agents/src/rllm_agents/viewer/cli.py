"""``rllm-view RUN``: browse a run's episodes in a local web page.

    rllm-view runs/eval                      # an rllm-eval --output folder
    rllm-view runs/rllm-train --port 8765    # its reward curve, and with
                                             # trainer.save_episodes each step's episodes
    rllm-view runs/eval/episodes.jsonl --tokenizer smollm2

Filter the episodes by reward, task, outcome (ok, error, or the env's failure kind) and
training step, open one to read it turn by turn (observations, replies, actions and tool
calls, rewards) with the tokens training learns from highlighted, beside the run's per-step
reward curve when it has one (rllm-train's metrics.jsonl). Tokens are decoded with the run's
model's tokenizer (or --tokenizer); without one they are shown as ids.

Exit status: 0 stopped with Ctrl-C; 2 bad input (not a run folder, an unreadable file, a port
in use), one line on stderr.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from rllm_agents.cli.usage import CommandParser, UsageError, one_line, report_usage_error
from rllm_agents.viewer.runs import RunError, load_run
from rllm_agents.viewer.server import Decode, Viewer, make_server

PROG = "rllm-view"


def build_parser() -> CommandParser:
    parser = CommandParser(
        prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("run", help="a run folder (rllm-eval or rllm-train) or an episodes file")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=8765, help="0 picks a free port")
    parser.add_argument(
        "--tokenizer",
        metavar="NAME|PATH",
        help="decode token ids with this model's tokenizer (default: the run's model)",
    )
    return parser


def token_decoder(name: str) -> tuple[Decode | None, str]:
    """(decode, "") with the tokenizer of `name`, or (None, why not): the page then shows ids."""
    if not name:
        return None, "the run names no model; pass --tokenizer"
    try:
        from rllm_agents.models import load_tokenizer

        tokenizer = load_tokenizer(name)
    except Exception as error:  # any failure to load leaves the page usable, with ids
        return None, f"no tokenizer for {name!r} ({one_line(error)})"

    def decode(ids: list[int]) -> str:
        return tokenizer.decode(ids, skip_special_tokens=False, clean_up_tokenization_spaces=False)

    return decode, ""


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        run = load_run(args.run)
        decode, why = token_decoder(args.tokenizer or run.model)
        server = make_server(Viewer(run, decode), args.host, args.port)
    except UsageError as error:
        return report_usage_error(PROG, error)
    except (RunError, OSError) as error:
        print(f"{PROG}: {one_line(error)}", file=sys.stderr)
        return 2
    host, port = server.server_address[:2]
    if why:
        print(f"{PROG}: tokens shown as ids: {why}", file=sys.stderr)
    if run.cut_lines:  # a run still writing, or one killed mid-line
        print(
            f"{PROG}: skipped a cut-short last line at {', '.join(run.cut_lines)}", file=sys.stderr
        )
    print(
        f"{PROG}: {len(run.episodes)} episodes of {run.path} at http://{host}:{port}/", flush=True
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
