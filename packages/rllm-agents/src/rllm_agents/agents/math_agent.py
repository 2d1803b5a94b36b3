"""`MathAgent` for ``rllm/Math-v0``: step-by-step reasoning, the answer in ``\\boxed{}``.

With several tries (``max_turns > 1`` on the env), ``keep_thinking=False`` drops the
``<think>`` blocks of earlier replies from the prompt, as reasoning models are trained to see
their history.
"""

from __future__ import annotations

from rllm_agents.agents.text_agent import TextAgent

MATH_SYSTEM_PROMPT = (
    "You are a careful mathematician. Solve the problem step by step, then put the final "
    "answer in \\boxed{}."
)


class MathAgent(TextAgent):
    system_prompt = MATH_SYSTEM_PROMPT
