"""What the recording gateway costs: per call, and with 256 programs at once.

    python benchmarks/gateway_overhead.py [--conversations 40] [--turns 8] [--rounds 4]
        [--sessions 256] [--latency 0.5] [--session-turns 8] [--session-rounds 3]
        [--programs-in-process] [--tokenizer smollm2] [--skip-tokens] [--skip-sessions]

The model server is the loopback OpenAI-compatible server of ``rllm_agents.testing.fault_server``
in a child process (the benchmarks' ``CannedServer``), answering every request with a canned
reply after a fixed latency. A program is the project's ``OpenAIEngine`` (aiohttp) holding a
chat conversation: it sends the messages, appends the reply and a new user turn, and sends
again. The same programs run against the server directly and through a ``Gateway``, each
program its own recorded session, closed and turned into sequences by ``build_sequences`` at
its end, as a trainer would.

Two set-ups, each beside its direct counterpart:

* ``messages``: the gateway's engine has no tokenizer, so messages pass through to the server
  (direct: the same engine in chat mode).
* ``tokens``: the gateway renders every prompt with ``--tokenizer``'s chat template, reuses the
  model's own tokens across turns and sends token ids (direct: the engine in
  ``use_completions`` mode rendering with the same tokenizer). ``--skip-tokens`` leaves it out.

1. Per call (server latency 0): ``--conversations`` conversations of ``--turns`` calls, one call
   at a time, the programs on the gateway's own event loop; the paths take turns round by round
   (``--rounds``, after one warm-up round), so load from other work lands on all of them alike.
   Printed: p50 / p90 of a call's wall time as the program sees it, and the overhead: gateway
   p50 - direct p50 (goal: <= 1 ms).
2. Sessions at once: ``--sessions`` programs start together, each a conversation of
   ``--session-turns`` calls against a server with ``--latency`` seconds per call, so the ideal
   is turns x latency. The programs run in a child process, as agent programs run beside a
   trainer (``--programs-in-process`` puts them on the gateway's event loop instead, sharing its
   core). Printed: % of ideal per path, the median of ``--session-rounds`` cold rounds (a fresh
   server and gateway each) with all rounds, and the gateway process's CPU time per call
   (goal: the gateway >= 90 % of ideal at 256).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rllm_agents.engines import event_loop
from rllm_agents.engines.base import SamplingParams
from rllm_agents.engines.openai import OpenAIEngine
from rllm_agents.gateway import Gateway, GatewayProcesses, SequenceReport, build_sequences

OVERHEAD_GOAL_MS = 1.0
SESSIONS_GOAL_PERCENT = 90.0
CANNED_REPLY = "The answer is 4, since 2 + 2 = 4."
SAMPLING = SamplingParams(max_tokens=32, temperature=1.0)
SYSTEM = "You are a careful assistant. Think step by step and answer briefly."


@dataclass(frozen=True)
class Route:
    """One way for programs to reach the server."""

    name: str
    through_gateway: bool
    tokens: bool  # prompts rendered with the tokenizer (by the gateway, or by the program)
    processes: int = 0  # serving processes of a GatewayProcesses (0: a Gateway in this process)


@dataclass(frozen=True)
class Target:
    """Where one program sends its calls."""

    base_url: str
    api_key: str | None
    renders: bool  # the program renders prompts itself (the direct token route)
    session_id: str | None = None


@dataclass
class CallTimes:
    route: str
    calls: int
    p50_ms: float
    p90_ms: float
    cpu_ms_per_call: float  # CPU per call: this process (program, gateway, engine) + serving ones


@dataclass
class SessionsRun:
    route: str
    sessions: int
    turns: int
    latency_s: float
    rounds_s: list[float]
    median_s: float
    percent_of_ideal: float
    cpu_ms_per_call: float  # the gateway's CPU per call: this process + its serving processes


def canned_server(latency: float) -> Any:
    """engine_throughput's CannedServer (imported here: the programs' child needs none)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from engine_throughput import CannedServer

    return CannedServer(latency, CANNED_REPLY)


