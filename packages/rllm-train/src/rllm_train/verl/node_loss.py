"""What a verl run says when a node of its Ray cluster dies under it.

verl's trainer has no way to go on without a node: its training workers form one process group,
and its rollout servers hold their replica's weights. The actors on the lost node die, the
next call to one of them fails, and the run stops within seconds (seen on a 2-node cluster: a
killed worker node ended the run about 10 s later; verl's controller, kept beside the driver,
is never among the lost). Ray reports that as a long traceback ending in ``ActorDiedError``;
:func:`node_lost` turns it into one line that says which actor went, which checkpoint the run
has, and how to go on: ``--resume`` once the cluster is whole, or on the nodes left with
fewer training processes (a checkpoint resumes with any number of them, see
:mod:`rllm_train.verl.reshard`).
"""

from __future__ import annotations

from pathlib import Path

from rllm_train.run.failures import RunStopped

NODE_DEATH_WORDS = "its node has died"  # in Ray's message for an actor lost with its node
LATEST_CHECKPOINT = "latest_checkpointed_iteration.txt"  # verl's pointer to its last save


class NodeLost(RunStopped):
    """A Ray node died under the run; the message says how to go on."""


def lost_actor(error: BaseException) -> str | None:
    """The actor (class, and name when it has one) whose node died, if that is what `error`
    is (Ray raises it as is, or wrapped in the remote task that called the actor)."""
    from ray.exceptions import ActorDiedError

    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, ActorDiedError) and NODE_DEATH_WORDS in str(current):
            return _actor_words(str(current))
        current = getattr(current, "cause", None) or current.__cause__
    return None


def _actor_words(message: str) -> str:
    fields = {}
    for line in message.splitlines():
        key, _, value = line.strip().partition(": ")
        if key in ("class_name", "name", "Node Id") and value:
            fields[key] = value
    actor = fields.get("class_name", "an actor")
    if "name" in fields:
        actor += f" {fields['name']}"
    node = fields.get("Node Id", "")
    return f"{actor} on node {node[:12]}" if node else actor


def last_checkpoint(checkpoint_dir: Path) -> int | None:
    try:
        return int((checkpoint_dir / LATEST_CHECKPOINT).read_text().strip())
    except (OSError, ValueError):
        return None


def node_lost(error: BaseException, checkpoint_dir: Path) -> NodeLost | None:
    """The one-line stop for `error` when it is a lost node (None for anything else)."""
    actor = lost_actor(error)
    if actor is None:
        return None
    step = last_checkpoint(checkpoint_dir)
    saved = (
        f"its last checkpoint is step {step}: continue with --resume once the cluster is "
        "whole again, or on the nodes left with verl.nnodes and verl.n_gpus_per_node set to "
        "what remains (a checkpoint resumes with any number of training processes)"
        if step is not None
        else "it saved no checkpoint yet (trainer.save_every), so a rerun starts over"
    )
    return NodeLost(f"a node of the Ray cluster died during the run ({actor} was lost); {saved}")
