"""`EngineServerClient`: any rllm rollout engine behind verl's server-manager call.

verl's agent loops talk to their model as ``await server_manager.generate(request_id=...,
prompt_ids=..., sampling_params={...}) -> TokenOutput``. This client answers that call with a
:class:`~rllm_agents.engines.base.RolloutEngine` (for example the local transformers engine), so
verl's own ``AgentLoopWorker`` can run our agent loop on a CPU: for debugging an env/agent pair
under verl's exact token layout, and for the backend's tests.
"""

from __future__ import annotations

from typing import Any

from rllm_agents.engines.base import RolloutEngine, SamplingParams

# A reply's extra field naming the rollout replica that served it (rllm's LocalEngine servers
# set it; verl's vLLM and SGLang servers do not).
REPLICA_FIELD = "rllm_replica"


def sampling_from_verl(params: dict[str, Any], *, default_max_tokens: int) -> SamplingParams:
    """verl's sampling dict (temperature, top_p, logprobs, max_tokens, seed) as our
    SamplingParams; a request's seed (verl's rollout adds one per request when it asks for
    deterministic sampling) seeds its draws.

    ``top_k`` and ``repetition_penalty`` have no counterpart in our engines; verl sends the
    neutral values (-1 and 1.0) unless configured otherwise, and other values are refused.
    """
    top_k = params.get("top_k", -1)
    if top_k not in (-1, 0, None):
        raise ValueError(f"top_k={top_k} is not supported by rllm engines (set rollout.top_k=-1)")
    if params.get("repetition_penalty", 1.0) != 1.0:
        raise ValueError("repetition_penalty is not supported by rllm engines")
    return SamplingParams(
        temperature=float(params.get("temperature", 1.0)),
        top_p=float(params.get("top_p", 1.0)),
        max_tokens=int(params.get("max_tokens") or default_max_tokens),
        logprobs=bool(params.get("logprobs", True)),
        seed=int(params["seed"]) if params.get("seed") is not None else None,
    )


# Our engines' finish reasons as verl's TokenOutput.stop_reason: a reply cut at max_tokens says
# "length" (as verl's own partial-rollout client does); one the model ended is "completed".
STOP_REASONS: dict[str, str] = {
    "length": "length",
    "stop": "completed",
    "tool_calls": "completed",
    "abort": "aborted",
    "cancelled": "aborted",
}


def stop_reason(finish_reason: str) -> str:
    return STOP_REASONS.get(finish_reason, finish_reason)


class EngineServerClient:
    """Serves ``generate`` for verl agent loops from an rllm :class:`RolloutEngine`."""

    def __init__(self, engine: RolloutEngine, *, default_max_tokens: int = 512) -> None:
        self.engine = engine
        self.default_max_tokens = default_max_tokens

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], **_: Any
    ):
        from verl.workers.rollout.replica import TokenOutput

        sampling = sampling_from_verl(sampling_params, default_max_tokens=self.default_max_tokens)
        output = await self.engine.generate(prompt_ids=list(prompt_ids), sampling=sampling)
        return TokenOutput(
            token_ids=list(output.completion_ids),
            log_probs=list(output.logprobs) if sampling.logprobs else None,
            stop_reason=stop_reason(output.finish_reason),
        )
