"""How much time the native trainer adds over a hand-written minimal PyTorch RL step.

Each training step runs twice in the same process, on the same weights, optimizer state and
RNG state, so both sides sample the very same tokens (checked) and train on the same batch:

* **ours**: ``NativeTrainer.train_step`` - rollouts through the env and the agent (chat
  template, env steps, episode bookkeeping, rollout log-probs), sequences and masks, verl's
  GRPO advantages, verl's clipped policy loss over micro-batches, gradient clipping, the
  trainer's AdamW step, per-step metrics.
* **minimal**: what a short hand-written GRPO step needs and nothing else - ``model.generate``
  on the step's prompts (no log-probs kept), the step's rewards (no env calls: their cost
  counts as ours), group-normalised advantages in plain torch, a REINFORCE-style loss on the
  model tokens (for one on-policy epoch PPO's ratio is 1, so this is the same gradient),
  backward over the same micro-batches, the same gradient clipping and an optimizer built
  exactly like the trainer's (same class, hyper-parameters and implementation, loaded with the
  same state) so the optimizer step costs the same on both sides.

The two updates must agree: the benchmark reports the cosine between the two weight changes.
The ratio ``ours / minimal`` per step is the trainer's overhead; the first step is a warm-up
(lazy optimizer state, allocator, kernel caches) and is left out of the medians. Also shown:
``ours / (generation + forward/backward)``, the minimal step without its optimizer.

    python benchmarks/trainer_overhead.py --model smollm2 --steps 6
"""

from __future__ import annotations

import argparse
import copy
import inspect
import json
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
from rllm_train.config import build_config
from rllm_train.native.sampling import stop_token_ids
from rllm_train.native.trainer import NativeTrainer


@dataclass(frozen=True)
class MinimalTimes:
    generate_s: float
    forward_backward_s: float
    optimizer_s: float  # gradient clipping + optimizer step
    cpu_s: float  # process CPU time of all three

    @property
    def total_s(self) -> float:
        return self.generate_s + self.forward_backward_s + self.optimizer_s


@dataclass(frozen=True)
class StepReport:
    step: int
    ours_s: float
    ours_generate_s: float
    ours_forward_backward_s: float
    ours_optimizer_s: float
    minimal_s: float
    minimal_generate_s: float
    minimal_forward_backward_s: float
    minimal_optimizer_s: float
    ratio: float
    ratio_without_optimizer: float
    ours_cpu_s: float
    minimal_cpu_s: float
    cpu_ratio: float
    same_tokens: bool
    update_cosine: float
    ours_replays_s: tuple[float, ...] = ()  # every replay, to see how noisy the machine was
    minimal_replays_s: tuple[float, ...] = ()


def timed(device: torch.device, work: Callable[[], object]) -> tuple[object, float, float]:
    """(result, wall seconds, process CPU seconds), GPU work included on both ends.

    The CPU time is reported next to the wall time because on a CPU machine shared with other
    jobs the wall time of either side can stretch several-fold while its CPU time does not.
    """
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    started, cpu_started = time.perf_counter(), time.process_time()
    result = work()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return result, time.perf_counter() - started, time.process_time() - cpu_started


def clone_weights(model) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}


