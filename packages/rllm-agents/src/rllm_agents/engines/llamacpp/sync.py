"""Weight sync into llama.cpp servers: the policy exported to GGUF, for the servers to restart on.

llama.cpp cannot take weights over the wire, so a sync is: write the trainer's weights into a
copy of the GGUF the servers run (same metadata, tokenizer and per-tensor quantisation, see
``gguf_export``), then restart each server process on the new file on the same port, so the
engine's HTTP clients keep their addresses (``LlamaCppEngine.update_weights`` does both). For SmolLM2-135M this takes seconds on CPU.

The served policy is then a *quantised* copy of the trainer's (Q4_1/Q8_0 for the embedded
model): its log-probs differ from the trainer's by more than sampling noise, as those of a
bf16/fp8 vLLM differ on a GPU, which is what rollout correction is there for.

A sync restarts the server: requests in flight fail, so sync between rollout phases (the
trainer waits for its rollouts before it pushes weights).
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rllm_agents.engines.llamacpp.gguf_export import GGUFLayout, export_gguf, read_layout


@dataclass(frozen=True)
class SyncTiming:
    export_s: float
    restart_s: float


@dataclass
class GGUFSync:
    """What one engine keeps between syncs: its export folder and the template's layout."""

    folder: tempfile.TemporaryDirectory
    layout: GGUFLayout

    @property
    def workdir(self) -> Path:
        return Path(self.folder.name)


def export_policy(
    state_dict: Mapping[str, Any], served: Path, version: int, sync: GGUFSync
) -> Path:
    """`state_dict` written as ``policy-v{version}.gguf`` in the sync's folder, in the layout
    of `served` (the GGUF the servers run now)."""
    return export_gguf(
        state_dict, served, sync.workdir / f"policy-v{version}.gguf", layout=sync.layout
    )


def remove_replaced(previous: Path, exported: Path, sync: GGUFSync) -> None:
    """Delete the export the servers ran before, once the new one serves (never the shipped
    model, which is not ours)."""
    if previous.parent == sync.workdir and previous != exported:
        previous.unlink(missing_ok=True)


def gguf_sync_for(model_path: str | Path) -> GGUFSync:
    """A new sync state for servers running the GGUF at `model_path`: an export folder
    (removed with the state, or at interpreter exit, by TemporaryDirectory) and its layout."""
    layout = read_layout(model_path)
    return GGUFSync(tempfile.TemporaryDirectory(prefix="rllm-gguf-"), layout)
