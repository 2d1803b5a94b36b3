"""The official openai client pointed at a gateway session, as an agent program makes it."""

from __future__ import annotations

from typing import Any

from tests.parts import require_module


def client_for(session: Any, **kwargs: Any) -> Any:
    """An ``openai.AsyncOpenAI`` for `session`, with no retries (a test sees the first answer)."""
    openai = require_module("openai", "the openai package (a dev dependency)")
    return openai.AsyncOpenAI(
        base_url=session.base_url, api_key=session.api_key, max_retries=0, **kwargs
    )
