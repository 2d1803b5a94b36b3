"""The trainer's optimizer: AdamW in its fastest implementation for the parameters' device.

torch picks AdamW's multi-tensor (``foreach``) code only on accelerators; on a CPU it falls back
to the per-tensor loop, which walks every weight and both moment buffers several times and
allocates temporaries on each pass. For full fine-tuning of a 135M-parameter model that loop
was the largest cost of a step after generation and forward/backward. The fused kernel does the
same update in one pass per tensor, and torch has it for floating-point weights on CPU and
CUDA, so it is used wherever torch accepts it; anywhere else torch's own default applies.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch


def build_optimizer(
    parameters: Iterable[torch.Tensor] | Iterable[dict], lr: float, weight_decay: float
) -> torch.optim.AdamW:
    """AdamW over `parameters`: tensors, or groups of them (dicts, each may set its own lr)."""
    params = list(parameters)
    try:
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay, fused=True)
    except RuntimeError:  # a device or dtype without the fused kernel (torch says which)
        return torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
