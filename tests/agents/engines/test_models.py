"""The embedded models resolve to real, loadable HF-format directories, built once."""

from __future__ import annotations

import threading

import pytest
import torch
from rllm_agents import models


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """An empty model cache that reuses the converted SmolLM2 (its conversion is the slow part)."""
    converted = models.resolve_model("smollm2")
    (tmp_path / converted.name).symlink_to(converted)
    monkeypatch.setenv("RLLM_CACHE_DIR", str(tmp_path))
    return tmp_path


@pytest.mark.slow
def test_tiny_is_built_once_and_reused(fresh_cache, monkeypatch):
    builds = []
    real_build = models.EMBEDDED_MODELS["tiny"]

    def counting_build(target):
        builds.append(target)
        real_build(target)

    monkeypatch.setitem(models.EMBEDDED_MODELS, "tiny", counting_build)
    results = []
    threads = [
        threading.Thread(target=lambda: results.append(models.resolve_model("tiny")))
        for _ in range(3)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(builds) == 1, "parallel callers must wait for one build, not convert again"
    assert len(set(results)) == 1 and results[0].parent == fresh_cache
    assert (results[0] / models.READY_MARKER).exists()
    leftovers = [p.name for p in fresh_cache.iterdir() if p.name.startswith(".")]
    assert leftovers == [], "the staging directory must be gone after the rename"


@pytest.mark.slow
def test_tiny_is_deterministic_and_shares_smollm2_tokenizer(
    fresh_cache, tmp_path_factory, monkeypatch
):
    first = models.load_model("tiny").state_dict()
    other_cache = tmp_path_factory.mktemp("other-cache")
    (other_cache / models.CACHE_NAMES["smollm2"]).symlink_to(
        fresh_cache / models.CACHE_NAMES["smollm2"]
    )
    monkeypatch.setenv("RLLM_CACHE_DIR", str(other_cache))
    second = models.load_model("tiny").state_dict()
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)
    n_params = sum(t.numel() for k, t in first.items() if "lm_head" not in k)
    assert 1_000_000 < n_params < 10_000_000

    tiny_tok, smol_tok = models.load_tokenizer("tiny"), models.load_tokenizer("smollm2")
    text = "<|im_start|>user\nWhat is 7*6?<|im_end|>\n"
    assert tiny_tok.encode(text) == smol_tok.encode(text)
    assert tiny_tok.eos_token == "<|im_end|>"  # the end of an assistant turn stops generation


def test_interrupted_build_is_redone(fresh_cache):
    target = fresh_cache / models.CACHE_NAMES["tiny"]
    target.mkdir()
    (target / "config.json").write_text("{half written")  # no ready marker
    path = models.resolve_model("tiny")
    assert (path / models.READY_MARKER).exists()
    models.load_model(path)  # loads: the half-written dir was replaced


def test_unknown_name_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="neither an embedded model"):
        models.resolve_model(str(tmp_path / "nope"))


def test_local_directory_is_returned_as_is():
    tiny = models.resolve_model("tiny")
    assert models.resolve_model(str(tiny)) == tiny


@pytest.mark.slow
def test_smollm2_conversion_gives_a_working_chat_model():
    path = models.resolve_model("smollm2")
    tokenizer = models.load_tokenizer(path)
    model = models.load_model(path)
    assert sum(p.numel() for p in model.parameters()) == pytest.approx(134.5e6, rel=0.01)
    assert tokenizer.eos_token_id == model.generation_config.eos_token_id == 2
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 2+3?"}], add_generation_prompt=True, tokenize=False
    )
    ids = torch.tensor([tokenizer.encode(prompt, add_special_tokens=False)])
    out = model.generate(ids, max_new_tokens=20, do_sample=False)
    reply = tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True)
    assert "5" in reply
    assert out[0, -1].item() == tokenizer.eos_token_id  # it stops by itself
