"""How long a native training step takes: against the rollout code it replaced, and against a
hand-written minimal PyTorch RL step.

Each training step runs on every side in the same process, from the same weights, optimizer
state and RNG state:

* **ours**: ``NativeTrainer.train_step`` - rollouts through the execution engine over the local
  engine (agent, chat template, env steps, token-in/token-out bookkeeping, per-request seeds,
  lockstep rounds), sequences and masks, verl's GRPO advantages, verl's clipped policy loss over
  micro-batches, gradient clipping, the trainer's AdamW step, per-step metrics.
* **before**: the same ``train_step`` with the trainer's rollouts done by the lockstep loop it had
  before they went through the execution engine (``native/rollout.py`` and ``native/sampling.py``
  as of the last commit that had them, read from git; ``--before REV`` picks another commit,
  ``--before none`` leaves the side out). It samples other tokens (it drew from the global torch
  RNG), so its batch differs a little; the generated token counts are printed.
* **minimal**: what a short hand-written GRPO step needs and nothing else - ``model.generate`` on
  the step's prompts for as many tokens as ours' longest reply (no stop token, no log-probs
  kept: the same number of decode passes ours made), then a REINFORCE-style update on *ours'*
  completions and rewards (group-normalised advantages in plain torch; for one on-policy epoch
  PPO's ratio is 1, so this is the same gradient), backward over the same micro-batches, the same
  gradient clipping and an optimizer built exactly like the trainer's, with the same state.

The minimal update must agree with ours: the benchmark reports the cosine between the two weight
changes. Each step is replayed ``--repeats`` times per side, alternating, and the fastest replay
of each side counts; the first step is a warm-up left out of the medians. Printed per step and
as medians: ``ours / minimal`` (the trainer's overhead), ``ours / before`` (the change in step
time since the rollouts moved to the execution engine).

``--rollouts`` times the rollouts alone instead - ours with lockstep rounds, ours with async
dispatch, and before - on any env, multi-turn included:

    python benchmarks/trainer_overhead.py --model smollm2 --steps 6
    python benchmarks/trainer_overhead.py --model smollm2 --rollouts --env rllm/FrozenLake-v0 \
        rollout.max_turns=4 rollout.max_response_tokens=24
"""

from __future__ import annotations

import argparse
import copy
import importlib
import inspect
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from types import ModuleType

import torch
from rllm_train.config import build_config
from rllm_train.native.sampler import ExecutionSampler, PolicyServing, Rollout
from rllm_train.native.trainer import NativeTrainer

REPO = Path(__file__).resolve().parents[1]
NATIVE = "packages/rllm-train/src/rllm_train/native"
BEFORE_FILES = ("rollout.py", "sampling.py")  # the lockstep rollout loop and its sampler


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
    ours_tokens: int  # tokens generated in the step
    minimal_s: float
    minimal_generate_s: float
    minimal_forward_backward_s: float
    minimal_optimizer_s: float
    ratio: float
    ratio_without_optimizer: float
    ours_cpu_s: float
    minimal_cpu_s: float
    cpu_ratio: float
    update_cosine: float
    before_s: float | None = None
    before_generate_s: float | None = None
    before_forward_backward_s: float | None = None
    before_tokens: int | None = None
    ratio_to_before: float | None = None
    ours_replays_s: tuple[float, ...] = ()  # every replay, to see how noisy the machine was
    minimal_replays_s: tuple[float, ...] = ()
    before_replays_s: tuple[float, ...] = ()


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


def minimal_generate(model, prompts, rollout, new_tokens, pad_id) -> list[list[int]]:
    """`new_tokens` sampled tokens per prompt, as plain ``generate`` gives them (no stop)."""
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
            min_new_tokens=new_tokens,
            max_new_tokens=new_tokens,
            do_sample=not greedy,
            temperature=None if greedy else rollout.temperature,
            top_p=None if greedy else rollout.top_p,
            top_k=None,
            pad_token_id=pad_id,
        )
    return output[:, width:].tolist()


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
    """(MinimalTimes, weights after) of the minimal step from `start` (see the module doc)."""
    model, device, config = trainer.model, trainer.device, trainer.config
    twin = twin_optimizer(trainer.optimizer)
    restore(model, start, twin)
    prompts = [list(e.trajectories[0].prompt_ids) for e in episodes]
    completions = [list(e.trajectories[0].response_ids) for e in episodes]
    decode_passes = max(len(completion) for completion in completions)
    model.eval()
    _, generate_s, generate_cpu_s = timed(
        device,
        lambda: minimal_generate(model, prompts, config.rollout, decode_passes, trainer.pad_id),
    )
    # Ours' completions and the rewards the env gave them (its cost counts as ours).
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
    return times, clone_weights(model)


