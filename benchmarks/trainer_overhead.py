"""How much time the native trainer adds on top of its two unavoidable costs.

For each training step of a single-turn env (the embedded default task by default) this runs
the real ``NativeTrainer.train_step`` and then, in the same process and on identical inputs,
the two costs alone:

* generation alone: ``sample_batch`` on the step's exact prompts, with the weights and the
  torch RNG state the step started from (so it generates the very same tokens - checked);
* forward+backward alone: a plain masked log-likelihood backward over the same sequences and
  micro-batches (no advantages, no verl loss, no optimizer).

The ratio ``step time / (generation alone + forward/backward alone)`` is the trainer's
overhead (rollout bookkeeping, env steps, batch building, advantages, loss, optimizer step).
The first step is a warm-up and is left out of the totals.

    python benchmarks/trainer_overhead.py --model smollm2 --steps 4
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time

import torch
from rllm_train.config import build_config
from rllm_train.native.batch import episodes_to_sequences, to_tensors
from rllm_train.native.sampling import sample_batch, stop_token_ids
from rllm_train.native.trainer import NativeTrainer


def clone_weights(model) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}


def generation_alone(trainer: NativeTrainer, episodes) -> tuple[float, bool]:
    prompts = [episode.trajectories[0].prompt_ids for episode in episodes]
    stops = stop_token_ids(trainer.tokenizer)
    trainer.model.eval()
    started = time.perf_counter()
    completions = sample_batch(
        trainer.model,
        prompts,
        max_new_tokens=trainer.config.rollout.max_response_tokens,
        temperature=trainer.config.rollout.temperature,
        top_p=trainer.config.rollout.top_p,
        stop_ids=stops,
        pad_id=trainer.pad_id,
    )
    seconds = time.perf_counter() - started
    same = all(
        completion.token_ids == episode.trajectories[0].response_ids
        for completion, episode in zip(completions, episodes, strict=True)
    )
    return seconds, same


def forward_backward_alone(trainer: NativeTrainer, episodes) -> float:
    sequences = episodes_to_sequences(
        episodes, [str(i) for i in range(len(episodes))], trainer.config.algorithm.sequence_mode
    )
    batch = to_tensors(sequences, trainer.pad_id)
    total = float(batch.loss_mask.sum().clamp(min=1))
    trainer.model.train()
    started = time.perf_counter()
    for rows in trainer._micro_batches(len(batch)):
        part = batch.rows(rows)
        logprobs, _ = trainer._forward(part)
        (-(logprobs * part.loss_mask).sum() / total).backward()
    seconds = time.perf_counter() - started
    trainer.model.zero_grad(set_to_none=True)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--env", default="rllm_train.default_task:rllm_train/Arithmetic-v0")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("overrides", nargs="*", help="config overrides, section.key=value")
    args = parser.parse_args()
    output = tempfile.mkdtemp(prefix="rllm-overhead-")
    config = build_config(
        overrides=[
            f"model.name={args.model}",
            f"env.id={args.env}",
            f"trainer.output={output}",
            "trainer.progress=false",
            "trainer.tensorboard=false",
            *args.overrides,
        ]
    )
    if config.rollout.max_turns != 1:
        parser.error("the benchmark replays single-turn rollouts; use rollout.max_turns=1")
    trainer = NativeTrainer(config)
    results = []
    for step in range(args.steps):
        before, rng = clone_weights(trainer.model), torch.get_rng_state()
        row = trainer.train_step(step)
        after, episodes = clone_weights(trainer.model), trainer.last_episodes
        trainer.model.load_state_dict(before)
        torch.set_rng_state(rng)
        generate_seconds, reproduced = generation_alone(trainer, episodes)
        fb_seconds = forward_backward_alone(trainer, episodes)
        trainer.model.load_state_dict(after)
        results.append(
            {
                "step": step + 1,
                "step_s": row["time/step_s"],
                "generate_alone_s": generate_seconds,
                "forward_backward_alone_s": fb_seconds,
                "same_tokens": reproduced,
            }
        )
        print(json.dumps(results[-1]))
    measured = results[1:] or results
    step_total = sum(r["step_s"] for r in measured)
    alone_total = sum(r["generate_alone_s"] + r["forward_backward_alone_s"] for r in measured)
    print(
        json.dumps(
            {
                "model": args.model,
                "steps_measured": len(measured),
                "step_s_mean": step_total / len(measured),
                "alone_s_mean": alone_total / len(measured),
                "overhead_ratio": step_total / alone_total,
                "same_tokens": all(r["same_tokens"] for r in measured),
            }
        )
    )


if __name__ == "__main__":
    main()
