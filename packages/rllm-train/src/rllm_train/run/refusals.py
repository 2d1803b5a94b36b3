"""What each backend cannot honour: one table of rules, each with its key and its reason.

A rule applies to one backend. :func:`refusals` lists, for a config and a backend, every rule
that applies; the config's validation asks it for ``trainer.backend`` (so ``rllm-train`` stops
before the run folder is claimed), and each backend asks it again for itself when handed a
config in code (``spec_from_config``, ``NativeTrainer``). A message starts with the key to
change and says why, and what to do instead.

Plain functions of the config: nothing here imports a backend.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rllm_train.run.algorithm import algorithm


@dataclass(frozen=True)
class Refusal:
    """A setting `backend` cannot honour: when `applies`, `reason` says why."""

    backend: str
    applies: Callable[[Any], bool]
    reason: Callable[[Any], str]


def _algorithm_elsewhere(backend: str) -> Refusal:
    def reason(config: Any) -> str:
        entry = algorithm(config.algorithm.name)
        runs_on = " or ".join(f"--backend {name}" for name in sorted(entry.backends))
        return f"algorithm.name: {entry.name} runs on {runs_on} only: {entry.refused[backend]}"

    return Refusal(backend, lambda c: not algorithm(c.algorithm.name).runs_on(backend), reason)


def _plays_apart(config: Any) -> bool:
    # auto is local wherever an engine apart cannot play (run.defaults.resolve_engine).
    return config.rollout.mode == "async" or config.rollout.engine not in ("local", "auto")


def _multiagent(config: Any) -> bool:
    from rllm_agents.cli.eval_multiagent import multiagent_env_module

    return multiagent_env_module(config.env.id) is not None


def _defined_in_main(path: str) -> bool:
    return path.partition(":")[0] == "__main__"


def _default_rollout_correction(config: Any) -> bool:
    from rllm_train.config.rollout_correction import RolloutCorrectionConfig

    return config.algorithm.rollout_correction == RolloutCorrectionConfig()


VERL = "verl"
REFUSALS: tuple[Refusal, ...] = (
    _algorithm_elsewhere("native"),
    _algorithm_elsewhere(VERL),
    Refusal(
        VERL,
        lambda c: bool(c.model.init_from),
        lambda c: (
            "model.init_from: names a native trainer checkpoint, which the verl backend "
            "does not load; verl starts from a Hugging Face model directory (model.name)"
        ),
    ),
    Refusal(
        VERL,
        lambda c: c.rollout.compaction.enabled,
        lambda c: (
            "rollout.compaction.policy: verl's agent loop makes one training sequence per "
            "sample, and a compacted episode is several (each compaction starts one); use "
            "--backend native, or policy=none (an episode past the budget then ends)"
        ),
    ),
    Refusal(
        VERL,
        # --algorithm distill itself is refused by its table entry (rllm_train.run.algorithm).
        lambda c: c.distill.on and algorithm(c.algorithm.name).runs_on(VERL),
        lambda c: (
            "distill.teacher: the teacher scores the student's tokens in the native trainer's "
            "step; verl 0.9.1's own on-policy distillation (a teacher served by vLLM or SGLang on "
            "GPUs of its own) is not wired to rllm's verl backend: use --backend native"
        ),
    ),
    Refusal(
        VERL,
        lambda c: c.rollout.executor == "ray",
        lambda c: (
            "rollout.executor=ray: the verl backend runs its agent loops on its own Ray "
            "workers; rollout.executor is for the native backend"
        ),
    ),
    Refusal(
        VERL,
        _plays_apart,
        lambda c: (
            "rollout.mode / rollout.engine: the verl backend schedules its own rollouts "
            "(verl.mode=one_step_off or fully_async are its asynchronous modes)"
        ),
    ),
    Refusal(
        VERL,
        lambda c: c.rollout.engine_replicas > 1,
        lambda c: (
            "rollout.engine_replicas: replicas of the native trainer's engine apart; the verl "
            "backend starts its own rollout replicas, one per rollout server on its GPUs "
            "(verl.rollout_gpus_per_node, verl.tensor_parallel_size)"
        ),
    ),
    Refusal(
        VERL,
        lambda c: c.reward.judge.on,
        lambda c: (
            "reward.judge.mode: the judge scores episodes in the native trainer's step; "
            "verl's trainer computes its rewards in its own workers, where it is not wired in: use "
            "--backend native"
        ),
    ),
    Refusal(
        VERL,
        lambda c: c.rollout.tree.enabled,
        lambda c: (
            "rollout.tree.enabled: tree rollouts are played by the native trainer; the "
            "verl backend plays its own rollouts"
        ),
    ),
    Refusal(
        VERL,
        lambda c: c.curriculum.weighted,
        lambda c: (
            f"curriculum.kind={c.curriculum.kind}: the verl backend's tasks are written "
            "out before it starts (its data rows), while a weighted curriculum draws each step's "
            "tasks from the successes measured so far; use --backend native or "
            "curriculum.kind=uniform"
        ),
    ),
    Refusal(
        VERL,
        lambda c: c.algorithm.sequence_mode != "trajectory",
        lambda c: (
            "algorithm.sequence_mode: verl's agent loop trains one sequence per episode; "
            f"{c.algorithm.sequence_mode!r} is native-backend only (set it to 'trajectory')"
        ),
    ),
    Refusal(
        VERL,
        lambda c: c.trainer.save_episodes,
        lambda c: (
            "trainer.save_episodes: the native backend writes each step's sampled "
            "episodes; verl's agent loop keeps its samples inside verl's batches (use --backend "
            "native, or rllm-eval --output for recorded episodes)"
        ),
    ),
    Refusal(
        VERL,
        lambda c: not _default_rollout_correction(c),
        lambda c: (
            "algorithm.rollout_correction: the native backend's section; the verl backend "
            "corrects with verl's own settings: verl.rollout_is and verl.rollout_is_threshold"
        ),
    ),
    Refusal(
        VERL,
        lambda c: _defined_in_main(c.env.agent) or _defined_in_main(c.env.entry_point),
        lambda c: (
            "env.agent / env.entry_point: a class defined in the script being run "
            "(__main__) cannot be imported by verl's workers, which rebuild the agent and the env "
            "from their import paths; move it into a module"
        ),
    ),
    # Last: it imports the env's module to tell a multi-agent env from a Gymnasium id.
    Refusal(
        VERL,
        _multiagent,
        lambda c: (
            f"env.id: {c.env.id!r} is a multi-agent env; multi-agent training runs on the "
            "native backend only (--backend native): verl's agent loop returns one sequence per "
            "sample, while a game yields one trajectory per seat, each with its own reward and role "
            "group"
        ),
    ),
)


def refusals(config: Any, backend: str) -> list[str]:
    """Why `backend` cannot run `config`, one message per rule that applies (empty: it can)."""
    return [
        rule.reason(config) for rule in REFUSALS if rule.backend == backend and rule.applies(config)
    ]
