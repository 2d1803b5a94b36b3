"""llama.cpp's prompt cache: a conversation's next turn reads only its new tokens, even after
another conversation was answered on the same server in between (the way a training step's
episodes share the servers). The real server's own log says how many tokens it read."""

from __future__ import annotations

import asyncio
import re

import pytest
from rllm_agents.engines.base import SamplingParams
from rllm_agents.engines.llamacpp.server import LlamaCppEngine, llamacpp_available

from tests.parts import require_part

pytestmark = [pytest.mark.llamacpp, pytest.mark.slow]

PREFIX_MATCH = re.compile(r"(\d+) prefix-match hit, remaining (\d+) prompt tokens to eval")
GREEDY = SamplingParams(temperature=0.0, max_tokens=6)


def conversation(topic: str) -> list[dict]:
    return [
        {"role": "system", "content": f"You are playing {topic}. " * 15},
        {"role": "user", "content": f"Your first move in {topic}?"},
    ]


async def next_turn_read(engine: LlamaCppEngine) -> tuple[int, int, str]:
    """(tokens reused, tokens read, log) for a conversation's second turn, asked after another
    conversation's first turn went to the same server."""
    first = conversation("a lake game")
    answer = await engine.generate(first, sampling=GREEDY)
    first += [{"role": "assistant", "content": answer.text}, {"role": "user", "content": "Next?"}]
    await engine.generate(conversation("a card game with other rules"), sampling=GREEDY)
    server = engine.servers[0]
    before = len(server.log_tail(10**8))
    await engine.generate(first, sampling=GREEDY)
    log = server.log_tail(10**8)[before:]
    reused, read = (int(n) for n in PREFIX_MATCH.findall(log)[-1])
    return reused, read, log


def test_a_turn_after_another_conversation_reads_only_its_new_tokens():
    require_part(llamacpp_available(), "llama-cpp-python[server] is not installed")
    engine = LlamaCppEngine.start(slots=1, n_ctx=1024)
    try:
        reused, read, log = asyncio.run(next_turn_read(engine))
    finally:
        asyncio.run(engine.aclose())
    assert "cache hit" in log
    # The whole first turn (system prompt, question, answer) comes from the cache; only the
    # new user message and the template's turn markers are read.
    assert reused > 100 and read < 25, (reused, read)