def program_engine(target: Target, tokenizer: Any, max_connections: int = 4) -> OpenAIEngine:
    extra = {"use_completions": True, "tokenizer": tokenizer} if target.renders else {}
    return OpenAIEngine(
        target.base_url,
        "m",
        api_key=target.api_key,
        timeout=60,
        max_connections=max_connections,
        **extra,
    )


class Setup:
    """The server side of one route: nothing (direct), or a gateway and its engine."""

    def __init__(self, route: Route, server_url: str, tokenizer: Any) -> None:
        self.route = route
        self.server_url = server_url
        self.tokenizer = tokenizer
        self.gateway: Gateway | GatewayProcesses | None = None
        self.reports: list[SequenceReport] = []

    async def __aenter__(self) -> Setup:
        if self.route.through_gateway:
            upstream = Target(self.server_url, None, self.route.tokens)
            engine = program_engine(upstream, self.tokenizer, max_connections=1024)
            if self.route.processes:
                self.gateway = GatewayProcesses(engine, processes=self.route.processes)
            else:
                self.gateway = Gateway(engine)
                # The messages route: no tokenizer at all, not even the engine's own.
                self.gateway.tokenizer = self.tokenizer if self.route.tokens else None
            await self.gateway.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self.gateway is not None:
            await self.gateway.stop()
            if isinstance(self.gateway, Gateway):
                await self.gateway.engine.aclose()

    def serving_cpu_s(self) -> float:
        """CPU seconds used so far by the serving processes (none: the gateway is here)."""
        if not isinstance(self.gateway, GatewayProcesses):
            return 0.0
        return sum(process_cpu_s(pid) for pid in self.gateway.pids)

    def target(self) -> Target:
        """A new program's target: the server itself, or a new recorded session."""
        if self.gateway is None:
            return Target(self.server_url, None, self.route.tokens)
        session = self.gateway.open_session()
        return Target(session.base_url, session.api_key, False, session.id)

    async def finish(self, target: Target) -> None:
        """End a program's session as a trainer would: take its calls, build sequences."""
        if target.session_id is not None:
            calls = await self.gateway.aclose_session(target.session_id)
            self.reports.append(build_sequences(calls)[1])

    def check_merged(self, turns: int) -> None:
        """On the token route every conversation must have become one sequence."""
        if self.gateway is None or not self.route.tokens:
            return
        total = SequenceReport.total(self.reports)
        if total.sessions_split or total.merged_calls != total.sessions * (turns - 1):
            raise RuntimeError(f"{self.route.name}: conversations did not merge: {total}")


async def conversation(engine: OpenAIEngine, turns: int, tag: int, times: list[float]) -> None:
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": f"Q{tag}: 2+2?"}]
    for turn in range(turns):
        started = time.perf_counter()
        output = await engine.generate(messages, sampling=SAMPLING)
        times.append(time.perf_counter() - started)
        messages = [*messages, {"role": "assistant", "content": output.text}]
        messages.append({"role": "user", "content": f"And after {turn + 1} more?"})


async def run_programs(targets: list[Target], turns: int, tokenizer: Any) -> list[float]:
    """Every target's conversation at once; the wall time of each call."""
    times: list[float] = []

    async def program(tag: int, target: Target) -> None:
        engine = program_engine(target, tokenizer)
        try:
            await conversation(engine, turns, tag, times)
        finally:
            await engine.aclose()

    await asyncio.gather(*(program(tag, target) for tag, target in enumerate(targets)))
    return times


# ---- 1. per call ----------------------------------------------------------------------------


