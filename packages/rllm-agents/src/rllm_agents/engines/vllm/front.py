"""What both vLLM engines (in-process and the server form) show their callers.

A subclass owns a loop thread (``_thread``, engines/loop_thread.py), a tokenizer and a
``policy`` (vllm_policy.PolicyState), and says how one request is generated on that loop
(``_generate``), how a given sequence is scored (``_prompt_logprobs``, engines/scoring.py) and how it
stops (``close``). Here: rendering chats to token ids, handing the
request to the engine's loop from whatever loop the caller is on, weight and LoRA syncs, and
closing from async code.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from rllm_agents.engines.base import EngineError, ModelOutput, SamplingParams
from rllm_agents.engines.prompting import prompt_ids_for
from rllm_agents.engines.scoring import checked_request


class VLLMFront:
    tokenizer: Any
    policy: Any  # vllm_policy.PolicyState
    _thread: Any  # loop_thread.LoopThread
    closed_message = "the vLLM engine is closed"

    @property
    def policy_version(self) -> int:
        """The weights' version new requests are generated with (see engines/weight_sync.py)."""
        return self.policy.version

    async def generate(
        self,
        messages: list[dict[str, Any]] | None = None,
        *,
        prompt_ids: list[int] | None = None,
        sampling: SamplingParams | None = None,
        tools: list[dict[str, Any]] | None = None,
    ) -> ModelOutput:
        prompt_ids = prompt_ids_for(self.tokenizer, messages, prompt_ids, tools)
        if not self._thread.running:
            raise EngineError(self.closed_message)
        return await self._thread.run(self._generate(prompt_ids, sampling or SamplingParams()))

    async def _generate(self, prompt_ids: list[int], sampling: SamplingParams) -> ModelOutput:
        """On the engine's loop: one request, under a lease on the policy."""
        raise NotImplementedError

    async def prompt_logprobs(self, token_ids: Sequence[int], start: int = 1) -> list[float | None]:
        """The served model's log-prob of each given token from `start` on (engines/scoring.py),
        with the policy in force when the request starts."""
        ids = checked_request(token_ids, start, getattr(self, "context_length", None))
        if not self._thread.running:
            raise EngineError(self.closed_message)
        settings = getattr(self, "settings", None)
        if settings is not None and settings.on_cpu and settings.enable_lora:
            # vLLM 0.30's CPU LoRA kernels project the logits of one row per request, not of
            # every prompt token: the request kills the engine core (an einsum shape error in
            # punica_cpu.add_lora_logits), for every caller of the engine.
            raise EngineError(
                "vLLM's CPU build cannot score prompts with LoRA enabled (its engine core "
                "dies); start the engine without enable_lora to score"
            )
        return await self._thread.run(self._prompt_logprobs(ids, start))

    async def _prompt_logprobs(self, token_ids: list[int], start: int) -> list[float | None]:
        """On the engine's loop: one scoring request, under a lease on the policy."""
        raise NotImplementedError

    async def update_weights(self, state_dict: Any, *, version: int) -> dict[str, float]:
        """Load a full HF state dict as policy `version`; returns the seconds each part took.

        New requests wait while the weights change; requests already running finish on the
        old weights first (``settings.sync_pause``: "wait"), are aborted ("abort") or carry
        on with the new ones ("keep"; their output keeps the version they started with).
        """
        return await self._thread.run(self.policy.load_full(state_dict, version))

    async def load_lora(self, adapter_dir: str, *, version: int) -> None:
        """Serve new requests with the LoRA adapter saved in `adapter_dir` (peft's
        ``save_pretrained``) as policy `version`, leaving the base weights as they are."""
        await self._thread.run(self.policy.load_lora(str(adapter_dir), version))

    def close(self) -> None:
        raise NotImplementedError

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)  # stopping vLLM takes seconds: not on the loop

    def __enter__(self) -> VLLMFront:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
