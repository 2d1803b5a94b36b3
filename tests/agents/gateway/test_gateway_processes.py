"""GatewayProcesses: sessions served by several processes, recorded and handed back whole."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from rllm_agents.engines.openai import OpenAIEngine
from rllm_agents.gateway import GatewayProcesses, build_sequences
from rllm_agents.testing.fault_server import FaultServer

from tests.parts import require_module

openai = require_module("openai", "the openai package (a dev dependency)")


def _echo_last_user(body: dict) -> str:
    """The server's answer names the question it was asked, so crossed sessions show."""
    if "messages" in body:
        return "re: " + body["messages"][-1]["content"]
    return "re: tokens"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as stat:  # a zombie has exited too
        return stat.read().rsplit(")", 1)[1].split()[0] != "Z"


async def _conversation(session, tag: str, turns: int = 2) -> list[str]:
    messages = [{"role": "user", "content": f"{tag} turn 0"}]
    answers = []
    async with openai.AsyncOpenAI(
        base_url=session.base_url, api_key=session.api_key, max_retries=0
    ) as client:
        for turn in range(turns):
            reply = await client.chat.completions.create(model="m", messages=messages)
            answers.append(reply.choices[0].message.content)
            messages += [
                {"role": "assistant", "content": answers[-1]},
                {"role": "user", "content": f"{tag} turn {turn + 1}"},
            ]
    return answers


async def test_sessions_spread_over_processes_and_come_back_whole():
    with FaultServer(latency_s=0.01, completion=_echo_last_user) as server:
        async with GatewayProcesses(OpenAIEngine(server.base_url, "m"), processes=2) as gateway:
            sessions = [gateway.open_session() for _ in range(24)]
            # Both processes serve sessions: the base URLs carry both ports.
            ports = {int(session.base_url.split(":")[2].split("/")[0]) for session in sessions}
            assert ports == set(gateway.ports) and len(ports) == 2
            answers = await asyncio.gather(
                *(_conversation(session, f"s{i}") for i, session in enumerate(sessions))
            )
            for i, (session, got) in enumerate(zip(sessions, answers, strict=True)):
                assert got == [f"re: s{i} turn 0", f"re: s{i} turn 1"]
                calls = await gateway.aclose_session(session.id)
                # Each session's recording holds its own calls only, in order.
                assert [call.index for call in calls] == [0, 1]
                assert [call.text for call in calls] == got
                assert calls[1].messages[-1]["content"] == f"s{i} turn 1"
                assert session.closed and session.failed_calls == 0
            assert gateway.open_sessions == []
            with pytest.raises(openai.NotFoundError, match="no open session"):
                await _conversation(sessions[0], "late")


async def test_failed_calls_are_counted_and_unknown_sessions_refused():
    with FaultServer(completion=_echo_last_user) as server:
        async with GatewayProcesses(OpenAIEngine(server.base_url, "m"), processes=1) as gateway:
            session = gateway.open_session(sampling_defaults={"max_tokens": 8})
            async with openai.AsyncOpenAI(
                base_url=session.base_url, api_key=session.api_key, max_retries=0
            ) as client:
                with pytest.raises(openai.BadRequestError, match="between 0 and 2"):
                    await client.chat.completions.create(
                        model="m", messages=[{"role": "user", "content": "x"}], temperature=5
                    )
            await _conversation(session, "ok", turns=1)
            calls = await gateway.aclose_session(session.id)
            assert len(calls) == 1 and session.failed_calls == 1
            assert calls[0].sampling["max_tokens"] == 8  # the session's defaults reached it
            with pytest.raises(KeyError, match="no open session"):
                await gateway.aclose_session(session.id)
            with pytest.raises(ValueError, match="letters, digits"):
                gateway.open_session("no/slashes")