def steps_of(episode):
    return [step for trajectory in episode.trajectories for step in trajectory.steps]


def generated_tokens(trainer: NativeTrainer) -> int:
    return sum(len(step.response_ids) for e in trainer.last_episodes for step in steps_of(e))


def run_step(trainer: NativeTrainer, step: int, repeats: int, before=None) -> StepReport:
    """Step `step` played `repeats` times by each side, alternating; the fastest of each.

    Every replay starts from the same weights, optimizer state and RNG state, so each one
    does exactly the same work; the fastest is the one least disturbed by other processes.
    `before` is the sampler of the replaced rollout code (None: that side is left out).
    """
    start = capture(trainer)
    ours = trainer.sampler
    ours_runs, minimal_runs, before_runs, cosines = [], [], [], []
    for _ in range(repeats):
        restore(trainer.model, start, trainer.optimizer)
        row, ours_s, ours_cpu_s = timed(trainer.device, lambda: trainer.train_step(step))
        ours_runs.append((ours_s, ours_cpu_s, row, generated_tokens(trainer)))
        after = capture(trainer)
        episodes = [e for e in trainer.last_episodes if e.trajectories]
        times, minimal_after = minimal_step(trainer, start, episodes)
        minimal_runs.append(times)
        cosines.append(update_cosine(start.weights, after.weights, minimal_after))
        if before is not None:
            restore(trainer.model, start, trainer.optimizer)
            trainer.sampler = before
            try:
                old_row, before_s, _ = timed(trainer.device, lambda: trainer.train_step(step))
            finally:
                trainer.sampler = ours
            before_runs.append((before_s, old_row, generated_tokens(trainer)))
    restore(trainer.model, after, trainer.optimizer)  # the trainer goes on from its own update
    ours_s, _, row, ours_tokens = min(ours_runs, key=lambda run: run[0])
    ours_cpu_s = min(run[1] for run in ours_runs)
    minimal = min(minimal_runs, key=lambda times: times.total_s)
    minimal_cpu_s = min(times.cpu_s for times in minimal_runs)
    before_fields = {}
    if before_runs:
        before_s, old_row, before_tokens = min(before_runs, key=lambda run: run[0])
        before_fields = {
            "before_s": before_s,
            "before_generate_s": old_row["time/generate_s"],
            "before_forward_backward_s": old_row.get("time/forward_backward_s", 0.0),
            "before_tokens": before_tokens,
            "ratio_to_before": ours_s / before_s,
            "before_replays_s": tuple(run[0] for run in before_runs),
        }
    return StepReport(
        step=step + 1,
        ours_s=ours_s,
        ours_generate_s=row["time/generate_s"],
        ours_forward_backward_s=row.get("time/forward_backward_s", 0.0),
        ours_optimizer_s=row.get("time/optimizer_s", 0.0),
        ours_tokens=ours_tokens,
        minimal_s=minimal.total_s,
        minimal_generate_s=minimal.generate_s,
        minimal_forward_backward_s=minimal.forward_backward_s,
        minimal_optimizer_s=minimal.optimizer_s,
        ratio=ours_s / minimal.total_s,
        ratio_without_optimizer=ours_s / (minimal.generate_s + minimal.forward_backward_s),
        ours_cpu_s=ours_cpu_s,
        minimal_cpu_s=minimal_cpu_s,
        cpu_ratio=ours_cpu_s / minimal_cpu_s,
        update_cosine=min(cosines),
        ours_replays_s=tuple(run[0] for run in ours_runs),
        minimal_replays_s=tuple(times.total_s for times in minimal_runs),
        **before_fields,
    )


def summary(reports: list[StepReport], model: str, optimizer: torch.optim.Optimizer) -> dict:
    measured = reports[1:] or reports  # the first step is the warm-up

    def median(key: str) -> float | None:
        values = [getattr(report, key) for report in measured]
        return statistics.median(values) if None not in values else None

    defaults = optimizer.defaults
    implementation = next((name for name in ("fused", "foreach") if defaults.get(name)), "for-loop")
    return {
        "model": model,
        "optimizer": f"{type(optimizer).__name__} ({implementation})",
        "steps_measured": len(measured),
        "ours_s_median": median("ours_s"),
        "before_s_median": median("before_s"),
        "minimal_s_median": median("minimal_s"),
        "ours_to_before_ratio_median": median("ratio_to_before"),
        "overhead_ratio_median": median("ratio"),
        "overhead_ratio_without_optimizer_median": median("ratio_without_optimizer"),
        "cpu_time_ratio_median": median("cpu_ratio"),
        "update_cosine_min": min(report.update_cosine for report in reports),
    }


