"""Resharding checks in one process group: ``python -m tests.train.reshard_check --world-size N
[--save DIR] [--load DIR=RESULT ...]``.

Each rank joins a gloo process group (``torch.multiprocessing`` spawns them) and, for each
action, shards a fresh tiny model with FSDP2 as verl's actor does, then

* ``--save DIR``: takes one AdamW step on a seeded batch and saves through verl's own
  ``FSDPCheckpointManager`` (one file per rank);
* ``--load DIR=RESULT``: loads such a checkpoint through the same manager, with rllm's
  regathering loader installed, and writes what it now holds (every parameter and Adam moment,
  whole) to RESULT, for the test to compare with the saved shards joined by hand; a load that
  fails writes its error there instead.

One spawn serves several actions: starting the ranks (torch, transformers, verl) is most of
the time. Groups of different sizes run at once: ``--after DIR`` holds a group's loads until
DIR holds a whole save (its :data:`SAVED_MARKER`, written once every rank has saved).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

LR = 1e-3
SAVED_MARKER = "saved.ok"
WAIT_S = 300


def wait_for_saves(folders: list[Path]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not all((folder / SAVED_MARKER).is_file() for folder in folders):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no whole save in {folders} after {WAIT_S} s")
        time.sleep(0.2)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def sharded_model(model_path: str, world_size: int):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_path, torch_dtype=torch.float32)
    mesh = init_device_mesh("cpu", (world_size,), mesh_dim_names=("fsdp",))
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    return model, optimizer, schedule


def manager_for(model, optimizer, schedule, model_path: str):
    from transformers import AutoTokenizer
    from verl.utils.checkpoint.fsdp_checkpoint_manager import FSDPCheckpointManager

    return FSDPCheckpointManager(
        model, optimizer, lr_scheduler=schedule,
        processing_class=AutoTokenizer.from_pretrained(model_path),
        checkpoint_config={"load_contents": ["model", "optimizer", "extra"],
                           "save_contents": ["model", "optimizer", "extra"]},
    )  # fmt: skip


def one_step(model, optimizer, schedule) -> None:
    """An AdamW step on a seeded batch (the same on every rank), so moments are non-zero."""
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, model.config.vocab_size, (2, 12), generator=generator)
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    schedule.step()
    optimizer.zero_grad()


def whole(tensor) -> torch.Tensor:
    return tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor


def held_state(model, optimizer) -> dict:
    """Every parameter and Adam moment, whole (a collective: every rank calls it)."""
    names = {id(param): name for name, param in model.named_parameters()}
    moments = {
        f"{names[id(param)]}/{key}": whole(value)
        for param, state in optimizer.state.items()
        for key, value in state.items()
        if key in ("exp_avg", "exp_avg_sq")
    }
    steps = {float(state["step"]) for state in optimizer.state.values()}
    params = {name: whole(param.detach()) for name, param in model.named_parameters()}
    return {"params": params, "moments": moments, "steps": sorted(steps)}


def rank_main(rank: int, world_size: int, port: int, args) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        from rllm_train.verl.reshard import install

        install()
        if args.save:
            model, optimizer, schedule = sharded_model(args.model, world_size)
            one_step(model, optimizer, schedule)
            manager_for(model, optimizer, schedule, args.model).save_checkpoint(
                str(args.save), global_step=1
            )
            dist.barrier()  # every rank's files are written
            if rank == 0:
                (args.save / SAVED_MARKER).touch()
        wait_for_saves(args.after)
        for load in args.load:
            folder, result = load.split("=", 1)
            model, optimizer, schedule = sharded_model(args.model, world_size)
            try:
                manager_for(model, optimizer, schedule, args.model).load_checkpoint(folder)
            except Exception as error:  # noqa: BLE001 - the test reads what went wrong
                state = {"error": f"{type(error).__name__}: {error}"}
            else:
                state = held_state(model, optimizer)
                state["last_epoch"] = schedule.last_epoch
            if rank == 0:
                torch.save(state, result)
    finally:
        dist.destroy_process_group()


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True)
    parser.add_argument("--world-size", type=int, required=True)
    parser.add_argument("--save", type=Path)
    parser.add_argument("--load", action="append", default=[], metavar="DIR=RESULT")
    parser.add_argument("--after", action="append", default=[], type=Path, metavar="DIR")
    args = parser.parse_args(argv)
    mp.spawn(rank_main, args=(args.world_size, free_port(), args), nprocs=args.world_size)


if __name__ == "__main__":
    main(sys.argv[1:])
