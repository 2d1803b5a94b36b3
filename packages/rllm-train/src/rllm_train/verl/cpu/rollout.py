"""verl's rollout served by rllm's own :class:`~rllm_agents.engines.local.LocalEngine`.

verl's async rollout has three parts, and this module gives each an rllm implementation,
registered under :data:`ROLLOUT_NAME`:

* :class:`LocalEngineServer` - the server: a Ray actor holding one LocalEngine (batched,
  token-in/token-out, log-probs), answering verl's ``generate`` and its sleep/wake/abort calls;
* :class:`LocalEngineReplica` - verl's ``RolloutReplica``: starts the server next to the
  training workers it serves;
* :class:`LocalEngineWeightSync` - verl's ``BaseRollout`` inside each training worker: verl's
  weight sync hands it the trainer's new weights after every update, and it loads them into
  the server's engine, so the next rollout samples from the updated policy.

It is the CPU mode's rollout and, on a GPU, the fallback where vLLM and SGLang are absent:
the same sampler the native backend uses, not a second one.
"""

from __future__ import annotations

import asyncio
from functools import partial
from typing import Any

import ray
import torch
from verl.workers.rollout.base import _ROLLOUT_REGISTRY, BaseRollout
from verl.workers.rollout.replica import RolloutReplica, RolloutReplicaRegistry, TokenOutput
from verl.workers.rollout.utils import ensure_async_iterator

from rllm_train.verl.engine_server import REPLICA_FIELD

ROLLOUT_NAME = "rllm_local"
SERVER_NAME_PREFIX = "rllm_local_server_"
# How many requests the engine decodes together (its running batch).
MAX_BATCH_SIZE = 64


def server_name(replica_rank: int) -> str:
    return f"{SERVER_NAME_PREFIX}{replica_rank}"


class LocalEngineServer:
    """A LocalEngine behind verl's rollout-server calls (a Ray actor)."""

    def __init__(self, model_path: str, device: str, seed: int, replica_rank: int = 0) -> None:
        from rllm_agents.engines.local import LocalEngine

        from rllm_train.verl.engine_server import EngineServerClient

        self.engine = LocalEngine(
            model_path, device=device, max_batch_size=MAX_BATCH_SIZE, seed=seed
        )
        self.client = EngineServerClient(self.engine)
        self.weights_version = 0  # the trainer step whose weights the engine holds (0: initial)
        self.replica_rank = replica_rank

    async def generate(
        self, prompt_ids: list[int], sampling_params: dict[str, Any], request_id: str, **_: Any
    ) -> TokenOutput:
        output = await self.client.generate(
            request_id, prompt_ids=list(prompt_ids), sampling_params=dict(sampling_params)
        )
        # verl's key for the weights version that served a request (its staleness accounting).
        output.extra_fields["global_steps"] = self.weights_version
        # Which replica answered: a run's metrics count each replica's turns and the weights
        # they were served with, so a replica that got no requests or no weights shows.
        output.extra_fields[REPLICA_FIELD] = self.replica_rank
        return output

    async def update_weights(self, state_dict: dict[str, torch.Tensor], version: int) -> int:
        # LocalEngine.update_weights waits for running sequences to finish: off the event loop.
        await asyncio.to_thread(self.engine.update_weights, state_dict)
        self.weights_version = version
        return version

    def current_weights_version(self) -> int:
        return self.weights_version

    # verl's memory and scheduling calls. The engine keeps no KV cache between requests and
    # its weights stay loaded, so there is nothing to free, restore or abort.
    async def wake_up(self, tags: list[str] | None = None) -> None:
        return None

    async def sleep(self) -> None:
        return None

    async def clear_kv_cache(self) -> None:
        return None

    async def release_kv_cache(self) -> None:
        return None

    async def resume_kv_cache(self) -> None:
        return None

    async def wait_for_requests_to_drain(self) -> None:
        return None

    async def abort_all_requests(self, **_: Any) -> dict[str, Any]:
        return {"aborted_count": 0, "request_ids": []}

    async def resume_generation(self) -> None:
        return None

    async def start_profile(self, **_: Any) -> None:
        return None

    async def stop_profile(self) -> None:
        return None

    def shutdown(self) -> None:
        self.engine.close()


def _local_model_path(model_config) -> str:
    """The model directory, from verl's model config (a dataclass or its DictConfig)."""
    read = model_config.get if hasattr(model_config, "get") else partial(getattr, model_config)
    path = read("local_path", None) or read("path", None)
    if not path:
        raise ValueError("verl's model config names no model path")
    return str(path)


