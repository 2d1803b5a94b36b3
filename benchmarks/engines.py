"""Every engine on the embedded model, side by side: tokens/s, time to first token, weight sync.

Each side runs in a child process of its own (a fresh interpreter, a session of its own,
whatever it starts killed before the next side), one after the other on the same machine:

    local           LocalEngine (transformers, float32, continuous batching) in the process
    process         the same LocalEngine in a child process of its own (ProcessEngine)
    llamacpp        llama.cpp servers side by side, one per core, one request at a time each
                    (LlamaCppEngine, the shipped GGUF: what rllm-eval runs smollm2 on)
    llamacpp-batch  llama.cpp in the process, every sequence in one batch (LlamaCppModel in a
                    LocalEngine, F16: what rollout.engine=llamacpp trains with)
    vllm            vLLM in the process (VLLMEngine: AsyncLLM, its CPU build here)
    vllm-server     vLLM's OpenAI server as a child process, through VLLMServerEngine

Per side and per concurrency n (``--concurrency``, default 1,32,64,128,256): n chats sent at
once, each asking for ``--max-tokens`` tokens at temperature 1 (seeded): completion tokens
per second of wall time; then n requests of one token each, sent at once: the median time to
that first token (queueing and the prompt read, under that load). The first round of each
side warms it up and is not counted. Then a weight sync: the model's own float32 state dict,
slightly changed, pushed with weight_sync.sync_weights (what a trainer does), timed.

Printed: a table per side, each side's tokens/s as a ratio to the best llama.cpp side per
concurrency, and where each side peaks; ``--json`` writes the numbers, ``--plot`` the
tokens/s curves (PNG).

    python benchmarks/engines.py                                   # every side, about an hour
    python benchmarks/engines.py --sides llamacpp,vllm --concurrency 1,32
    python benchmarks/engines.py --sides vllm --vllm-options dtype=bfloat16,cpu_cores=0
    python benchmarks/engines.py --model tiny --sides local,process --concurrency 1,4 \\
        --max-tokens 4                                             # the test's tiny mode
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

SIDES = ("local", "process", "llamacpp", "llamacpp-batch", "vllm", "vllm-server")
LLAMACPP_SIDES = ("llamacpp", "llamacpp-batch")
DEFAULT_CONCURRENCY = (1, 32, 64, 128, 256)


# ---- the engines, built in the side's own process ----------------------------------------------


def _local(model: str) -> Any:
    from rllm_agents.engines.local import LocalEngine

    return LocalEngine.from_name(model, max_batch_size=256)


def _process(model: str) -> Any:
    from rllm_agents.engines.process.engine import ProcessEngine
    from rllm_agents.models import load_model, load_tokenizer

    return ProcessEngine(load_model(model), load_tokenizer(model), max_batch_size=256)


def _llamacpp(model: str) -> Any:
    from rllm_agents.engines.llamacpp.server import LlamaCppEngine

    return LlamaCppEngine.start(model)


def _llamacpp_batch(model: str) -> Any:
    from rllm_agents.engines.llamacpp.batch import LlamaCppModel
    from rllm_agents.engines.llamacpp.gguf_retype import f16_copy
    from rllm_agents.engines.llamacpp.server import usable_cores
    from rllm_agents.engines.local import LocalEngine
    from rllm_agents.models import load_tokenizer, smollm2_gguf_path

    gguf = LlamaCppModel(f16_copy(smollm2_gguf_path()), threads=usable_cores())
    return LocalEngine(gguf, load_tokenizer(model), max_batch_size=256)


def _vllm_options() -> dict[str, Any]:
    """--vllm-options (key=value,...; numbers and true/false parsed), passed on to the child
    in $RLLM_BENCH_VLLM_OPTIONS."""
    options = {}
    for pair in filter(None, os.environ.get("RLLM_BENCH_VLLM_OPTIONS", "").split(",")):
        key, _, text = pair.partition("=")
        options[key] = json.loads(text) if text[:1].isdigit() or text in ("true", "false") else text
    return options


def _vllm(model: str) -> Any:
    from rllm_agents.engines.vllm.engine import VLLMEngine

    return VLLMEngine(model, **_vllm_options())


def _vllm_server(model: str) -> Any:
    from rllm_agents.engines.vllm.server import VLLMServerEngine

    return VLLMServerEngine.start(model, **_vllm_options())


ENGINES: dict[str, Callable[[str], Any]] = {
    "local": _local,
    "process": _process,
    "llamacpp": _llamacpp,
    "llamacpp-batch": _llamacpp_batch,
    "vllm": _vllm,
    "vllm-server": _vllm_server,
}


# ---- one side (runs in the child) --------------------------------------------------------------


def _chat(i: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Tell me a short story about the number {i}."}]


async def _round(engine: Any, n: int, max_tokens: int, offset: int) -> tuple[int, float]:
    from rllm_agents.engines.base import SamplingParams

    started = time.perf_counter()
    outputs = await asyncio.gather(
        *(
            engine.generate(
                _chat(offset + i),
                sampling=SamplingParams(temperature=1.0, max_tokens=max_tokens, seed=offset + i),
            )
            for i in range(n)
        )
    )
    # llama.cpp's server returns no token ids; it counts them in its usage.
    tokens = sum(
        len(out.completion_ids) or out.usage.get("completion_tokens", 0) for out in outputs
    )
    return tokens, time.perf_counter() - started


async def _first_tokens(engine: Any, n: int, offset: int) -> float:
    """The median latency of n one-token requests sent at once."""
    from rllm_agents.engines.base import SamplingParams

    async def one(i: int) -> float:
        started = time.perf_counter()
        await engine.generate(_chat(offset + i), sampling=SamplingParams(max_tokens=1, seed=i))
        return time.perf_counter() - started

    return statistics.median(await asyncio.gather(*(one(i) for i in range(n))))


async def _sync_s(engine: Any, model: str) -> float | None:
    if not hasattr(engine, "update_weights"):
        return None
    import torch
    from rllm_agents.engines.weight_sync import PolicyWeights, sync_weights
    from rllm_agents.models import load_model

    state = {
        name: tensor + 1e-4 * torch.randn_like(tensor)
        for name, tensor in load_model(model).state_dict().items()
    }
    started = time.perf_counter()
    await sync_weights(engine, PolicyWeights(state, version=1))
    return time.perf_counter() - started


async def measure_side(side: str, model: str, concurrency: list[int], max_tokens: int) -> dict:
    started = time.perf_counter()
    engine = ENGINES[side](model)
    result: dict[str, Any] = {"side": side, "start_s": time.perf_counter() - started, "rows": []}
    try:
        await _round(engine, min(4, max(concurrency)), max_tokens, offset=10_000)  # warm-up
        for n in concurrency:
            tokens, wall = await _round(engine, n, max_tokens, offset=n)
            ttft = await _first_tokens(engine, n, offset=20_000 + n)
            row = {"n": n, "tokens": tokens, "wall_s": wall, "tokens_per_s": tokens / wall}
            result["rows"].append({**row, "ttft_s": ttft})
            print(f"  {side} n={n}: {tokens / wall:.1f} tokens/s, first token {ttft:.2f} s",
                  file=sys.stderr, flush=True)  # fmt: skip
        result["sync_s"] = await _sync_s(engine, model)
    finally:
        close = getattr(engine, "aclose", None)
        if close is not None:
            await close()
        elif hasattr(engine, "close"):
            engine.close()
    return result


def side_main(side: str, model: str, concurrency: list[int], max_tokens: int, out: Path) -> None:
    result = asyncio.run(measure_side(side, model, concurrency, max_tokens))
    out.write_text(json.dumps(result))


# ---- the harness -----------------------------------------------------------------------------


def run_side(side: str, args: argparse.Namespace, scratch: Path) -> dict:
    """`side` in a child process of its own; its JSON result, or an error entry."""
    out, log = scratch / f"{side}.json", scratch / f"{side}.log"
    command = [
        sys.executable, __file__, "--side", side, "--model", args.model,
        "--concurrency", ",".join(map(str, args.concurrency)),
        "--max-tokens", str(args.max_tokens), "--out", str(out),
    ]  # fmt: skip
    environment = {**os.environ, "RLLM_BENCH_VLLM_OPTIONS": args.vllm_options}
    with open(log, "w") as stderr:
        child = subprocess.Popen(
            command, stdout=stderr, stderr=stderr, start_new_session=True, env=environment
        )
        try:
            code = child.wait(timeout=args.side_timeout)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            _kill_group(child.pid)  # whatever the side left running
    if code == 0 and out.exists():
        return json.loads(out.read_text())
    tail = log.read_text()[-1500:]
    return {"side": side, "error": f"exit {code}" if code is not None else "timed out", "log": tail}


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def best_llamacpp(results: list[dict], n: int) -> float | None:
    rates = [
        row["tokens_per_s"]
        for result in results
        if result["side"] in LLAMACPP_SIDES
        for row in result.get("rows", [])
        if row["n"] == n
    ]
    return max(rates) if rates else None


def report(results: list[dict]) -> None:
    for result in results:
        if "error" in result:
            print(f"\n{result['side']}: FAILED ({result['error']})\n{result['log']}")
            continue
        sync = result.get("sync_s")
        sync_text = f"{sync:.2f} s" if sync is not None else "-"
        print(f"\n{result['side']} (start {result['start_s']:.1f} s, weight sync {sync_text})")
        print(f"{'concurrent':>10} {'tokens/s':>9} {'first token':>12} {'vs llama.cpp':>13}")
        for row in result["rows"]:
            best = best_llamacpp(results, row["n"])
            ratio = f"{row['tokens_per_s'] / best:.2f}x" if best else "-"
            print(f"{row['n']:>10} {row['tokens_per_s']:>9.1f} {row['ttft_s']:>11.2f}s {ratio:>13}")
        if result["rows"]:
            peak = max(result["rows"], key=lambda row: row["tokens_per_s"])
            print(f"peak: {peak['tokens_per_s']:.1f} tokens/s at {peak['n']} concurrent")


def plot(results: list[dict], png: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4.5))
    for result in results:
        rows = result.get("rows", [])
        if rows:
            axis.plot([r["n"] for r in rows], [r["tokens_per_s"] for r in rows], "o-",
                      label=result["side"])  # fmt: skip
    axis.set_xscale("log", base=2)
    axis.set_xlabel("concurrent chats")
    axis.set_ylabel("completion tokens / s")
    axis.set_title(title)
    axis.grid(alpha=0.3)
    axis.legend()
    figure.tight_layout()
    figure.savefig(png, dpi=110)


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sides", default=",".join(SIDES), help=f"of {','.join(SIDES)}")
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--concurrency", default=",".join(map(str, DEFAULT_CONCURRENCY)))
    parser.add_argument("--max-tokens", type=int, default=48)
    parser.add_argument(
        "--vllm-options", default="", help="settings of the vLLM sides: dtype=bfloat16,cpu_cores=0"
    )
    parser.add_argument("--side-timeout", type=float, default=3600.0, help="seconds per side")
    parser.add_argument("--json", type=Path, help="write every side's numbers here")
    parser.add_argument("--plot", type=Path, help="write the tokens/s curves here (PNG)")
    parser.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)  # the child's part
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.sides = [side for side in args.sides.split(",") if side]
    unknown = sorted(set(args.sides) - set(SIDES))
    if unknown:
        parser.error(f"unknown sides {unknown}; choose from {','.join(SIDES)}")
    args.concurrency = [int(n) for n in args.concurrency.split(",")]
    return args


def main(argv: list[str] | None = None) -> list[dict]:
    args = parse(argv)
    if args.side:
        side_main(args.side, args.model, args.concurrency, args.max_tokens, args.out)
        return []
    print(f"engines on {args.model}: {args.max_tokens} tokens a chat, concurrency "
          f"{args.concurrency}, {len(os.sched_getaffinity(0))} cores, load {os.getloadavg()}")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="rllm-engines-") as scratch:
        results = [run_side(side, args, Path(scratch)) for side in args.sides]
    report(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    if args.plot:
        plot(results, args.plot, f"{args.model}, {args.max_tokens} tokens a chat")
    return results


if __name__ == "__main__":
    main()