TABLE_HEADER = (
    f"{'step':>4} | {'ours s':>7} {'gen':>6} {'fwd/bwd':>7} {'optim':>6} {'tok':>4} | "
    f"{'before s':>8} {'gen':>6} {'fwd/bwd':>7} {'tok':>4} | "
    f"{'minimal s':>9} {'gen':>6} {'fwd/bwd':>7} {'optim':>6} | "
    f"{'ours/before':>11} {'ours/minimal':>12} {'cpu':>5}  cos"
)


def _seconds(value: float | None, width: int) -> str:
    return f"{value:{width}.2f}" if value is not None else f"{'-':>{width}}"


def _replays(name: str, times: tuple[float, ...]) -> str:
    return f"{name} {', '.join(f'{t:.1f}' for t in times)}" if times else ""


def table_row(r: StepReport, warm_up: bool) -> str:
    replays = [
        _replays("ours", r.ours_replays_s),
        _replays("before", r.before_replays_s),
        _replays("minimal", r.minimal_replays_s),
    ]
    return (
        f"{r.step:>4} | {r.ours_s:7.2f} {r.ours_generate_s:6.2f} "
        f"{r.ours_forward_backward_s:7.2f} {r.ours_optimizer_s:6.2f} {r.ours_tokens:4d} | "
        f"{_seconds(r.before_s, 8)} {_seconds(r.before_generate_s, 6)} "
        f"{_seconds(r.before_forward_backward_s, 7)} "
        f"{r.before_tokens if r.before_tokens is not None else '-':>4} | "
        f"{r.minimal_s:9.2f} {r.minimal_generate_s:6.2f} "
        f"{r.minimal_forward_backward_s:7.2f} {r.minimal_optimizer_s:6.2f} | "
        f"{_seconds(r.ratio_to_before, 11)} {r.ratio:12.2f} {r.cpu_ratio:5.2f}  "
        f"{r.update_cosine:.4f}"
        + (" (warm-up)" if warm_up else "")
        + "  replays: "
        + "; ".join(part for part in replays if part)
    )


# -- the rollout code the trainer had before (read from git) ----------------------------------
def _git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], cwd=REPO, check=True, capture_output=True, text=True
    ).stdout


def before_revision(requested: str) -> str:
    """The commit whose rollout loop is "before": `requested`, or the last one that had it."""
    if requested != "auto":
        return requested
    paths = [f"{NATIVE}/{name}" for name in BEFORE_FILES]
    last_touch = _git("rev-list", "-1", "HEAD", "--", *paths).strip()
    if not last_touch:
        raise RuntimeError("no commit in this clone's history has the lockstep rollout loop")
    try:  # still in the tree at that commit: it is the newest version
        _git("cat-file", "-e", f"{last_touch}:{NATIVE}/{BEFORE_FILES[0]}")
        return last_touch
    except subprocess.CalledProcessError:  # that commit removed it: its parent has it
        return f"{last_touch}^"


def load_before(revision: str) -> ModuleType:
    """``rollout.py`` of `revision` as a module (with its ``sampling.py`` next to it)."""
    package = "rllm_rollout_before"
    root = Path(tempfile.mkdtemp(prefix="rllm-before-")) / package
    root.mkdir()
    (root / "__init__.py").write_text("", encoding="utf-8")
    for name in BEFORE_FILES:
        source = _git("show", f"{revision}:{NATIVE}/{name}")
        source = source.replace("rllm_train.native.sampling", f"{package}.sampling")
        (root / name).write_text(source, encoding="utf-8")
    sys.path.insert(0, str(root.parent))
    return importlib.import_module(f"{package}.rollout")


class BeforeSampler:
    """The replaced lockstep rollout loop behind the trainer's sampler seam."""

    def __init__(self, legacy: ModuleType, ours: ExecutionSampler) -> None:
        self.legacy, self.ours = legacy, ours

    def sample(self, seeds, temperature, sampling_seed) -> Rollout:
        ours, limits = self.ours, self.ours.limits
        settings = self.legacy.RolloutSettings(
            max_turns=limits.max_turns,
            max_response_tokens=limits.max_response_tokens,
            max_prompt_tokens=limits.max_prompt_tokens,
            temperature=temperature,
            top_p=limits.top_p,
        )
        timings = self.legacy.RolloutTimings()
        ours.model.eval()
        episodes = self.legacy.run_rollouts(
            ours.model,
            ours.tokenizer,
            ours.env_factory,
            ours.agent_factory,
            list(seeds),
            settings,
            timings,
        )
        return Rollout(episodes, timings.generate_seconds, timings.env_seconds)

    def close(self) -> None:
        pass