class LocalEngineReplica(RolloutReplica):
    """One LocalEngineServer per replica, on the node of the workers it serves."""

    async def launch_servers(self) -> None:
        from verl.utils.device import get_device_name

        node_id, accelerator_ids = await self.workers[0].__ray_call__.remote(
            lambda worker: (
                ray.get_runtime_context().get_node_id(),
                ray.get_runtime_context().get_accelerator_ids().get("GPU", []),
            )
        )
        device = "cuda" if get_device_name() == "cuda" else "cpu"
        env_vars = {"RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1"}
        if device == "cuda" and accelerator_ids:
            # The server shares the training worker's GPU, as verl's hybrid engines do.
            env_vars["CUDA_VISIBLE_DEVICES"] = ",".join(accelerator_ids)
        server = (
            ray.remote(LocalEngineServer)
            .options(
                name=server_name(self.replica_rank),
                num_cpus=0,
                max_concurrency=self.max_concurrency,
                runtime_env={"env_vars": env_vars},
                scheduling_strategy=ray.util.scheduling_strategies.NodeAffinitySchedulingStrategy(
                    node_id=node_id, soft=False
                ),
            )
            .remote(
                model_path=_local_model_path(self.model_config),
                device=device,
                seed=int(self.config.get("seed", 0) or 0) + self.replica_rank,
                replica_rank=self.replica_rank,
            )
        )
        # Not awaited: the server imports torch and loads the model while verl starts its
        # agent-loop workers (each a process importing verl). Calls made before the model is
        # loaded wait in the actor's queue, and a server that fails to start fails them with
        # its constructor's error.
        self.servers = [server]
        self._server_handle = server
        self._server_address = f"ray-actor://{server_name(self.replica_rank)}"


class LocalEngineWeightSync(BaseRollout):
    """verl's rollout object in a training worker: forwards weight syncs to the server."""

    def __init__(self, config, model_config, device_mesh, *args, **kwargs) -> None:
        super().__init__(config, model_config, device_mesh)
        rank = torch.distributed.get_rank() if torch.distributed.is_initialized() else 0
        rollout_world_size = (
            self.config.tensor_model_parallel_size
            * self.config.data_parallel_size
            * self.config.pipeline_model_parallel_size
        )
        # In a training worker (verl's synchronous trainer) the replica follows from the rank;
        # in a standalone rollout worker (its asynchronous trainers) verl names it.
        self.replica_rank = kwargs.get("replica_rank", rank // rollout_world_size)
        # Only the first rank of a replica sends; every rank takes part in gathering weights.
        self.is_sender = rank % rollout_world_size == 0
        self._server = None

    def _server_handle(self):
        if self._server is None:
            self._server = ray.get_actor(server_name(self.replica_rank))
        return self._server

    async def resume(self, tags: list[str]) -> None:
        return None

    async def release(self) -> None:
        return None

    async def update_weights(self, weights, wire_format: str = "named_tensors", **kwargs) -> None:
        if wire_format != "named_tensors":
            raise ValueError(
                f"the {ROLLOUT_NAME} rollout takes full named tensors, not {wire_format!r}"
            )
        if kwargs.get("peft_config") is not None:
            raise ValueError(
                f"the {ROLLOUT_NAME} rollout loads merged weights: set "
                "actor_rollout_ref.model.lora.merge=true (rllm-train does so for LoRA runs)"
            )
        state_dict = {}
        # Every rank iterates (gathering sharded weights is collective). A training worker hands
        # a generator, a standalone rollout worker its checkpoint engine's async one.
        async for name, tensor in ensure_async_iterator(weights):
            if self.is_sender:
                state_dict[name] = tensor.detach().to("cpu", copy=True).contiguous()
        if self.is_sender:
            version = int(kwargs.get("global_steps") or 0)
            await self._server_handle().update_weights.remote(state_dict, version)


def register() -> None:
    """Make ``rollout.name=rllm_local`` known to verl's rollout and replica registries."""
    _ROLLOUT_REGISTRY[(ROLLOUT_NAME, "async")] = f"{__name__}.LocalEngineWeightSync"
    RolloutReplicaRegistry.register(ROLLOUT_NAME, lambda: LocalEngineReplica)


__all__ = [
    "ROLLOUT_NAME",
    "LocalEngineReplica",
    "LocalEngineServer",
    "LocalEngineWeightSync",
    "register",
    "server_name",
]