def twin_optimizer(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer:
    """An optimizer of the same class and settings (implementation too), same parameters."""
    params = [p for group in optimizer.param_groups for p in group["params"]]
    accepted = inspect.signature(type(optimizer)).parameters
    settings = {k: v for k, v in optimizer.defaults.items() if k in accepted}
    return type(optimizer)(params, **settings)


def minimal_generate(model, prompts, rollout, stop_ids, pad_id) -> list[list[int]]:
    """Sampled completions (cut after the first stop token), as plain ``generate`` gives them."""
    width = max(len(prompt) for prompt in prompts)
    ids = torch.full((len(prompts), width), pad_id, dtype=torch.long)
    attention = torch.zeros_like(ids)
    for row, prompt in enumerate(prompts):
        ids[row, width - len(prompt) :] = torch.tensor(prompt)
        attention[row, width - len(prompt) :] = 1
    device = next(model.parameters()).device
    greedy = rollout.temperature == 0
    with torch.no_grad():
        output = model.generate(
            input_ids=ids.to(device),
            attention_mask=attention.to(device),
            max_new_tokens=rollout.max_response_tokens,
            do_sample=not greedy,
            temperature=None if greedy else rollout.temperature,
            top_p=None if greedy else rollout.top_p,
            top_k=None,
            eos_token_id=stop_ids,
            pad_token_id=pad_id,
        )
    completions = []
    for tokens in output[:, width:].tolist():
        end = next((i + 1 for i, token in enumerate(tokens) if token in stop_ids), len(tokens))
        completions.append(tokens[:end])
    return completions


def group_advantages(rewards: list[float], groups: list[int]) -> torch.Tensor:
    """GRPO's outcome advantage: (reward - group mean) / (group std + 1e-6)."""
    values = torch.tensor(rewards, dtype=torch.float32)
    keys = torch.tensor(groups)
    advantages = torch.zeros_like(values)
    for key in keys.unique():
        members = keys == key
        group = values[members]
        advantages[members] = (group - group.mean()) / (group.std() + 1e-6)
    return advantages


def minimal_update(model, optimizer, prompts, completions, advantages, config, pad_id):
    """Masked REINFORCE over micro-batches, clip, optimizer step: (fwd/bwd s, optimizer s)."""
    device = next(model.parameters()).device
    total_tokens = max(sum(len(c) for c in completions), 1)
    size = config.trainer.micro_batch_size
    model.train()
    started = time.perf_counter()
    for start in range(0, len(prompts), size):
        rows = range(start, min(start + size, len(prompts)))
        width = max(len(prompts[i]) + len(completions[i]) for i in rows)
        ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
        attention = torch.zeros_like(ids)
        mask = torch.zeros((len(rows), width))
        for row, i in enumerate(rows):
            length = len(prompts[i]) + len(completions[i])
            ids[row, :length] = torch.tensor(prompts[i] + completions[i])
            attention[row, :length] = 1
            mask[row, len(prompts[i]) : length] = 1
        # Only positions that predict a completion token need the vocabulary projection.
        positions = mask[:, 1:].any(dim=0).nonzero().squeeze(-1)
        ids, mask = ids.to(device), mask.to(device)
        logits = model(
            input_ids=ids,
            attention_mask=attention.to(device),
            use_cache=False,
            logits_to_keep=positions.to(device),
        ).logits.float()
        targets = ids[:, positions + 1]
        logprobs = logits.log_softmax(-1).gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        weights = advantages[list(rows)].to(device).unsqueeze(1) * mask[:, positions + 1]
        (-(logprobs * weights).sum() / total_tokens).backward()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    backward_done = time.perf_counter()
    params = [p for group in optimizer.param_groups for p in group["params"]]
    torch.nn.utils.clip_grad_norm_(params, config.trainer.max_grad_norm)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return backward_done - started, time.perf_counter() - backward_done


def update_cosine(before, first_after, second_after) -> float:
    """Cosine between two weight changes from the same start (1.0: the same update)."""
    dot = first_norm = second_norm = 0.0
    for name, start in before.items():
        if not start.is_floating_point():
            continue
        a = (first_after[name] - start).double()
        b = (second_after[name] - start).double()
        dot += float((a * b).sum())
        first_norm += float((a * a).sum())
        second_norm += float((b * b).sum())
    if first_norm == 0.0 and second_norm == 0.0:
        return 1.0  # neither side moved (every advantage was zero)
    return dot / max((first_norm * second_norm) ** 0.5, 1e-30)


@dataclass(frozen=True)
class StartState:
    """Everything a step starts from, so the same step can be replayed exactly."""

    weights: dict[str, torch.Tensor]
    optimizer: dict
    rng: torch.Tensor
    cuda_rng: list | None


def capture(trainer: NativeTrainer) -> StartState:
    cuda = trainer.device.type == "cuda"
    return StartState(
        weights=clone_weights(trainer.model),
        optimizer=copy.deepcopy(trainer.optimizer.state_dict()),
        rng=torch.get_rng_state(),
        cuda_rng=torch.cuda.get_rng_state_all() if cuda else None,
    )


def restore(model, start: StartState, optimizer: torch.optim.Optimizer) -> None:
    model.load_state_dict(start.weights)
    optimizer.load_state_dict(copy.deepcopy(start.optimizer))
    torch.set_rng_state(start.rng)
    if start.cuda_rng is not None:
        torch.cuda.set_rng_state_all(start.cuda_rng)


def minimal_step(trainer: NativeTrainer, start: StartState, episodes):
    """(completions, MinimalTimes, weights after) of the minimal step from `start`."""
    model, device, config = trainer.model, trainer.device, trainer.config
    twin = twin_optimizer(trainer.optimizer)
    restore(model, start, twin)
    prompts = [list(e.trajectories[0].prompt_ids) for e in episodes]
    stops = stop_token_ids(trainer.tokenizer)
    model.eval()
    completions, generate_s, generate_cpu_s = timed(
        device,
        lambda: minimal_generate(model, prompts, config.rollout, stops, trainer.pad_id),
    )
    # The rewards the env gave the same completions (its cost counts as ours).
    advantages = group_advantages(
        [float(e.reward) for e in episodes], [int(e.info["seed"]) for e in episodes]
    )
    (fb_s, optimizer_s), _, update_cpu_s = timed(
        device,
        lambda: minimal_update(
            model, twin, prompts, completions, advantages, config, trainer.pad_id
        ),
    )
    times = MinimalTimes(generate_s, fb_s, optimizer_s, generate_cpu_s + update_cpu_s)
    return completions, times, clone_weights(model)


def run_step(trainer: NativeTrainer, step: int, repeats: int) -> StepReport:
    """Step `step` played `repeats` times by each side, alternating; the fastest of each.

    Every replay starts from the same weights, optimizer state and RNG state, so each one
    does exactly the same work; the fastest is the one least disturbed by other processes.
    """
    start = capture(trainer)
    ours_runs, minimal_runs, same_tokens, cosines = [], [], [], []
    for _ in range(repeats):
        restore(trainer.model, start, trainer.optimizer)
        row, ours_s, ours_cpu_s = timed(trainer.device, lambda: trainer.train_step(step))
        ours_runs.append((ours_s, ours_cpu_s, row))
        after = clone_weights(trainer.model)
        episodes = [e for e in trainer.last_episodes if e.trajectories]
        completions, times, minimal_after = minimal_step(trainer, start, episodes)
        minimal_runs.append(times)
        same_tokens.append(completions == [list(e.trajectories[0].response_ids) for e in episodes])
        cosines.append(update_cosine(start.weights, after, minimal_after))
    trainer.model.load_state_dict(after)  # the trainer goes on from its own update
    ours_s, _, row = min(ours_runs, key=lambda run: run[0])
    ours_cpu_s = min(run[1] for run in ours_runs)
    minimal = min(minimal_runs, key=lambda times: times.total_s)
    minimal_cpu_s = min(times.cpu_s for times in minimal_runs)
    return StepReport(
        step=step + 1,
        ours_s=ours_s,
        ours_generate_s=row["time/generate_s"],
        ours_forward_backward_s=row.get("time/forward_backward_s", 0.0),
        ours_optimizer_s=row.get("time/optimizer_s", 0.0),
        minimal_s=minimal.total_s,
        minimal_generate_s=minimal.generate_s,
        minimal_forward_backward_s=minimal.forward_backward_s,
        minimal_optimizer_s=minimal.optimizer_s,
        ratio=ours_s / minimal.total_s,
        ratio_without_optimizer=ours_s / (minimal.generate_s + minimal.forward_backward_s),
        ours_cpu_s=ours_cpu_s,
        minimal_cpu_s=minimal_cpu_s,
        cpu_ratio=ours_cpu_s / minimal_cpu_s,
        same_tokens=all(same_tokens),
        update_cosine=min(cosines),
        ours_replays_s=tuple(run[0] for run in ours_runs),
        minimal_replays_s=tuple(times.total_s for times in minimal_runs),
    )


def summary(reports: list[StepReport], model: str, optimizer: torch.optim.Optimizer) -> dict:
    measured = reports[1:] or reports  # the first step is the warm-up

    def median(key: str) -> float:
        return statistics.median(getattr(report, key) for report in measured)

    defaults = optimizer.defaults
    implementation = next((name for name in ("fused", "foreach") if defaults.get(name)), "for-loop")
    return {
        "model": model,
        "optimizer": f"{type(optimizer).__name__} ({implementation})",
        "steps_measured": len(measured),
        "ours_s_median": median("ours_s"),
        "minimal_s_median": median("minimal_s"),
        "overhead_ratio_median": median("ratio"),
        "overhead_ratio_without_optimizer_median": median("ratio_without_optimizer"),
        "cpu_time_ratio_median": median("cpu_ratio"),
        "same_tokens": all(report.same_tokens for report in reports),
        "update_cosine_min": min(report.update_cosine for report in reports),
    }


TABLE_HEADER = (
    f"{'step':>4} | {'ours s':>7} {'gen':>6} {'fwd/bwd':>7} {'optim':>6} | "
    f"{'minimal s':>9} {'gen':>6} {'fwd/bwd':>7} {'optim':>6} | {'ratio':>5} {'cpu':>5}  cos"
)


def table_row(r: StepReport, warm_up: bool) -> str:
    return (
        f"{r.step:>4} | {r.ours_s:7.2f} {r.ours_generate_s:6.2f} "
        f"{r.ours_forward_backward_s:7.2f} {r.ours_optimizer_s:6.2f} | "
        f"{r.minimal_s:9.2f} {r.minimal_generate_s:6.2f} "
        f"{r.minimal_forward_backward_s:7.2f} {r.minimal_optimizer_s:6.2f} | "
        f"{r.ratio:5.2f} {r.cpu_ratio:5.2f}  {r.update_cosine:.4f}"
        + (" (warm-up)" if warm_up else "")
        + f"  replays: ours {', '.join(f'{t:.1f}' for t in r.ours_replays_s)}"
        + f"; minimal {', '.join(f'{t:.1f}' for t in r.minimal_replays_s)}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--env", default="rllm_train.default_task:rllm_train/Arithmetic-v0")
    parser.add_argument("--steps", type=int, default=4, help="steps, the first one a warm-up")
    parser.add_argument(
        "--repeats", type=int, default=2, help="replays of each step per side (the fastest counts)"
    )
    parser.add_argument("--json", metavar="FILE", help="also write every step's numbers here")
    parser.add_argument(
        "--threads",
        type=int,
        help="torch CPU threads (default: torch's); 1 steadies timings on a busy shared machine",
    )
    parser.add_argument("overrides", nargs="*", help="config overrides, section.key=value")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
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
    unsupported = {
        "rollout.max_turns": config.rollout.max_turns != 1,
        "algorithm.name": config.algorithm.name != "grpo",
        "trainer.ppo_epochs": config.trainer.ppo_epochs != 1,
        "algorithm.kl_coef": config.algorithm.kl_coef != 0,
    }
    if any(unsupported.values()):
        keys = ", ".join(key for key, bad in unsupported.items() if bad)
        parser.error(
            f"the minimal step is single-turn, on-policy GRPO without KL; unsupported: {keys}"
        )
    trainer = NativeTrainer(config)
    print(TABLE_HEADER + "\n" + "-" * len(TABLE_HEADER), flush=True)
    reports = []
    for step in range(args.steps):
        reports.append(run_step(trainer, step, args.repeats))
        print(table_row(reports[-1], warm_up=step == 0 and args.steps > 1), flush=True)
    result = summary(reports, args.model, trainer.optimizer)
    print(json.dumps(result))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"summary": result, "steps": [asdict(r) for r in reports]}, handle, indent=1)


if __name__ == "__main__":
    main()
