"""vLLM in-process (``AsyncLLMEngine``) for GPU machines, token-in/token-out.

vllm is imported only when the engine is built; without it the constructor raises an
``ImportError`` that names ``pip install 'rllm-agents[vllm]'``. Messages are rendered with the
model's own chat template (transformers tokenizer) into token ids; the returned logprobs are
vLLM's, one per sampled token (of the raw model distribution unless vLLM is configured with
processed logprobs).
"""

from __future__ import annotations

import itertools
from typing import Any

from rllm_agents.engines.base import EngineError, ModelOutput, SamplingParams
from rllm_agents.engines.prompting import prompt_ids_for

INSTALL_HINT = "pip install 'rllm-agents[vllm]' (needs a CUDA GPU)"


def import_vllm() -> Any:
    try:
        import vllm
    except ImportError as exc:
        raise ImportError(f"the vLLM engine needs vllm: {INSTALL_HINT}") from exc
    return vllm


class VLLMEngine:
    """RolloutEngine over an in-process vLLM AsyncLLMEngine."""

    def __init__(
        self,
        model: str,
        *,
        tokenizer: Any = None,
        gpu_memory_utilization: float = 0.85,
        max_model_len: int | None = None,
        dtype: str = "auto",
        **engine_kwargs: Any,
    ) -> None:
        vllm = import_vllm()
        from rllm_agents.models import load_tokenizer, resolve_model

        model_dir = str(resolve_model(model))
        self.tokenizer = tokenizer if tokenizer is not None else load_tokenizer(model_dir)
        args = vllm.AsyncEngineArgs(
            model=model_dir,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            dtype=dtype,
            **engine_kwargs,
        )
        self._vllm = vllm
        self._engine = vllm.AsyncLLMEngine.from_engine_args(args)
        self._request_ids = itertools.count()
        self.policy_version = 0

    async def generate(
        self,
        messages: list[dict[str, Any]] | None = None,
        *,
        prompt_ids: list[int] | None = None,
        sampling: SamplingParams | None = None,
        tools: list[dict[str, Any]] | None = None,
    ) -> ModelOutput:
        sampling = sampling or SamplingParams()
        prompt_ids = prompt_ids_for(self.tokenizer, messages, prompt_ids, tools)
        params = self._vllm.SamplingParams(
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            max_tokens=sampling.max_tokens,
            stop=list(sampling.stop) or None,
            seed=sampling.seed,
            logprobs=0 if sampling.logprobs else None,  # 0 = only the sampled token's logprob
        )
        prompt = {"prompt_token_ids": list(prompt_ids)}
        final = None
        version = self.policy_version
        try:
            request_id = f"rllm-{next(self._request_ids)}"
            async for partial in self._engine.generate(prompt, params, request_id):
                final = partial  # outputs are cumulative; the last one is complete
        except Exception as exc:  # noqa: BLE001 - surfaced as the engine's error type
            raise EngineError(f"vLLM generation failed: {type(exc).__name__}: {exc}") from exc
        if final is None or not final.outputs:
            raise EngineError("vLLM returned no output")
        completion = final.outputs[0]
        token_ids = list(completion.token_ids)
        logprobs = [
            float(step[token].logprob)
            for step, token in zip(completion.logprobs or [], token_ids, strict=False)
        ]
        return ModelOutput(
            text=completion.text,
            finish_reason=completion.finish_reason or "stop",
            prompt_ids=list(prompt_ids),
            completion_ids=token_ids,
            logprobs=logprobs,
            policy_version=version,
        )

    async def update_weights(self, state_dict: Any, *, version: int) -> None:
        """Load a merged HF state dict as policy `version` (see engines/vllm_sync.py).

        Call it between rollout phases: requests running during the load may mix weights.
        """
        from rllm_agents.engines.vllm_sync import load_into_vllm

        await load_into_vllm(self._engine, state_dict)
        self.policy_version = version

    async def aclose(self) -> None:
        shutdown = getattr(self._engine, "shutdown", None)
        if shutdown is not None:
            shutdown()
