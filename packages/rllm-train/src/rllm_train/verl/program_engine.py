"""`ServerManagerEngine`: verl's rollout servers as an rllm rollout engine, for the gateway.

An agent program's calls reach the model through the gateway (:mod:`rllm_agents.gateway`),
which renders each chat request with the tokenizer's chat template itself (the rendering
LocalEngine uses, reusing the model's own tokens of the session's earlier calls) and hands the
engine token ids. In a verl agent-loop worker that engine is this adapter: the ids go to
verl's ``server_manager.generate`` unchanged (vLLM, SGLang, or rllm's LocalEngine in CPU mode,
holding the weights verl synced after the last update), and the generated ids and log-probs
come back as a :class:`~rllm_agents.engines.base.ModelOutput`. So every id the gateway records
is one the model saw or produced - what verl trains on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import uuid4

from rllm_agents.engines.base import EngineError, ModelOutput, PromptRejected, SamplingParams


def eos_ids(tokenizer: Any) -> frozenset[int]:
    """The ids that end a completion (left out of its text, as LocalEngine leaves them out)."""
    eos = getattr(tokenizer, "eos_token_id", None)
    if eos is None:
        return frozenset()
    return frozenset(eos) if isinstance(eos, (list, tuple)) else frozenset({int(eos)})


@dataclass
class ServerManagerEngine:
    """A token-in/token-out :class:`~rllm_agents.engines.base.RolloutEngine` over verl's
    server manager (see the module docstring).

    ``top_k`` is the rollout config's: the OpenAI API has no such field, so a program cannot
    set it. ``stop`` sequences are refused: verl's servers return token ids cut by nothing but
    EOS and the length limit, and cutting them here would hand the program a reply the model
    went on past. ``seed`` is not forwarded (verl's servers do not all take one).
    """

    server_manager: Any
    tokenizer: Any  # the worker's; the gateway renders prompts with it
    top_k: int = -1

    async def generate(
        self,
        messages: list[dict[str, Any]] | None = None,
        *,
        prompt_ids: list[int] | None = None,
        sampling: SamplingParams | None = None,
        tools: list[dict[str, Any]] | None = None,
    ) -> ModelOutput:
        if prompt_ids is None:
            # The gateway renders chat messages itself whenever it has a tokenizer, and this
            # engine always gives it one: messages here mean a caller skipped the gateway.
            raise PromptRejected("verl's rollout servers take token ids; render messages first")
        if not prompt_ids:
            raise ValueError("the prompt is empty")
        sampling = sampling or SamplingParams()
        if sampling.stop:
            raise PromptRejected(
                "stop sequences are not supported when training on the verl backend: its "
                "rollout servers end a reply at EOS or max_tokens only"
            )
        params = {
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "top_k": self.top_k,
            "repetition_penalty": 1.0,
            "max_tokens": sampling.max_tokens,
            "logprobs": True,
        }
        output = await self.server_manager.generate(
            request_id=uuid4().hex, prompt_ids=list(prompt_ids), sampling_params=params
        )
        ids = [int(token) for token in output.token_ids]
        logprobs = [float(value) for value in (output.log_probs or [])]
        if len(logprobs) != len(ids):
            raise EngineError(
                f"verl's rollout server returned {len(logprobs)} log-probs for {len(ids)} tokens; "
                "training needs one per token (actor_rollout_ref.rollout.calculate_log_probs)"
            )
        ends = eos_ids(self.tokenizer)
        text = self.tokenizer.decode(
            [token for token in ids if token not in ends],
            skip_special_tokens=False,
            clean_up_tokenization_spaces=False,
        )
        stopped = bool(ids) and ids[-1] in ends
        return ModelOutput(
            text=text,
            finish_reason="stop" if stopped or len(ids) < sampling.max_tokens else "length",
            prompt_ids=list(prompt_ids),
            completion_ids=ids,
            logprobs=logprobs,
        )

    async def aclose(self) -> None:
        """Nothing to release: the server manager and its servers are verl's."""
