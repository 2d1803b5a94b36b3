"""Write a trainer's Hugging Face Llama weights into a copy of a GGUF file llama.cpp serves.

The template GGUF (the one the server runs now) fixes everything but the numbers: metadata,
tokenizer, chat template, tensor order, shapes and each tensor's quantisation type. Because a
tensor keeps its type and shape, its byte size does not change either, so the export is a file
copy whose tensor bytes are overwritten in place: nothing in the header moves, and the result
is exactly the file llama.cpp's own converter would give for these weights at these types.

Exporting the unchanged weights of a model that was itself read from the template gives back
the template byte for byte (quantising a dequantised block is exact); the tests check that, which
proves the name mapping and the Q/K permutation below.
"""

from __future__ import annotations

import mmap
import os
import re
import shutil
import struct
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

# HF Llama parameter name -> GGUF tensor name (llama.cpp's tensor naming for arch "llama").
_GLOBAL_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}
_LAYER_NAMES = {
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
    "input_layernorm.weight": "attn_norm.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
}
_LAYER_KEY = re.compile(r"model\.layers\.(\d+)\.(.+)")


@dataclass(frozen=True)
class LlamaShape:
    """The head counts the Q/K permutation needs (GGUF keys llama.attention.head_count[_kv])."""

    n_head: int
    n_head_kv: int


def gguf_name(hf_name: str) -> str | None:
    """The GGUF tensor name of a HF Llama parameter, or None for one GGUF does not store."""
    if hf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[hf_name]
    match = _LAYER_KEY.fullmatch(hf_name)
    if match and match.group(2) in _LAYER_NAMES:
        return f"blk.{match.group(1)}.{_LAYER_NAMES[match.group(2)]}"
    return None