async def test_token_prompts_keep_the_models_tokens_in_each_process(smollm2_tokenizer):
    """With a tokenizer the processes render prompts and merge turns, as one gateway does."""
    with FaultServer(completion=_echo_last_user) as server:
        engine = OpenAIEngine(
            server.base_url, "m", use_completions=True, tokenizer=smollm2_tokenizer
        )
        async with GatewayProcesses(engine, processes=1) as gateway:
            sessions = [gateway.open_session() for _ in range(4)]
            await asyncio.gather(*(_conversation(s, f"t{i}", 3) for i, s in enumerate(sessions)))
            for session in sessions:
                calls = await gateway.aclose_session(session.id)
                sequences, report = build_sequences(calls, tokenizer=smollm2_tokenizer)
                assert len(sequences) == 1 and report.merged_calls == 2
                assert calls[2].prompt_ids[: len(calls[1].prompt_ids)] == calls[1].prompt_ids


async def test_an_engine_holding_its_model_here_is_refused(tiny_engine):
    with pytest.raises(ValueError, match="cannot be served from other processes"):
        GatewayProcesses(tiny_engine, processes=2)


async def test_a_dead_process_fails_its_sessions_only_and_stop_cleans_up():
    with FaultServer(completion=_echo_last_user) as server:
        gateway = GatewayProcesses(OpenAIEngine(server.base_url, "m"), processes=2)
        await gateway.start()
        pids = gateway.pids
        try:
            first, second = gateway.open_session(), gateway.open_session()
            os.kill(pids[0], signal.SIGKILL)
            with pytest.raises(RuntimeError, match="exited .*calls are lost"):
                await asyncio.wait_for(gateway.aclose_session(first.id), 30)
            await _conversation(second, "still served", turns=1)
            assert len(await gateway.aclose_session(second.id)) == 1
            assert (
                gateway.open_session().base_url.split(":")[2].startswith(str(gateway.ports[1]))
            ), "new sessions go to the process still alive"
        finally:
            await gateway.stop()
        assert not any(_alive(pid) for pid in pids)


def test_serving_processes_die_with_a_killed_parent(tmp_path):
    script = textwrap.dedent(
        """
        import asyncio, sys
        from rllm_agents.engines.openai import OpenAIEngine
        from rllm_agents.gateway import GatewayProcesses

        async def main():
            gateway = GatewayProcesses(OpenAIEngine("http://127.0.0.1:9/v1", "m"), processes=2)
            await gateway.start()
            print(*gateway.pids, flush=True)
            await asyncio.sleep(600)

        asyncio.run(main())
        """
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=tmp_path
    )
    try:
        pids = [int(pid) for pid in parent.stdout.readline().split()]
        assert len(pids) == 2 and all(_alive(pid) for pid in pids)
    finally:
        parent.kill()
        parent.wait()
    deadline = time.monotonic() + 10
    while any(_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(pid) for pid in pids)


async def test_both_gateways_check_session_ids_and_urls_alike():
    """One gateway process or several: the same rules for a session's id and URL."""
    from rllm_agents.gateway import Gateway
    from rllm_agents.gateway.sessions import http_root

    assert http_root("::1", 8000) == "http://[::1]:8000"  # an IPv6 host in brackets
    with FaultServer() as server:
        engine = OpenAIEngine(server.base_url, "m")
        async with Gateway(engine) as one, GatewayProcesses(engine, processes=1) as several:
            for gateway in (one, several):
                session = gateway.open_session("twice", {"temperature": 0.5})
                assert session.base_url.endswith("/sessions/twice/v1")
                assert session.base_url.startswith("http://127.0.0.1:")
                assert session.sampling_defaults.temperature == 0.5
                with pytest.raises(ValueError, match="already open"):
                    gateway.open_session("twice")
                with pytest.raises(ValueError, match="letters, digits"):
                    gateway.open_session("a/b")
                assert gateway.open_sessions == ["twice"]
                await gateway.aclose_session("twice")
                assert gateway.open_sessions == []
        await engine.aclose()
