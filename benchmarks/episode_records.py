"""What recording episodes costs, and which file format holds them best.

    python benchmarks/episode_records.py [--parallel 256] [--per-agent 2] [--turns 4]
        [--latency 1.0] [--rounds 3] [--skip-cost] [--skip-format]

1. Recording cost: the installed ``rllm-eval`` against a loopback OpenAI server with a fixed
   latency (engine_throughput.py's CannedServer: a child process answering "`Left`" after
   ``--latency`` s), ``--parallel`` agents playing ``--per-agent`` FrozenLake episodes of
   ``--turns`` turns each. Three modes, taking turns round by round so that load from other
   work lands on all of them alike: ``none`` (no --output: nothing written), ``plain``
   (--output with ``--no-env-record``: the episode log as it was before the env record) and
   ``recorded`` (--output: the full record). Each is timed as the whole process; the median of
   ``--rounds`` rounds is the result. Goal: recorded costs <= 5 % of none's wall time.
2. Format: the episodes the last recorded run wrote, as JSONL (what every run writes, one
   line a finished episode) and as Parquet (pyarrow, zstd): bytes, seconds to write them all,
   seconds to read them back as Episodes, and seconds for Hugging Face ``datasets`` to load
   each file (``load_dataset("json"|"parquet")``, fresh cache each time). Best of three tries
   each. Parquet cannot take the records as nested columns: pyarrow refuses a struct with no
   field (an empty ``info``), and values whose type varies between episodes or envs (an
   observation that is text here and a dict there, free-form infos and task rows) have no one
   column type. So its rows keep the scalar fields as columns and every free-form field as a
   JSON text column - the shape a Parquet export of these records would have to take.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from engine_throughput import CANNED_REPLY, CannedServer, _user_python_env  # noqa: E402

MODES = {"none": None, "plain": ["--no-env-record"], "recorded": []}
COST_GOAL_PERCENT = 5.0


def eval_seconds(mode: str, folder: Path, args: argparse.Namespace) -> float:
    """One rllm-eval process in `mode`, timed from start to exit."""
    command = [sys.executable, "-m", "rllm_agents.cli.eval", "--env", "rllm/FrozenLake-v0"]
    with CannedServer(args.latency, CANNED_REPLY) as server:
        command += ["--base-url", server.base_url, "--model", "canned", "--no-progress"]
        command += ["--num-tasks", str(args.parallel), "--n", str(args.per_agent)]
        command += ["--parallel", str(args.parallel), "--max-turns", str(args.turns)]
        command += ["--max-tokens", "16"]
        if MODES[mode] is not None:
            command += ["--output", str(folder / mode), "--overwrite", *MODES[mode]]
        started = time.perf_counter()
        result = subprocess.run(
            command, capture_output=True, text=True, timeout=600, env=_user_python_env()
        )
        seconds = time.perf_counter() - started
    if result.returncode != 0:
        raise RuntimeError(f"rllm-eval ({mode}) failed: {result.stderr[-2000:]}")
    return seconds


def recording_cost(args: argparse.Namespace, folder: Path) -> dict:
    times: dict[str, list[float]] = {mode: [] for mode in MODES}
    for _ in range(args.rounds):
        for mode in MODES:
            times[mode].append(eval_seconds(mode, folder, args))
    medians = {mode: statistics.median(values) for mode, values in times.items()}
    base = medians["none"]
    report = {
        "episodes": args.parallel * args.per_agent,
        "ideal_s": args.per_agent * args.turns * args.latency,
        "rounds_s": {mode: [round(t, 3) for t in values] for mode, values in times.items()},
        "median_s": {mode: round(value, 3) for mode, value in medians.items()},
        "recorded_vs_none_percent": round(100 * (medians["recorded"] - base) / base, 2),
        "recorded_vs_plain_percent": round(
            100 * (medians["recorded"] - medians["plain"]) / medians["plain"], 2
        ),
        "episodes_file_bytes": {
            mode: (folder / mode / "episodes.jsonl").stat().st_size
            for mode in ("plain", "recorded")
        },
    }
    print(
        f"rllm-eval, {report['episodes']} FrozenLake episodes of {args.turns} turns at "
        f"{args.parallel} parallel, latency {args.latency} s (ideal {report['ideal_s']:.1f} s), "
        f"median of {args.rounds}: none {medians['none']:.2f} s, plain {medians['plain']:.2f} s, "
        f"recorded {medians['recorded']:.2f} s -> recording costs "
        f"{report['recorded_vs_none_percent']:+.2f} % of the unrecorded run "
        f"({report['recorded_vs_plain_percent']:+.2f} % over the plain log; goal <= "
        f"{COST_GOAL_PERCENT} %); all rounds: {report['rounds_s']}"
    )
    return report


def best_of(function, tries: int = 3) -> float:
    times = []
    for _ in range(tries):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return min(times)


SCALAR_FIELDS = ("id", "termination_reason", "is_correct", "failure", "error", "format_version")


def parquet_row(record: dict) -> dict:
    """A record as a Parquet row: scalars as columns, free-form fields as JSON text."""
    return {
        key: value if key in SCALAR_FIELDS else json.dumps(value, ensure_ascii=False)
        for key, value in record.items()
    }


def from_parquet_row(row: dict) -> dict:
    return {key: value if key in SCALAR_FIELDS else json.loads(value) for key, value in row.items()}


def format_comparison(episodes_file: Path, folder: Path) -> dict:
    import datasets
    import pyarrow as pa
    import pyarrow.parquet as pq
    from rllm_agents.episodes import episodes_text, read_episodes
    from rllm_agents.types import Episode

    episodes = list(read_episodes(episodes_file))
    jsonl, parquet = folder / "episodes.jsonl", folder / "episodes.parquet"
    records = [episode.to_dict() for episode in episodes]

    def write_jsonl() -> None:
        jsonl.write_text(episodes_text(episodes), encoding="utf-8")

    def write_parquet() -> None:
        rows = [parquet_row(episode.to_dict()) for episode in episodes]
        pq.write_table(pa.Table.from_pylist(rows), parquet, compression="zstd")

    def read_parquet() -> None:
        for row in pq.read_table(parquet).to_pylist():
            Episode.from_dict(from_parquet_row(row))

    def hf_load(kind: str, path: Path) -> None:
        with tempfile.TemporaryDirectory() as cache:
            loaded = datasets.load_dataset(kind, data_files=str(path), cache_dir=cache)
            assert loaded["train"].num_rows == len(records)

    report = {
        "episodes": len(episodes),
        "jsonl": {
            "bytes": 0,
            "write_s": best_of(write_jsonl),
            "read_s": best_of(lambda: list(read_episodes(jsonl))),
            "hf_load_s": best_of(lambda: hf_load("json", jsonl)),
        },
        "parquet": {
            "bytes": 0,
            "write_s": best_of(write_parquet),
            "read_s": best_of(read_parquet),
            "hf_load_s": best_of(lambda: hf_load("parquet", parquet)),
        },
    }
    report["jsonl"]["bytes"], report["parquet"]["bytes"] = (
        jsonl.stat().st_size,
        parquet.stat().st_size,
    )
    for kind in ("jsonl", "parquet"):
        row = report[kind]
        print(
            f"{kind:8s} {report['episodes']} episodes: {row['bytes'] / 1e6:.2f} MB, write "
            f"{1e3 * row['write_s']:.0f} ms, read as Episodes {1e3 * row['read_s']:.0f} ms, "
            f"HF datasets load {1e3 * row['hf_load_s']:.0f} ms"
        )
    return report


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parallel", type=int, default=256)
    parser.add_argument("--per-agent", type=int, default=2)
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--latency", type=float, default=1.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--skip-cost", action="store_true")
    parser.add_argument("--skip-format", action="store_true")
    parser.add_argument("--episodes", type=Path, help="format: use this episodes file instead")
    args = parser.parse_args(argv)
    results: dict = {}
    with tempfile.TemporaryDirectory(prefix="rllm-records-") as name:
        folder = Path(name)
        if not args.skip_cost:
            results["cost"] = recording_cost(args, folder)
        if not args.skip_format:
            source = args.episodes or folder / "recorded" / "episodes.jsonl"
            if not source.is_file():  # --skip-cost: record one run for the comparison
                args.rounds = 1
                eval_seconds("recorded", folder, args)
            (folder / "formats").mkdir()
            results["format"] = format_comparison(source, folder / "formats")
    print(json.dumps(results))
    return results


if __name__ == "__main__":
    main()
