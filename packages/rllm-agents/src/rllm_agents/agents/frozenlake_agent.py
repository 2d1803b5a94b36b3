"""`FrozenLakeAgent` for ``rllm/FrozenLake-v0``: asks for brief reasoning, then one move in backticks."""

from __future__ import annotations

from rllm_agents.agents.text_agent import TextAgent

FROZENLAKE_SYSTEM_PROMPT = (
    "You are walking on a frozen lake drawn as a grid. P is you, G the goal, H a hole, F safe "
    "ice, S the start. Reach G without stepping into a hole. Think briefly, then end your "
    "reply with exactly one move in backticks: `Left`, `Down`, `Right` or `Up`."
)


class FrozenLakeAgent(TextAgent):
    """A :class:`TextAgent` with the FrozenLake instructions; the env parses the move itself."""

    system_prompt = FROZENLAKE_SYSTEM_PROMPT