async def per_call(
    routes: list[Route], args: argparse.Namespace, tokenizer: Any
) -> list[CallTimes]:
    times: dict[str, list[float]] = {route.name: [] for route in routes}
    cpu: dict[str, float] = {route.name: 0.0 for route in routes}
    per_round = max(1, args.conversations // args.rounds)
    with canned_server(0.0) as server:
        setups = [Setup(route, server.base_url, tokenizer) for route in routes]
        try:
            for setup in setups:
                await setup.__aenter__()
            for round_number in range(args.rounds + 1):  # round 0 warms up and is not counted
                for setup in setups:
                    for _ in range(per_round if round_number else 1):
                        cpu_started = time.process_time() + setup.serving_cpu_s()
                        target = setup.target()
                        seen = await run_programs([target], args.turns, tokenizer)
                        await setup.finish(target)
                        if round_number:
                            times[setup.route.name] += seen
                            cpu_now = time.process_time() + setup.serving_cpu_s()
                            cpu[setup.route.name] += cpu_now - cpu_started
        finally:
            for setup in setups:
                await setup.__aexit__(None, None, None)
    for setup in setups:
        setup.check_merged(args.turns)
    return [_call_times(name, values, cpu[name]) for name, values in times.items()]


def _call_times(route: str, values: list[float], cpu_s: float) -> CallTimes:
    ordered = sorted(values)
    return CallTimes(
        route=route,
        calls=len(ordered),
        p50_ms=round(1000 * statistics.median(ordered), 3),
        p90_ms=round(1000 * ordered[int(0.9 * (len(ordered) - 1))], 3),
        cpu_ms_per_call=round(1000 * cpu_s / len(ordered), 3),
    )


# ---- 2. sessions at once --------------------------------------------------------------------


async def sessions_at_once(
    routes: list[Route], args: argparse.Namespace, tokenizer: Any
) -> list[SessionsRun]:
    walls: dict[str, list[float]] = {route.name: [] for route in routes}
    cpus: dict[str, list[float]] = {route.name: [] for route in routes}
    for _ in range(args.session_rounds):
        for route in routes:
            with canned_server(args.latency) as server:
                async with Setup(route, server.base_url, tokenizer) as setup:
                    targets = [setup.target() for _ in range(args.sessions)]
                    cpu_started = time.process_time() + setup.serving_cpu_s()
                    if args.programs_in_process:
                        started = time.perf_counter()
                        await run_programs(targets, args.session_turns, tokenizer)
                        wall = time.perf_counter() - started
                    else:
                        wall = await _programs_in_child(targets, args)
                    cpu_now = time.process_time() + setup.serving_cpu_s()
                    cpus[route.name].append(cpu_now - cpu_started)
                    walls[route.name].append(wall)
                    for target in targets:
                        await setup.finish(target)
                setup.check_merged(args.session_turns)
    ideal = args.session_turns * args.latency
    calls = args.sessions * args.session_turns
    return [
        SessionsRun(
            route=name,
            sessions=args.sessions,
            turns=args.session_turns,
            latency_s=args.latency,
            rounds_s=[round(value, 3) for value in values],
            median_s=round(statistics.median(values), 3),
            percent_of_ideal=round(100 * ideal / statistics.median(values), 1),
            cpu_ms_per_call=round(1000 * statistics.median(cpus[name]) / calls, 3),
        )
        for name, values in walls.items()
    ]


async def _programs_in_child(targets: list[Target], args: argparse.Namespace) -> float:
    """Run the programs in a child interpreter (this loop keeps serving); their wall time."""
    order = {
        "targets": [asdict(target) for target in targets],
        "turns": args.session_turns,
        # Only programs that render their own prompts need the tokenizer (slow to import).
        "tokenizer": args.tokenizer if any(target.renders for target in targets) else None,
    }
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        str(Path(__file__).resolve()),
        "--child-programs",
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        out, _ = await asyncio.wait_for(child.communicate(json.dumps(order).encode()), 600)
    finally:
        if child.returncode is None:
            child.kill()
            await child.wait()
    if child.returncode != 0:
        raise RuntimeError(f"the programs' process failed with code {child.returncode}")
    return json.loads(out.decode().strip().splitlines()[-1])["wall_s"]


def child_programs() -> None:
    """The child's side: read the order on stdin, run the programs, print their wall time."""
    order = json.loads(sys.stdin.read())
    tokenizer = None
    if order["tokenizer"] is not None:
        from rllm_agents.models import load_tokenizer

        tokenizer = load_tokenizer(order["tokenizer"])
    targets = [Target(**target) for target in order["targets"]]
    started = time.perf_counter()  # imports and the tokenizer are not the programs' time
    event_loop.run(run_programs(targets, order["turns"], tokenizer))
    print(json.dumps({"wall_s": time.perf_counter() - started}), flush=True)


# ---- report ---------------------------------------------------------------------------------


def process_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) process `pid` has used (Linux's /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def routes_for(skip_tokens: bool, processes: int) -> list[Route]:
    kinds = [("messages", False)] + ([] if skip_tokens else [("tokens", True)])
    routes = []
    for kind, tokens in kinds:
        routes += [Route(f"{kind} direct", False, tokens), Route(f"{kind} gateway", True, tokens)]
        if processes:
            routes.append(Route(f"{kind} gateway x{processes}", True, tokens, processes))
    return routes


def print_per_call(results: list[CallTimes]) -> None:
    print("Per call (server latency 0, one call at a time, the program in the gateway's loop):")
    by_route = {result.route: result for result in results}
    for result in results:
        print(
            f"  {result.route:<17} p50 {result.p50_ms:7.3f} ms  p90 {result.p90_ms:7.3f} ms  "
            f"CPU {result.cpu_ms_per_call:6.3f} ms/call  ({result.calls} calls)"
        )
    for kind in ("messages", "tokens"):
        direct = by_route.get(f"{kind} direct")
        gateways = [r for r in results if r.route.startswith(f"{kind} gateway")]
        for gateway in gateways if direct else []:
            overhead = gateway.p50_ms - direct.p50_ms
            cpu = gateway.cpu_ms_per_call - direct.cpu_ms_per_call
            verdict = "met" if overhead <= OVERHEAD_GOAL_MS else "NOT met"
            print(
                f"  overhead of {gateway.route}: {overhead:+.3f} ms p50, {cpu:+.3f} ms CPU per "
                f"call (goal <= {OVERHEAD_GOAL_MS:g} ms p50: {verdict})"
            )


def print_sessions(results: list[SessionsRun], in_process: bool) -> None:
    first = results[0]
    where = "in the gateway's process" if in_process else "in a child process"
    print(
        f"{first.sessions} sessions at once ({where}), {first.turns} calls each, server latency "
        f"{first.latency_s:g} s (ideal {first.turns * first.latency_s:g} s):"
    )
    for result in results:
        goal = ""
        if " gateway" in result.route:
            met = result.percent_of_ideal >= SESSIONS_GOAL_PERCENT
            goal = f"  (goal >= {SESSIONS_GOAL_PERCENT:g} %: {'met' if met else 'NOT met'})"
        print(
            f"  {result.route:<17} {result.percent_of_ideal:5.1f} % of ideal  "
            f"median {result.median_s:.3f} s  gateway CPU {result.cpu_ms_per_call:.3f} ms/call  "
            f"rounds {result.rounds_s}{goal}"
        )


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=40, help="per route, all rounds")
    parser.add_argument("--turns", type=int, default=8, help="calls per conversation")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--sessions", type=int, default=256)
    parser.add_argument("--latency", type=float, default=0.5, help="server latency (s)")
    parser.add_argument("--session-turns", type=int, default=8)
    parser.add_argument("--session-rounds", type=int, default=3)
    parser.add_argument("--programs-in-process", action="store_true")
    parser.add_argument(
        "--gateway-processes", type=int, default=2, help="serving processes (0: leave out)"
    )
    parser.add_argument("--tokenizer", default="smollm2", help="an embedded model's name")
    parser.add_argument("--skip-tokens", action="store_true", help="the messages route only")
    parser.add_argument("--skip-sessions", action="store_true")
    parser.add_argument("--json", action="store_true", help="print one JSON object at the end")
    parser.add_argument("--child-programs", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child_programs:
        child_programs()
        return {}

    tokenizer = None
    if not args.skip_tokens:
        from rllm_agents.models import load_tokenizer

        tokenizer = load_tokenizer(args.tokenizer)
    routes = routes_for(args.skip_tokens, args.gateway_processes)
    calls = event_loop.run(per_call(routes, args, tokenizer))
    print_per_call(calls)
    result: dict[str, Any] = {"per_call": [asdict(c) for c in calls]}
    if not args.skip_sessions:
        sessions = event_loop.run(sessions_at_once(routes, args, tokenizer))
        print_sessions(sessions, args.programs_in_process)
        result["sessions"] = [asdict(s) for s in sessions]
    if args.json:
        print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
