"""The math agent of ``math_agent.py`` as a command: the way a CLI agent is run.

Reads the task as one JSON object on stdin; the ``openai`` client finds its endpoint in
``OPENAI_BASE_URL`` and ``OPENAI_API_KEY`` as it always does; prints the result as the last
line of stdout::

    echo '{"question": "What is 6 * 7?"}' | OPENAI_BASE_URL=... OPENAI_API_KEY=... \\
        python examples/gateway/math_agent_cli.py
    rllm-eval --env rllm/Math-v0 --agent-cmd "python examples/gateway/math_agent_cli.py"
"""

from __future__ import annotations

import asyncio
import json
import os
import sys

from math_agent import final_answer, solve  # the script's own folder is on sys.path
from openai import AsyncOpenAI


async def main() -> None:
    task = json.loads(sys.stdin.read())
    client = AsyncOpenAI()  # OPENAI_BASE_URL, OPENAI_API_KEY
    try:
        reply = await solve(client, os.environ.get("OPENAI_MODEL", "default"), task["question"])
    finally:
        await client.close()
    print(f"model's reply: {reply!r}", file=sys.stderr)
    print(json.dumps({"answer": final_answer(reply)}))


if __name__ == "__main__":
    asyncio.run(main())
