"""The child side of :class:`~rllm_agents.engines.process.engine.ProcessEngine`.

Run as ``python -m rllm_agents.engines.process.child``: it reads the owner's listener address
and auth key on stdin, connects, receives its :class:`ChildOptions`, then answers calls with a
LocalEngine until the owner closes it or goes away.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import sys
from typing import Any

from rllm_agents.engines.base import EngineError
from rllm_agents.engines.packed_weights import unpack


def main() -> None:
    import multiprocessing
    from multiprocessing.connection import Client

    handshake = json.loads(sys.stdin.read())
    authkey = bytes.fromhex(handshake["authkey"])
    # Shared tensors arrive as file descriptors fetched from the owner's resource sharer,
    # which admits only processes holding its auth key.
    multiprocessing.current_process().authkey = authkey
    import torch
    import torch.multiprocessing  # noqa: F401 - tensors arrive through its reducers

    connection = Client(handshake["address"], family="AF_UNIX", authkey=authkey)
    try:
        options = connection.recv()
        if options.cpu_threads:
            torch.set_num_threads(options.cpu_threads)  # the whole process: that is the point
        asyncio.run(ChildServer(connection, options).serve())
    finally:
        connection.close()


class ChildServer:
    """Answers the owner's calls with a LocalEngine, each call a task on one event loop."""

    def __init__(self, connection: Any, options: Any) -> None:
        self.connection = connection
        self.options = options
        self.engine: Any = None
        self.tasks: dict[int, asyncio.Task] = {}

    async def serve(self) -> None:
        loop = asyncio.get_running_loop()
        receive = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="rllm-receive")
        try:
            while True:
                try:
                    kind, call_id, payload = await loop.run_in_executor(
                        receive, self.connection.recv
                    )
                except (EOFError, OSError):
                    break  # the owner is gone
                if kind == "close":
                    break
                if kind == "cancel":
                    task = self.tasks.get(call_id)
                    if task is not None:
                        task.cancel()
                    continue
                task = loop.create_task(self.answer(kind, call_id, payload))
                self.tasks[call_id] = task
                task.add_done_callback(lambda _, key=call_id: self.tasks.pop(key, None))
        finally:
            for task in list(self.tasks.values()):
                task.cancel()
            if self.engine is not None:
                self.engine.close()
            receive.shutdown(wait=False, cancel_futures=True)

    async def answer(self, kind: str, call_id: int, payload: tuple) -> None:
        try:
            answer, failed = await self.handle(kind, payload), False
        except asyncio.CancelledError:
            return  # nobody waits for it
        except Exception as exc:  # noqa: BLE001 - goes back to the caller
            answer, failed = exc, True
        busy = self.engine.stats.busy_seconds if self.engine is not None else 0.0
        try:
            self.connection.send((call_id, failed, answer, busy))
        except Exception as exc:  # noqa: BLE001 - e.g. an exception that does not pickle
            error = EngineError(f"{type(exc).__name__}: {exc}")
            self.connection.send((call_id, True, error, busy))

    async def handle(self, kind: str, payload: tuple) -> Any:
        if kind == "start":
            blueprint, tokenizer, version = payload
            self.engine = self.local_engine(build_model(blueprint), tokenizer)
            self.engine.policy_version = version
            return None
        if kind == "generate":
            (call,) = payload
            return await self.engine.generate(**call)
        if kind == "together":
            (calls,) = payload
            return await self.engine.generate_together(calls)
        if kind == "score":
            token_ids, start = payload
            return await self.engine.prompt_logprobs(token_ids, start)
        if kind == "weights":
            packed, version = payload
            state_dict = unpack(packed)
            # The swap blocks until the running sequences finish: off the loop, which must go
            # on answering them meanwhile.
            await asyncio.to_thread(self.engine.update_weights, state_dict, version=version)
            return self.engine.policy_version
        raise EngineError(f"unknown call {kind!r}")

    def local_engine(self, model: Any, tokenizer: Any) -> Any:
        from rllm_agents.engines.local import LocalEngine

        options = self.options
        return LocalEngine(
            model,
            tokenizer,
            device=options.device,
            max_batch_size=options.max_batch_size,
            seed=options.seed,
            autocast_dtype=options.autocast_dtype,
        )


def build_model(blueprint: Any) -> Any:
    """The owner's model, rebuilt from its config and loaded with its weights."""
    from transformers import AutoModelForCausalLM

    from rllm_agents.engines.local import tied_keys

    model = AutoModelForCausalLM.from_config(blueprint.config, dtype=blueprint.dtype)
    missing, unexpected = model.load_state_dict(unpack(blueprint.weights), strict=False)
    if [key for key in missing if key not in tied_keys(model)] or unexpected:
        raise EngineError(
            f"the model rebuilt in the engine process does not take the weights sent "
            f"(missing {missing[:5]}, unexpected {unexpected[:5]})"
        )
    model.generation_config = blueprint.generation_config
    return model.eval()


if __name__ == "__main__":
    main()