# -- rollouts alone -----------------------------------------------------------------------------
ROLLOUT_SIDES = ("lockstep", "async", "before")


def compare_rollouts(trainer: NativeTrainer, steps: int, repeats: int, before) -> None:
    """Each step's rollouts by every side (fastest of `repeats`, the sides taking turns so that
    load from other work lands on all of them alike); medians after the warm-up."""
    from rllm_train.native.trainer import step_sampling_seed, step_task_seeds

    rollout, run_seed = trainer.config.rollout, trainer.config.trainer.seed
    ours = trainer.sampler
    samplers = {"lockstep": ours}
    samplers["async"] = ExecutionSampler(
        PolicyServing.on_model(
            ours.model, ours.tokenizer, max_batch_size=ours.engine.max_batch_size
        ),
        ours.env_factory,
        ours.agent_factory,
        replace(ours.limits, dispatch="async"),
    )
    if before is not None:
        samplers["before"] = before
    times: dict[str, list[float]] = {side: [] for side in samplers}
    print(f"{'step':>4} | " + " | ".join(f"{side + ' s':>10} {'tok':>5}" for side in samplers))
    for step in range(steps):
        task_seeds = step_task_seeds(run_seed, step, rollout.tasks_per_step)
        seeds = [seed for seed in task_seeds for _ in range(rollout.n)]
        best = dict.fromkeys(samplers, float("inf"))
        tokens = dict.fromkeys(samplers, 0)
        for _ in range(repeats):
            for side, sampler in samplers.items():
                started = time.perf_counter()
                result = sampler.sample(
                    seeds, rollout.temperature, step_sampling_seed(run_seed, step)
                )
                best[side] = min(best[side], time.perf_counter() - started)
                tokens[side] = sum(
                    len(s.response_ids) for e in result.episodes for s in steps_of(e)
                )
        if step > 0 or steps == 1:
            for side in samplers:
                times[side].append(best[side])
        cells = [f"{best[side]:10.2f} {tokens[side]:5d}" for side in samplers]
        print(f"{step + 1:>4} | " + " | ".join(cells) + (" (warm-up)" if step == 0 else ""))
    samplers["async"].close()
    medians = {f"{side}_s_median": statistics.median(values) for side, values in times.items()}
    if "before_s_median" in medians:
        medians["lockstep_to_before_ratio"] = (
            medians["lockstep_s_median"] / medians["before_s_median"]
        )
    medians["lockstep_to_async_ratio"] = medians["lockstep_s_median"] / medians["async_s_median"]
    print(json.dumps(medians))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--env", default="rllm/Arithmetic-v0")
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
    parser.add_argument(
        "--before",
        default="auto",
        metavar="REV",
        help="commit of the replaced rollout loop (auto: the last one that had it; none: skip)",
    )
    parser.add_argument(
        "--rollouts",
        action="store_true",
        help="time the rollouts alone: lockstep, async and before (any env, multi-turn too)",
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
    trainer = NativeTrainer(config)
    before = None
    if args.before != "none":
        try:
            revision = before_revision(args.before)
            before = BeforeSampler(load_before(revision), trainer.sampler)
            print(f"before: the lockstep rollout loop of {revision}", flush=True)
        except (RuntimeError, OSError, subprocess.CalledProcessError, ImportError) as error:
            print(f"before: left out ({error})", flush=True)
    if args.rollouts:
        compare_rollouts(trainer, args.steps, args.repeats, before)
        trainer.close()
        return
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
    print(TABLE_HEADER + "\n" + "-" * len(TABLE_HEADER), flush=True)
    reports = []
    for step in range(args.steps):
        reports.append(run_step(trainer, step, args.repeats, before))
        print(table_row(reports[-1], warm_up=step == 0 and args.steps > 1), flush=True)
    trainer.close()
    result = summary(reports, args.model, trainer.optimizer)
    print(json.dumps(result))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"summary": result, "steps": [asdict(r) for r in reports]}, handle, indent=1)


if __name__ == "__main__":
    main()