def permute_rotary(weight: np.ndarray, n_head: int) -> np.ndarray:
    """HF's q/k projection rows in llama.cpp's rotary layout.

    HF rotates the two halves of each head ([x0..x_{d/2}), [x_{d/2}..x_d)); llama.cpp (like
    Meta's original checkpoints) rotates interleaved pairs (x0, x1), (x2, x3)... Within each
    head, row i of the first half and row i of the second half become rows 2i and 2i+1: the
    same reordering llama.cpp's convert_hf_to_gguf.py applies to q_proj and k_proj.
    """
    rows = weight.shape[0]
    return (
        weight.reshape(n_head, 2, rows // n_head // 2, *weight.shape[1:])
        .swapaxes(1, 2)
        .reshape(weight.shape)
    )


def gguf_tensor(hf_name: str, weight: np.ndarray, shape: LlamaShape) -> np.ndarray:
    """A HF parameter as the float32 array GGUF stores under gguf_name(hf_name)."""
    weight = np.ascontiguousarray(weight, dtype=np.float32)
    if hf_name.endswith("self_attn.q_proj.weight"):
        return permute_rotary(weight, shape.n_head)
    if hf_name.endswith("self_attn.k_proj.weight"):
        return permute_rotary(weight, shape.n_head_kv)
    return weight


@dataclass(frozen=True)
class TensorSlot:
    """Where one tensor's bytes lie in the file, and how they are encoded."""

    name: str
    offset: int  # from the start of the file
    qtype: int  # a gguf.GGMLQuantizationType value
    shape: tuple[int, ...]  # numpy order (slowest dim first), as the HF weight is
    nbytes: int


@dataclass(frozen=True)
class GGUFLayout:
    """A GGUF file's tensor slots and head counts: all an export needs from the template.

    Reading it parses the whole header, tokenizer included (seconds for a 49k vocabulary), so
    a syncing engine reads it once and reuses it: every export has the template's layout.
    """

    slots: tuple[TensorSlot, ...]
    shape: LlamaShape


def read_layout(path: str | os.PathLike[str]) -> GGUFLayout:
    """The tensor slots and head counts of a GGUF file (format v2/v3, little-endian).

    A direct header walk: gguf's GGUFReader builds an object per tokenizer string, which takes
    seconds for a 49k vocabulary; this skips values it does not need.
    """
    with open(path, "rb") as source, mmap.mmap(source.fileno(), 0, access=mmap.ACCESS_READ) as raw:
        return _parse_layout(_Header(raw), path)


def _parse_layout(header: _Header, path: str | os.PathLike[str]) -> GGUFLayout:
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    if header.take(4) != b"GGUF":
        raise ValueError(f"{path} is not a GGUF file")
    header.unpack("<I")  # format version
    tensor_count, kv_count = header.unpack("<QQ")
    scalars: dict[str, Any] = {}
    for _ in range(kv_count):
        key = header.string()
        value = header.value(header.unpack("<I")[0])
        if value is not None:
            scalars[key] = value
    infos = []
    for _ in range(tensor_count):
        name = header.string()
        (n_dims,) = header.unpack("<I")
        dims = header.unpack(f"<{n_dims}Q")
        qtype, offset = header.unpack("<IQ")
        infos.append((name, dims, qtype, offset))
    alignment = int(scalars.get("general.alignment", 32))
    data_start = -(-header.position // alignment) * alignment
    slots = []
    for name, dims, qtype, offset in infos:
        block, block_bytes = GGML_QUANT_SIZES[GGMLQuantizationType(qtype)]
        count = int(np.prod(dims))
        slots.append(
            TensorSlot(
                name=name,
                offset=data_start + offset,
                qtype=qtype,
                shape=tuple(int(d) for d in reversed(dims)),  # GGUF lists dims fastest-first
                nbytes=count // block * block_bytes,
            )
        )
    arch = scalars["general.architecture"]
    shape = LlamaShape(
        int(scalars[f"{arch}.attention.head_count"]),
        int(scalars[f"{arch}.attention.head_count_kv"]),
    )
    return GGUFLayout(tuple(slots), shape)


# GGUF value type -> struct format of one scalar (8 = string, 9 = array: see _Header.value).
_SCALAR_FORMATS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
                   10: "<Q", 11: "<q", 12: "<d"}  # fmt: skip


class _Header:
    """A cursor over a GGUF header's bytes."""

    def __init__(self, raw: bytes | mmap.mmap) -> None:
        self.raw = raw
        self.position = 0

    def take(self, size: int) -> bytes:
        chunk = bytes(self.raw[self.position : self.position + size])
        self.position += size
        return chunk

    def unpack(self, fmt: str) -> tuple[Any, ...]:
        values = struct.unpack_from(fmt, self.raw, self.position)
        self.position += struct.calcsize(fmt)
        return values

    def string(self) -> str:
        (length,) = self.unpack("<Q")
        return self.take(length).decode("utf-8", errors="replace")

    def value(self, kind: int) -> Any:
        """A scalar or string; arrays are skipped (None): the layout needs none of them."""
        if kind == 8:
            return self.string()
        if kind == 9:
            element, count = self.unpack("<IQ")
            if element in _SCALAR_FORMATS:
                self.position += count * struct.calcsize(_SCALAR_FORMATS[element])
            else:
                for _ in range(count):
                    self.value(element)
            return None
        return self.unpack(_SCALAR_FORMATS[kind])[0]


def to_numpy(tensor: Any) -> np.ndarray:
    """A torch tensor (any dtype or device) or array as a float32 numpy array."""
    if hasattr(tensor, "detach"):
        return tensor.detach().to("cpu").float().numpy()
    return np.asarray(tensor, dtype=np.float32)


def export_gguf(
    state_dict: Mapping[str, Any],
    template: str | os.PathLike[str],
    target: str | os.PathLike[str],
    *,
    layout: GGUFLayout | None = None,
    to_array: Callable[[Any], np.ndarray] = to_numpy,
) -> Path:
    """Write `state_dict` (HF Llama names, merged weights) as `target`, shaped like `template`.

    Every tensor of the template must get a value (a tied ``lm_head`` is simply absent from
    both); a parameter without a GGUF name is an error, since llama.cpp would then serve other
    weights than the trainer's. `layout` is ``read_layout(template)``, when already known. The
    file appears atomically (written next to `target`, then renamed), so a server never reads
    half a file.
    """
    layout = layout or read_layout(template)
    target = Path(target)
    by_gguf_name = _map_names(state_dict, {slot.name for slot in layout.slots})
    handle, partial = tempfile.mkstemp(prefix=target.name + ".", dir=target.parent)
    os.close(handle)
    try:
        shutil.copyfile(template, partial)
        data = np.memmap(partial, dtype=np.uint8, mode="r+")
        for slot in layout.slots:
            hf_name = by_gguf_name[slot.name]
            values = gguf_tensor(hf_name, to_array(state_dict[hf_name]), layout.shape)
            data[slot.offset : slot.offset + slot.nbytes] = encode(slot, values)
        data.flush()
        del data  # close the map before the rename
        os.replace(partial, target)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise
    return target


def _map_names(state_dict: Mapping[str, Any], gguf_names: set[str]) -> dict[str, str]:
    by_gguf_name: dict[str, str] = {}
    unknown = []
    for hf_name in state_dict:
        name = gguf_name(hf_name)
        if name is None or name not in gguf_names:
            # lm_head is stored only when embeddings are not tied; rotary caches are derived.
            if hf_name == "lm_head.weight" or hf_name.endswith("rotary_emb.inv_freq"):
                continue
            unknown.append(hf_name)
            continue
        by_gguf_name[name] = hf_name
    missing = sorted(gguf_names - set(by_gguf_name))
    if unknown or missing:
        raise ValueError(
            f"weights do not match the GGUF template: no GGUF tensor for {unknown[:5]}, "
            f"no weight for {missing[:5]}"
        )
    return by_gguf_name


def encode(slot: TensorSlot, values: np.ndarray) -> np.ndarray:
    """`values` quantised to the slot's own type, as the raw bytes GGUF stores."""
    from gguf import GGMLQuantizationType
    from gguf.quants import quantize

    if values.shape != slot.shape:
        raise ValueError(f"{slot.name}: weight shape {values.shape}, GGUF expects {slot.shape}")
    qtype = GGMLQuantizationType(slot.qtype)
    if qtype == GGMLQuantizationType.F32:
        encoded = values
    elif qtype == GGMLQuantizationType.F16:
        encoded = values.astype(np.float16)
    else:
        encoded = quantize(values, qtype)
    return np.ascontiguousarray(encoded).reshape(-1).view(np.uint8)
