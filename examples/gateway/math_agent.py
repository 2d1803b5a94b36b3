"""A math agent written with the official ``openai`` package: a calculator tool, a loop over
tool calls, a final answer in ``\\boxed{}``. Nothing in it knows about rllm.

rllm runs it as an agent program (docs/agents/gateway.md)::

    rllm-eval --env rllm/Math-v0 --agent-program examples/gateway/math_agent.py:run
    rllm-train --env rllm/Math-v0 --agent-program examples/gateway/math_agent.py:run

``run`` gets the task row and an OpenAI-compatible endpoint, and returns the final answer;
``rllm/Math-v0`` grades it with its own grader. ``math_agent_cli.py`` is the same agent as a
command (task on stdin, endpoint in the environment).
"""

from __future__ import annotations

import ast
import json
import operator
import os
import re
from typing import Any

from openai import AsyncOpenAI

SYSTEM_PROMPT = (
    "You solve math problems. For arithmetic, call the calculator tool. "
    "Finish with the final answer in \\boxed{}, for example \\boxed{42}."
)
CALCULATOR = {
    "type": "function",
    "function": {
        "name": "calculator",
        "description": "Evaluate an arithmetic expression, e.g. '12 * (3 + 4) / 2'.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string", "description": "the expression"}},
            "required": ["expression"],
        },
    },
}
MAX_TURNS = 4  # model calls per problem: tool rounds, then the answer

_OPERATORS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
}
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def calculate(expression: str) -> str:
    """The value of an arithmetic expression, or what is wrong with it (told to the model)."""

    def value(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            left, right = value(node.left), value(node.right)
            if isinstance(node.op, ast.Pow) and abs(right) > 100:
                raise ValueError("exponent too large")
            return _OPERATORS[type(node.op)](left, right)
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](value(node.operand))
        raise ValueError(f"unsupported: {ast.dump(node)[:60]}")

    try:
        result = value(ast.parse(expression.replace("^", "**"), mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError, OverflowError) as error:
        return f"error: {error}"
    return str(int(result)) if float(result).is_integer() else f"{result:.6g}"


def call_tool(name: str, arguments: str) -> str:
    if name != "calculator":
        return f"error: no tool named {name!r}"
    try:
        expression = json.loads(arguments or "{}").get("expression", "")
    except (json.JSONDecodeError, AttributeError):
        return "error: arguments must be a JSON object with an expression"
    return calculate(str(expression))


def final_answer(reply: str) -> str:
    """The reply when it boxes an answer; else its last number, boxed (a small model often
    states the answer without the box)."""
    if "\\boxed" in reply:
        return reply
    numbers = _NUMBER.findall(reply)
    return f"\\boxed{{{numbers[-1].replace(',', '')}}}" if numbers else reply


async def solve(client: AsyncOpenAI, model: str, question: str) -> str:
    """Talk to the model until it answers without calling a tool; its last reply."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": question},
    ]
    reply = ""
    for _ in range(MAX_TURNS):
        # No temperature or max_tokens: whoever serves the model decides (rllm's trainer
        # samples at its own temperature and bounds each reply).
        response = await client.chat.completions.create(
            model=model, messages=messages, tools=[CALCULATOR]
        )
        message = response.choices[0].message
        reply = message.content or ""
        if not message.tool_calls:
            break
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            result = call_tool(call.function.name, call.function.arguments)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    return reply


async def run(task: dict, base_url: str, api_key: str, model: str | None = None) -> dict:
    """One problem: the task row's question in, the final answer out."""
    client = AsyncOpenAI(base_url=base_url, api_key=api_key)
    try:
        reply = await solve(
            client, model or os.environ.get("OPENAI_MODEL", "default"), task["question"]
        )
    finally:
        await client.close()
    return {"answer": final_answer(reply)}
