"""Weight sync into a llama.cpp server: export the policy to GGUF, restart the server on it.

llama.cpp cannot take weights over the wire, so a sync is: write the trainer's weights into a
copy of the GGUF the server runs (same metadata, tokenizer and per-tensor quantisation, see
``gguf_export``), then restart the server process on the new file on the same port, so the
engine's HTTP client keeps its address. For SmolLM2-135M this takes seconds on CPU.

The served policy is then a *quantised* copy of the trainer's (Q4_1/Q8_0 for the embedded
model): its log-probs differ from the trainer's by more than sampling noise, as those of a
bf16/fp8 vLLM differ on a GPU, which is what rollout correction is there for.

A sync restarts the server: requests in flight fail, so sync between rollout phases (the
trainer waits for its rollouts before it pushes weights).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rllm_agents.engines.gguf_export import GGUFLayout, export_gguf, read_layout


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


def sync_llamacpp_servers(
    servers: list[Any], state_dict: Mapping[str, Any], version: int, sync: GGUFSync
) -> SyncTiming:
    """Serve `state_dict` as policy `version` from `servers` (LlamaCppServers running one
    GGUF), each restarted on the same port.

    The GGUF goes to ``policy-v{version}.gguf`` in the sync's folder, written once for all the
    servers; the file they ran before is removed once the new one serves, unless it is not
    ours (the shipped model).
    """
    started = time.perf_counter()
    previous = Path(servers[0].model_path)
    workdir = sync.workdir
    exported = export_gguf(
        state_dict, previous, workdir / f"policy-v{version}.gguf", layout=sync.layout
    )
    exported_at = time.perf_counter()
    for server in servers:
        server.close()
        server.model_path = exported
    try:
        for server in servers:
            server.launch()  # all load at once
        for server in servers:
            server.wait_ready()
    except BaseException:
        for server in servers:
            server.close()
            server.model_path = previous  # leave them pointing at a file that still exists
        raise
    if previous.parent == workdir and previous != exported:
        previous.unlink(missing_ok=True)
    return SyncTiming(exported_at - started, time.perf_counter() - exported_at)


def gguf_sync_for(model_path: str | Path) -> GGUFSync:
    """A new sync state for servers running the GGUF at `model_path`: an export folder
    (removed with the state, or at interpreter exit, by TemporaryDirectory) and its layout."""
    layout = read_layout(model_path)
    return GGUFSync(tempfile.TemporaryDirectory(prefix="rllm-gguf-"), layout)
