"""What scoring a distillation batch costs on each engine that can serve the teacher
(distill.engine; docs/training/distill.md).

    python benchmarks/teacher_scoring.py [--teacher smollm2] [--engines local,process,...]
        [--sequences 16] [--tokens 200] [--repeats 2] [--json PATH]

A batch of `--sequences` chats of about `--tokens` tokens each (SmolLM2's template: a system
prompt, a question, and a reply of plain sentences, which the student "generated": the loss
mask), scored the way the distillation trainer scores it: ``local`` by the teacher's forward
pass over micro-batches in this process (PolicyUpdate.scored_logprobs), every other engine
through ``ServedTeacher`` (one prompt log-probs request per row, all in flight at once). Engines:

* ``local``, ``process``, ``vllm``, ``llamacpp``: the trainer starts them;
* ``openai-vllm``: vLLM's OpenAI server started here, the teacher asked through the client;
* ``openai-llamacpp``: llama-cpp-python's server started here (the shipped Q4_1 GGUF; text
  prompts, ``distill.slots=1``).

Printed per engine: seconds to start its server (openai-*) and the teacher, the first scoring of the batch (warm-up included), the
median of the next `--repeats`, tokens scored per second, and the largest and mean gap per
generated token to the local teacher's log-probs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from rllm_agents.models import load_tokenizer
from rllm_train.config import build_config
from rllm_train.native.batch import TrainSequence, to_tensors
from rllm_train.native.policy_update import PolicyUpdate
from rllm_train.native.served_teacher import ServedTeacher
from rllm_train.native.teacher import load_teacher, teacher_source

SENTENCES = [
    "The sum of two numbers does not depend on their order.",
    "Carrying a ten moves one unit to the next column.",
    "A running total keeps the last result and adds the next number to it.",
    "Checking an answer by subtracting is a quick way to catch a slip.",
    "Large numbers are easier to add when split into tens and ones.",
    "Zero added to any number leaves that number as it was.",
    "Counting on from the larger number saves a few steps.",
    "Writing each step down keeps a long sum from going wrong.",
]
ENGINES = ("local", "process", "vllm", "llamacpp", "openai-vllm", "openai-llamacpp")


def chat_batch(tokenizer, count: int, tokens: int):
    """`count` chats of about `tokens` tokens, the replies on the loss mask."""
    sequences = []
    for index in range(count):
        messages = [
            {"role": "system", "content": "You are a patient arithmetic tutor."},
            {"role": "user", "content": f"Explain how to add {17 + index} and {25 + 3 * index}."},
        ]
        prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        reply, ids = [], prompt_ids
        while len(ids) < tokens:
            reply.append(SENTENCES[(index + len(reply)) % len(SENTENCES)])
            chat = [*messages, {"role": "assistant", "content": " ".join(reply)}]
            text = tokenizer.apply_chat_template(chat, tokenize=False)
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        mask = [0] * len(prompt_ids) + [1] * (len(ids) - len(prompt_ids))
        sequences.append(TrainSequence(ids, mask, 0.0, str(index)))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    return to_tensors(sequences, pad)


def start_server(engine: str, teacher: str):
    """The server an openai-* engine asks (None for the others), started."""
    if engine == "openai-vllm":
        from rllm_agents.engines.vllm.server import VLLMServer

        return VLLMServer(teacher, max_model_len=None).start()
    if engine == "openai-llamacpp":
        from rllm_agents.engines.llamacpp.server import LlamaCppServer

        return LlamaCppServer().start()
    return None


@contextlib.contextmanager
def server_for(engine: str, teacher: str, times: dict[str, float]) -> Iterator[dict[str, str]]:
    """The config overrides of an engine, with its server running for openai-* (its start
    time in `times`)."""
    started = time.perf_counter()
    server = start_server(engine, teacher)
    times["server_start_s"] = time.perf_counter() - started
    if server is None:
        yield {"distill.engine": engine}
        return
    try:
        # llama-cpp-python's server answers one request at a time: the rest wait here.
        slots = {"distill.slots": 1} if engine == "openai-llamacpp" else {}
        yield {"distill.engine": "openai", "distill.base_url": server.base_url, **slots}
    finally:
        server.close()


def local_scorer(config, source) -> tuple[Callable, Callable[[], None]]:
    teacher = load_teacher(source, torch.device("cpu"))
    update = PolicyUpdate(config, teacher, None, device=torch.device("cpu"))

    def score(batch):
        return update.scored_logprobs(batch, 1.0, model=teacher) * batch.loss_mask

    return score, lambda: None


def measure(engine: str, args, batch, tokenizer, reference) -> dict[str, float]:
    server: dict[str, float] = {}
    with server_for(engine, args.teacher, server) as overrides:
        config = build_config(
            overrides={"model.name": args.teacher, "distill.teacher": args.teacher, **overrides}
        )
        source = teacher_source(args.teacher)
        started = time.perf_counter()
        if engine == "local":
            score, close = local_scorer(config, source)
        else:
            served = ServedTeacher(config, source, tokenizer, device=torch.device("cpu"))
            score, close = served.score, served.close
        try:
            start_s = time.perf_counter() - started
            times, scored = [], None
            for _ in range(1 + args.repeats):
                began = time.perf_counter()
                scored = score(batch)
                times.append(time.perf_counter() - began)
        finally:
            close()
    generated = batch.loss_mask > 0
    gap = (scored - reference)[generated].abs()
    steady = statistics.median(times[1:]) if args.repeats else times[0]
    return {
        **server,
        "start_s": start_s,
        "first_s": times[0],
        "steady_s": steady,
        "tokens_per_s": float(batch.attention_mask.sum()) / steady,
        "largest_gap": float(gap.max()),
        "mean_gap": float(gap.mean()),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--teacher", default="smollm2")
    parser.add_argument("--engines", default=",".join(ENGINES))
    parser.add_argument("--sequences", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    engines = [name for name in args.engines.split(",") if name]
    unknown = sorted(set(engines) - set(ENGINES))
    if unknown:
        parser.error(f"unknown engines {unknown}; choose from {', '.join(ENGINES)}")
    tokenizer = load_tokenizer(args.teacher)
    batch = chat_batch(tokenizer, args.sequences, args.tokens)
    tokens = int(batch.attention_mask.sum())
    print(f"{len(batch)} sequences, {tokens} tokens, {int(batch.loss_mask.sum())} scored")
    # What every engine is compared with: the local teacher's numbers.
    config = build_config(overrides={"model.name": args.teacher})
    reference = local_scorer(config, teacher_source(args.teacher))[0](batch)
    results = {}
    for engine in engines:
        results[engine] = measure(engine, args, batch, tokenizer, reference)
        row = results[engine]
        print(
            f"{engine:16s} server {row['server_start_s']:5.1f} s  start {row['start_s']:5.1f} s  first {row['first_s']:6.2f} s  "
            f"then {row['steady_s']:6.2f} s  {row['tokens_per_s']:7.0f} tokens/s  "
            f"gap largest {row['largest_gap']:.3g} mean {row['mean_gap']:.3g}",
            flush=True,
        )
    if args.json:
        report = {"sequences": len(batch), "tokens": tokens, "engines": results}
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
