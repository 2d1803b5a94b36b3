"""What a verl run says when a node of its Ray cluster dies under it.

verl's trainer has no way to go on without a node: its training workers form one process group,
and its rollout servers hold their replica's weights. The processes on the lost node die, and
the run fails within seconds, in whichever way reaches the controller first: a call to an actor
of the node (``ActorDiedError``), or a collective the surviving training processes were in
(gloo: "Connection closed by peer"). Either way Ray prints a long traceback.

:func:`nodes_died` tells the two apart from any other failure by asking Ray which of the nodes
alive at the start are dead now (waiting a little for Ray to notice, when the error looks like a
lost peer); :func:`node_lost` then says it in one line: which node, which checkpoint the run has,
and how to go on: ``--resume`` once the cluster is whole, or on the nodes left with fewer
training processes (a checkpoint resumes with any number of them, see
:mod:`rllm_train.verl.reshard`). verl's controller is kept beside the driver
(:func:`rllm_train.verl.cpu.runner.beside_the_driver`), so it is never among the lost.
"""

from __future__ import annotations

import time
from pathlib import Path

from rllm_train.run.failures import RunStopped

# Signs that a process of the run was lost rather than failed on its own: Ray's errors for an
# actor that died, and what gloo and NCCL raise in a peer of a process that died.
LOST_PEER_WORDS = ("Connection closed by peer", "Connection reset by peer", "NCCL error")
# How long Ray may take to declare a node dead after a peer noticed (its default health check:
# several missed heartbeats a few seconds apart).
NOTICE_WAIT_S = 45.0
LATEST_CHECKPOINT = "latest_checkpointed_iteration.txt"  # verl's pointer to its last save


class NodeLost(RunStopped):
    """A Ray node died under the run; the message says how to go on."""


class NodesDied(RuntimeError):
    """Nodes that were alive when the run started died during it (their Ray node ids)."""

    def __init__(self, node_ids: list[str]) -> None:
        super().__init__(f"Ray nodes died during the run: {', '.join(node_ids)}")
        self.node_ids = node_ids


def alive_nodes() -> set[str]:
    import ray

    return {node["NodeID"] for node in ray.nodes() if node.get("Alive")}


def looks_like_lost_peer(error: BaseException) -> bool:
    """Whether `error` (or what it wraps) is what a lost process causes in the others."""
    from ray.exceptions import RayActorError

    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, RayActorError):
            return True
        if any(words in str(current) for words in LOST_PEER_WORDS):
            return True
        current = getattr(current, "cause", None) or current.__cause__
    return False


def nodes_died(alive_before: set[str], error: BaseException) -> list[str]:
    """The nodes alive at the start that are dead now. Where `error` looks like a lost peer,
    Ray is given up to NOTICE_WAIT_S to notice; any other failure is checked once."""
    deadline = time.monotonic() + (NOTICE_WAIT_S if looks_like_lost_peer(error) else 0)
    while True:
        dead = sorted(alive_before - alive_nodes())
        if dead or time.monotonic() >= deadline:
            return dead
        time.sleep(0.5)


def last_checkpoint(checkpoint_dir: Path) -> int | None:
    try:
        return int((checkpoint_dir / LATEST_CHECKPOINT).read_text().strip())
    except (OSError, ValueError):
        return None


def node_lost(died: NodesDied, checkpoint_dir: Path) -> NodeLost:
    """The one-line stop for a run that lost nodes."""
    nodes = ", ".join(node_id[:12] for node_id in died.node_ids)
    step = last_checkpoint(checkpoint_dir)
    saved = (
        f"its last checkpoint is step {step}: continue with --resume once the cluster is "
        "whole again, or on the nodes left with verl.nnodes and verl.n_gpus_per_node set to "
        "what remains (a checkpoint resumes with any number of training processes)"
        if step is not None
        else "it saved no checkpoint yet (trainer.save_every), so a rerun starts over"
    )
    plural = "s" if len(died.node_ids) > 1 else ""
    return NodeLost(
        f"a node of the Ray cluster died during the run (node{plural} {nodes}, with the "
        f"run's processes on it); {saved}"
    )
