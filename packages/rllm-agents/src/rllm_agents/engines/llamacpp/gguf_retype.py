"""An F16 copy of a quantised GGUF, so that llama.cpp can serve a policy that is being trained.

The embedded SmolLM2 GGUF stores its matrices as Q4_1 (and the embedding as Q8_0). A Q4_1
block of 32 weights has 16 levels, about 1e-2 apart for these weights, while a few Adam steps
at a trainer's learning rate move a weight by 1e-4 to 1e-3. Exported at Q4_1 (the export keeps
each tensor's type), such an update rounds back onto the same levels: llama.cpp would go on
sampling the policy it started with, and the training loop would never see its policy learn.
F16 rounds a weight to within ~5e-4 of its size (about 3e-5 for these weights), so an update
shows after a step or two.

``f16_copy(path)`` returns a GGUF that differs from `path` only in its tensor types: every
matrix (2-D tensor) is stored as F16, 1-D tensors (the norms) as F32, which is what
llama.cpp expects for them; metadata, tokenizer, chat template, tensor names, order and
shapes, and the data alignment are the template's. Only ``general.file_type``, which names
the tensor types, says F16. The values are the template's, dequantised: its tensors are
already in llama.cpp's layout (Q/K rows permuted), so nothing is permuted here.

The copy is about 2 bytes per parameter (270 MB for SmolLM2-135M) and takes seconds to write,
so it is kept in a cache folder and reused: ``$RLLM_GGUF_CACHE``, else ``~/.cache/rllm/gguf``.
Its name carries the source's name, size and a hash of its content, so a changed source
gets a new copy and never a stale one.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

# Bump when the conversion changes, so copies made by an older version are not reused.
RETYPE_VERSION = "f16v1"
# The cache key hashes the source's whole content: ~0.2 s for the 98 MB SmolLM2 file, much
# less than a conversion, and exact where a modification time is not (a reinstalled copy
# of the same file is still found; an edited file with a restored mtime is not mistaken).
HASH_CHUNK = 1 << 22


@dataclass(frozen=True)
class RetypedTensor:
    """One tensor of the copy: its name, values (numpy order) and GGML type."""

    name: str
    values: np.ndarray
    qtype: int  # a gguf.GGMLQuantizationType value


def gguf_cache_dir() -> Path:
    """Where F16 copies are kept: ``$RLLM_GGUF_CACHE``, else ``~/.cache/rllm/gguf``."""
    configured = os.environ.get("RLLM_GGUF_CACHE")
    return Path(configured).expanduser() if configured else Path.home() / ".cache/rllm/gguf"


def content_hash(path: str | os.PathLike[str], digest_size: int = 8) -> str:
    digest = hashlib.blake2b(digest_size=digest_size)
    with open(path, "rb") as source:
        while chunk := source.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def f16_name(path: str | os.PathLike[str]) -> str:
    """The cache file name of `path`'s F16 copy: its name, size and content hash."""
    path = Path(path)
    stem = path.name.removesuffix(".gguf")
    return f"{stem}.{path.stat().st_size}-{content_hash(path)}.{RETYPE_VERSION}.gguf"


def f16_copy(path: str | os.PathLike[str], cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The F16 copy of the GGUF at `path`, made on first use and then read from the cache
    (`cache_dir`, default ``gguf_cache_dir()``)."""
    folder = Path(cache_dir) if cache_dir is not None else gguf_cache_dir()
    target = folder / f16_name(path)
    if target.is_file():
        return target
    folder.mkdir(parents=True, exist_ok=True)
    return write_f16(path, target)


def f16_type(shape: tuple[int, ...]) -> int:
    """The GGML type a tensor of this (numpy) shape gets in the copy: F16 for matrices; F32
    for 1-D tensors, which llama.cpp reads as F32 (norms, biases)."""
    from gguf import GGMLQuantizationType

    return GGMLQuantizationType.F16 if len(shape) >= 2 else GGMLQuantizationType.F32


def retyped_tensors(reader) -> list[RetypedTensor]:  # noqa: ANN001 - a gguf.GGUFReader
    """The reader's tensors, in file order, dequantised and converted to their F16-copy type."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize

    tensors = []
    for tensor in reader.tensors:
        values = dequantize(tensor.data, tensor.tensor_type)
        qtype = f16_type(values.shape)
        if qtype == GGMLQuantizationType.F16:
            values = values.astype(np.float16)
            # A value beyond F16's range (65504) would silently become inf.
            if not np.isfinite(values).all():
                raise ValueError(f"{tensor.name}: values outside the F16 range")
        else:
            values = np.ascontiguousarray(values, dtype=np.float32)
        tensors.append(RetypedTensor(tensor.name, values, int(qtype)))
    return tensors


def write_f16(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> Path:
    """Write the F16 copy of `source` as `target` (atomically: a temp file next to `target`,
    then renamed, so a reader never sees half a file)."""
    from gguf import GGMLQuantizationType, GGUFEndian, GGUFReader, GGUFWriter, LlamaFileType

    reader = GGUFReader(source)
    if reader.endianess != GGUFEndian.LITTLE:
        raise ValueError(f"{source}: only little-endian GGUF files are supported")
    arch = reader.fields["general.architecture"].contents()
    target = Path(target)
    handle, partial = tempfile.mkstemp(
        prefix=target.name + ".", suffix=".partial", dir=target.parent
    )
    os.close(handle)
    try:
        os.chmod(partial, 0o644)  # mkstemp's 0600 would hide a shared cache from other users
        writer = GGUFWriter(partial, arch)  # writes general.architecture itself, first
        writer.data_alignment = reader.alignment  # the template's general.alignment, or 32
        for name, field in reader.fields.items():
            # GGUF.* are the reader's view of the header (version, counts), not keys.
            if name.startswith("GGUF.") or name == "general.architecture":
                continue
            value = field.contents()
            if name == "general.file_type":
                value = int(LlamaFileType.MOSTLY_F16)  # it names the tensor types
            sub_type = field.types[-1] if len(field.types) > 1 else None
            writer.add_key_value(name, value, field.types[0], sub_type=sub_type)
        for tensor in retyped_tensors(reader):
            writer.add_tensor(
                tensor.name, tensor.values, raw_dtype=GGMLQuantizationType(tensor.qtype)
            )
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()
        os.replace(partial, target)
    except BaseException:
        Path(partial).unlink(missing_ok=True)
        raise
    return target
