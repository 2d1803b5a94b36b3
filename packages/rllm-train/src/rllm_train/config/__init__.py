"""The whole training config: dataclasses, YAML files and dotted command-line overrides.

A config is built in three layers, later ones winning: the defaults below (the embedded
default run), an optional YAML file, then ``section.key=value`` overrides such as
``trainer.lr=1e-5`` or ``env.kwargs.max_turns=4``. Every key is checked against the dataclasses
and every value against the field's type *before* anything slow starts, and an error names the
bad key.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from rllm_agents.run_folder import write_atomic

from rllm_train.config.curriculum import CURRICULUM_KINDS, CurriculumConfig, check_curriculum
from rllm_train.config.reward import RewardConfig, check_judge, judge_refusals
from rllm_train.config.rollout_correction import RolloutCorrectionConfig, check_rollout_correction
from rllm_train.config.tree import TreeConfig, tree_problems
from rllm_train.verl.options import VerlOptions

ALGORITHMS = ("grpo", "rloo", "reinforce_plus_plus", "ppo", "rae", "remax", "sft")
# Algorithms one backend runs and the other cannot: name -> (backend, why the other cannot).
BACKEND_ONLY_ALGORITHMS = {
    "remax": (
        "verl",
        "ReMax's baseline is a greedy rollout of each task, which verl's trainer runs "
        "between sampling and the update",
    ),
    "sft": (
        "native",
        "fine-tuning on recorded episodes is a step of the native trainer, and verl's own "
        "SFT trainer is not wired to rllm's episodes",
    ),
}
BACKENDS = ("native", "verl")
SEQUENCE_MODES = ("trajectory", "step")
DTYPES = ("auto", "float32", "bfloat16", "float16")
ROLLOUT_DISPATCH = ("lockstep", "async")
EXECUTORS = ("inline", "ray")
ROLLOUT_MODES = ("sync", "async")
ROLLOUT_ENGINES = ("local", "process", "llamacpp")
SHIPPED_CONFIGS = Path(__file__).parent.parent / "configs"  # --config NAME finds NAME.yaml here


class ConfigError(ValueError):
    """A bad key or value in the training config (the message names it)."""


@dataclass
class ModelConfig:
    name: str = "smollm2"  # "smollm2", "tiny" or a local Hugging Face model directory
    dtype: str = "auto"  # auto = bfloat16 on CUDA, float32 on CPU
    lora_rank: int = 0  # > 0 trains LoRA adapters (peft) instead of all weights
    lora_alpha: int = 32
    lora_target_modules: list[str] = field(default_factory=lambda: ["q_proj", "v_proj"])
    gradient_checkpointing: bool = False
    # A trainer checkpoint to start from (--init-from): a run's output dir, its checkpoints/
    # dir, a checkpoints/step_N dir or a state.pt. Its trained weights replace the model's
    # before the first step (RL after an SFT run); the optimizer and step count start afresh.
    init_from: str = ""


@dataclass
class EnvConfig:
    # Any Gymnasium id; "pkg.module:ns/Name-vN" imports the registering module first.
    id: str = "rllm/Arithmetic-v0"  # the embedded default task (rllm_envs.arithmetic)
    kwargs: dict[str, Any] = field(default_factory=dict)
    agent: str = ""  # "module:Class" of a BaseAgent; empty = the agent registered for the env
    # "module:Class" of a gymnasium.Env made as Class(**kwargs) instead of gym.make(id): what
    # AgentTrainer(env_class=SomeEnvClass) records. Empty = gym.make(env.id, **kwargs).
    entry_point: str = ""
    system_prompt: str = ""  # given to the agent as its system prompt; empty = its own


@dataclass
class DataConfig:
    # The task rows to train and validate on: a registry "name:split" (rllm_envs'
    # DatasetRegistry: gsm8k:train, frozenlake:test, ... or a set you registered) or a
    # JSONL/JSON/Parquet file; each row is played with env.reset(options={"task": row}).
    # Empty train: the env draws its own tasks from the step's seeds - except that an env with
    # a shipped train/test pair (and no task choice in env.kwargs) trains on the train split.
    # Empty val: that env's held-out test split, else validation seeds drawn from the env.
    train: str = ""
    val: str = ""


@dataclass
class ProgramConfig:
    # An agent program plays the env instead of a BaseAgent (docs/agents/gateway.md): code that
    # talks to the model over the OpenAI API through a gateway recording every token. At most
    # one of: function ("module:function" or "path/to/file.py:function", an async
    # run(task, base_url, api_key) -> reward | dict) and command ("python my_agent.py": the task
    # as JSON on stdin, its result as the last line of stdout). It plays task rows (data.train,
    # or the env's shipped train split); an answer it returns is graded by the env.
    function: str = ""
    command: str = ""
    timeout: float = 600.0  # seconds one run may take (killed after); 0 = no limit
    retries: int = 1  # a run that crashed or timed out is tried again this many times

    @property
    def given(self) -> bool:
        return bool(self.function or self.command)


@dataclass
class MultiAgentConfig:
    # Used when env.id names a multi-agent (PettingZoo) env, e.g. kuhn_poker_v0; see
    # docs/training/multiagent.md. Who plays each seat ("*": every seat not named):
    #   trained                 the model being trained (on every seat: self-play)
    #   frozen                  a frozen copy of the model's starting weights
    #   frozen:<run or step dir> a frozen copy of a checkpoint's weights
    #   model:<name or dir>     another model, frozen
    #   a scripted player       random, first, tictactoe_expert, oracle_speaker, ...
    # Only the seats the trained model plays are trained on.
    seats: dict[str, str] = field(default_factory=lambda: {"*": "trained"})
    rotate: bool = False  # move the seating one seat on from task to task (first-move edge)
    max_cycles: int = 200  # parallel steps per game before it is cut (max_turns)


@dataclass
class RolloutConfig:
    # Rollouts run on rllm-agents' AgentExecutionEngine over a LocalEngine serving the trained
    # model. lockstep: the episodes' turns go to the model in rounds, one batch each (bit-for-bit
    # resumable); async: each turn as soon as its episode is ready (no wait for slow envs).
    dispatch: str = "lockstep"
    tasks_per_step: int = 4
    n: int = 4  # rollouts per task (the group GRPO/RLOO compare within)
    max_turns: int = 1
    max_response_tokens: int = 12  # per turn
    max_prompt_tokens: int = 1024  # the whole conversation; longer episodes stop
    temperature: float = 1.0
    top_p: float = 1.0
    val_temperature: float = 0.0  # 0 = greedy
    # > 1: validation also samples each task val_n times at `temperature` and reports
    # val/pass@k (k = 1, 2, 4, ... val_n) beside the greedy val/reward_mean.
    val_n: int = 1
    # inline: envs in the trainer's process; ray: on the workers of a Ray cluster (the trainer's
    # model answers them over HTTP; docs/agents/ray.md). Needs dispatch=async.
    executor: str = "inline"
    ray_address: str = ""  # empty: $RAY_ADDRESS, else a local cluster for the run
    ray_workers: int = 0  # 0: one per node that can host the env kind
    # sync: a step's episodes are played, then trained on. async: the episodes of the next
    # steps are played while this step's update runs, by an engine apart from the trained model,
    # exactly max_staleness updates behind it once under way (docs/training/async.md).
    mode: str = "sync"
    max_staleness: int = 1
    # async: a multi-turn episode in flight when new weights arrive continues on them (its
    # turns then come from several versions) instead of finishing on the ones it began with.
    partial_rollouts: bool = False
    # What generates the training episodes. local: transformers in this process (in sync mode
    # the trained model itself, in async mode a copy synced after each update). process: a
    # transformers copy in a process of its own, synced after each update (its own interpreter
    # and, on a CPU, its own threads beside the update). llamacpp: llama.cpp on the CPU, in this
    # process, decoding the episodes in one batch from an F16 GGUF export of the policy,
    # re-exported after each update (docs/training/weight-sync.md). Validation always plays
    # the trained weights.
    engine: str = "local"
    engine_slots: int = 0  # llamacpp: sequences decoding together, 0 = the rollout batch size
    # The engine apart's CPU threads (0: local every core, as the trainer's; process half the
    # cores; llamacpp every core)
    engine_threads: int = 0
    # Tree-structured GRPO: rollout.n continuations branched from a snapshot of each task's
    # episode at a branch turn, one group each (config/tree.py, docs/training/tree-grpo.md).
    tree: TreeConfig = field(default_factory=TreeConfig)


@dataclass
class AlgorithmConfig:
    name: str = "grpo"  # rae: role-conditioned baselines (rllm_train.native.role_advantages)
    sequence_mode: str = "trajectory"  # one sequence per episode, or one per agent step
    gamma: float = 1.0
    lam: float = 1.0
    norm_adv_by_std_in_grpo: bool = True
    policy_loss: str = "vanilla"  # a verl policy loss name
    clip_ratio: float = 0.2
    loss_agg_mode: str = "token-mean"
    kl_coef: float = 0.0  # > 0 adds a KL penalty to a frozen reference model
    kl_penalty: str = "low_var_kl"
    value_coef: float = 0.5  # PPO's value loss weight
    cliprange_value: float = 0.5
    rae_decay: float = 0.95  # rae: decay of each role's moving-average baseline
    # Leave sequences whose advantage is 0 on every token (e.g. a GRPO group whose samples all
    # scored the same) out of the update: the same gradient direction, less compute, and the
    # token mean taken over the sequences that teach something (as SPIRAL and DAPO do).
    drop_zero_advantage: bool = False
    # Importance weights / rejection between the rollout engine's log-probs and the trainer's
    # (verl's algorithm.rollout_correction; config/rollout_correction.py).
    rollout_correction: RolloutCorrectionConfig = field(default_factory=RolloutCorrectionConfig)


@dataclass
class SFTConfig:
    # algorithm.name=sft: fine-tune on the best recorded episodes (docs/training/sft.md).
    # rllm-eval run folders, rllm-train ones with saved episodes, or episode files (--data,
    # repeatable).
    data: list[str] = field(default_factory=list)
    min_reward: float = 1.0  # trajectories with at least this reward are trained on
    best_per_task: bool = False  # of those, only the best one of each task (and role)
    batch_size: int = 8  # sequences per step, drawn epoch by epoch in a seeded order
    # Render each turn again from its recorded messages with the trained model's chat
    # template instead of using the recorded token ids (episodes of another model, e.g. a
    # bigger one behind an API). Episodes recorded without ids are always rendered again.
    retokenize: bool = False


@dataclass
class TrainerConfig:
    backend: str = "native"
    steps: int = 16
    lr: float = 2e-5
    weight_decay: float = 0.0
    max_grad_norm: float = 1.0
    micro_batch_size: int = 8  # sequences per forward/backward; gradients accumulate
    ppo_epochs: int = 1
    seed: int = 0
    device: str = "auto"  # auto = cuda when available
    # On a CPU: the intra-op threads of the update (0: torch's default, every core). With an
    # engine in a process of its own (rollout.engine=process) the two can split the cores.
    cpu_threads: int = 0
    output: str = "runs/rllm-train"
    save_every: int = 10  # 0 = only at the end
    keep_checkpoints: int = 2
    val_every: int = 0  # 0 = no validation
    val_tasks: int = 16
    val_before_train: bool = False  # also validate before the first step (a "step 0" row)
    # With a held-out validation set (data.val, or the env's test split): validate before the
    # first step and after the last one, whatever val_every and val_before_train say.
    validate_held_out: bool = True
    resume: bool = False
    tensorboard: bool = True
    progress: bool = True
    # Write every step's sampled episodes (docs/agents/episodes.md) to OUTPUT/episodes/step_NNNN.jsonl:
    # for replay, re-scoring and SFT; off by default (they hold every token id of the run).
    save_episodes: bool = False


@dataclass
class TrainConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    data: DataConfig = field(default_factory=DataConfig)
    program: ProgramConfig = field(default_factory=ProgramConfig)
    multiagent: MultiAgentConfig = field(default_factory=MultiAgentConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    curriculum: CurriculumConfig = field(default_factory=CurriculumConfig)
    algorithm: AlgorithmConfig = field(default_factory=AlgorithmConfig)
    # A judge model's score as the reward (config/reward.py; docs/agents/judge.md).
    reward: RewardConfig = field(default_factory=RewardConfig)
    sft: SFTConfig = field(default_factory=SFTConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    verl: VerlOptions = field(default_factory=VerlOptions)  # used by the verl backend only

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# Values that must come from a fixed set: dotted key -> allowed values.
CHOICES: dict[str, tuple[str, ...]] = {
    "algorithm.name": ALGORITHMS,
    "algorithm.sequence_mode": SEQUENCE_MODES,
    "trainer.backend": BACKENDS,
    "model.dtype": DTYPES,
    "rollout.dispatch": ROLLOUT_DISPATCH,
    "rollout.executor": EXECUTORS,
    "rollout.mode": ROLLOUT_MODES,
    "rollout.engine": ROLLOUT_ENGINES,
    "curriculum.kind": CURRICULUM_KINDS,
}

# Numbers that must be positive (> 0) or non-negative (>= 0).
POSITIVE = (
    "rollout.tasks_per_step",
    "rollout.n",
    "rollout.val_n",
    "rollout.max_turns",
    "rollout.max_response_tokens",
    "rollout.max_prompt_tokens",
    "rollout.max_staleness",
    "multiagent.max_cycles",
    "trainer.steps",
    "trainer.lr",
    "trainer.micro_batch_size",
    "trainer.ppo_epochs",
    "trainer.keep_checkpoints",
    "sft.batch_size",
    "curriculum.temperature",
)
NON_NEGATIVE = (
    "rollout.temperature",
    "rollout.val_temperature",
    "rollout.ray_workers",
    "rollout.engine_slots",
    "rollout.engine_threads",
    "program.timeout",
    "program.retries",
    "algorithm.kl_coef",
    "model.lora_rank",
    "trainer.save_every",
    "trainer.val_every",
    "trainer.val_tasks",
    "trainer.max_grad_norm",
    "trainer.cpu_threads",
    "curriculum.seed_pool",
)


def _field_types(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    return {f.name: hints[f.name] for f in dataclasses.fields(cls)}


def _coerce(key: str, value: Any, annotation: Any) -> Any:
    """`value` as the field's type, or a ConfigError naming `key`."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(annotation) if a is not type(None)]
        if value is None:
            return None
        for option in options[:-1]:  # the first type that takes the value (float | str: 2.0)
            try:
                return _coerce(key, value, option)
            except ConfigError:
                continue
        return _coerce(key, value, options[-1])
    if origin is dict or annotation is dict:
        if isinstance(value, str):
            value = read_yaml(value, key) if value.strip() else {}
        if not isinstance(value, dict):
            raise ConfigError(f"{key}: expected a mapping, got {value!r}")
        return dict(value)
    if origin is list:
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            value = [value]  # branch_turns=2: a list of one
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{key}: expected a list, got {value!r}")
        item_type = (typing.get_args(annotation) or (Any,))[0]
        if item_type in (int, float, str):  # "1,2" from the command line: numbers, not text
            return [_coerce(key, item, item_type) for item in value]
        return list(value)
    if annotation is bool:
        if isinstance(value, bool):
            return value
        words = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}
        if str(value).lower() in words:
            return words[str(value).lower()]
        raise ConfigError(f"{key}: expected true or false, got {value!r}")
    if annotation in (int, float):
        if isinstance(value, bool):
            raise ConfigError(f"{key}: expected a number, got {value!r}")
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise ConfigError(f"{key}: expected a number, got {value!r}") from None
        if annotation is int:
            if not number.is_integer():
                raise ConfigError(f"{key}: expected an integer, got {value!r}")
            return int(number)
        return number
    if annotation is str:
        if isinstance(value, (dict, list)):
            raise ConfigError(f"{key}: expected text, got {value!r}")
        if isinstance(value, bool):
            # YAML reads a bare `off`/`on` (and `no`/`yes`) as a boolean: for a text setting
            # such as verl.rollout_is=off that is the switch's word, not "False".
            return "on" if value else "off"
        return str(value)
    return value


def _set(config: TrainConfig, dotted: str, value: Any) -> None:
    section_name, _, key = dotted.partition(".")
    sections = _field_types(TrainConfig)
    if section_name not in sections:
        raise ConfigError(
            f"unknown config key {dotted!r}: no section {section_name!r} "
            f"(sections: {', '.join(sections)})"
        )
    _set_in(getattr(config, section_name), section_name, key, value, dotted)


def _set_in(section: Any, where: str, key: str, value: Any, dotted: str) -> None:
    """Set `key` (maybe dotted further) of `section`, the part of the config `where` names."""
    fields = _field_types(type(section))
    name, _, rest = key.partition(".")
    if name not in fields:
        raise ConfigError(f"unknown config key {dotted!r}; {where} has: {', '.join(fields)}")
    if dataclasses.is_dataclass(fields[name]):  # a section inside a section
        inner, inner_where = getattr(section, name), f"{where}.{name}"
        if rest:
            _set_in(inner, inner_where, rest, value, dotted)
            return
        if isinstance(value, str):
            value = read_yaml(value, dotted) if value.strip() else {}
        if not isinstance(value, dict):
            raise ConfigError(f"{dotted}: expected a mapping of its keys, got {value!r}")
        for inner_key, inner_value in value.items():
            _set_in(inner, inner_where, str(inner_key), inner_value, f"{dotted}.{inner_key}")
        return
    if rest:  # a key inside a mapping field, e.g. env.kwargs.max_turns=4
        if typing.get_origin(fields[name]) is not dict:
            raise ConfigError(f"unknown config key {dotted!r}: {where}.{name} is not a mapping")
        getattr(section, name)[rest] = read_yaml(value, dotted) if isinstance(value, str) else value
        return
    setattr(section, name, _coerce(dotted, value, fields[name]))


def _flatten(data: dict[str, Any], where: str) -> list[tuple[str, Any]]:
    pairs = []
    for section, values in data.items():
        if not isinstance(values, dict):
            raise ConfigError(f"{where}: {section!r} must be a section (a mapping of keys)")
        pairs.extend((f"{section}.{key}", value) for key, value in values.items())
    return pairs


def parse_override(text: str) -> tuple[str, Any]:
    """``"trainer.lr=1e-5"`` -> ("trainer.lr", 1e-5) (the value read as YAML)."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"override {text!r} is not of the form section.key=value")
    return key.strip(), read_yaml(raw, f"override {text!r}") if raw.strip() else ""


def read_yaml(text: str, where: str) -> Any:
    """`text` parsed as YAML, or a one-line ConfigError saying where and what is wrong."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        at = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        problem = getattr(error, "problem", None) or type(error).__name__
        raise ConfigError(f"{where}: not valid YAML{at}: {problem}") from None


def config_file(name: str | Path) -> Path:
    """The YAML file `name` names: a path, or the name of a config shipped with rllm-train."""
    path = Path(name)
    if path.is_file():
        return path
    shipped = SHIPPED_CONFIGS / f"{name}.yaml"
    if shipped.is_file():
        return shipped
    names = ", ".join(sorted(p.stem for p in SHIPPED_CONFIGS.glob("*.yaml")))
    raise ConfigError(f"config file not found: {path} (shipped configs: {names or 'none'})")


def build_config(
    yaml_path: str | Path | None = None,
    overrides: list[str | tuple[str, Any]] | dict[str, Any] | None = None,
) -> TrainConfig:
    """Defaults, then the YAML file, then the overrides (``"key=value"`` texts, read as YAML,
    or ``(key, value)`` pairs taken as they are), in order; validated."""
    config = TrainConfig()
    if yaml_path is not None:
        path = config_file(yaml_path)
        data = read_yaml(path.read_text(encoding="utf-8"), str(path)) or {}
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: expected a mapping of sections at the top level")
        for key, value in _flatten(data, str(path)):
            _set(config, key, value)
    if isinstance(overrides, dict):
        pairs = list(overrides.items())
    else:
        pairs = [
            item if isinstance(item, tuple) else parse_override(item) for item in overrides or []
        ]
    for key, value in pairs:
        _set(config, key, value)
    validate(config)
    return config


def from_mapping(sections: Any) -> TrainConfig:
    """A config from a mapping of sections - a plain dict, or the DictConfig a
    ``@hydra.main(config_path="pkg://rllm_train.config", config_name="agent_trainer")`` entry
    point receives (its command-line overrides already applied by Hydra); validated."""
    if not isinstance(sections, dict):
        from omegaconf import OmegaConf

        sections = OmegaConf.to_container(sections, resolve=True)
    return build_config(overrides=dict(_flatten(dict(sections), "config")))


def get_value(config: TrainConfig, dotted: str) -> Any:
    section, _, key = dotted.partition(".")
    return getattr(getattr(config, section), key)


# Values a key took in an earlier version, with the setting that now does their job.
RETIRED_VALUES = {
    ("rollout.engine", "lockstep"): "rollout.dispatch=lockstep",
    ("rollout.engine", "execution"): "rollout.dispatch=lockstep",
}


def validate(config: TrainConfig) -> None:
    for (key, value), successor in RETIRED_VALUES.items():
        if get_value(config, key) == value:
            raise ConfigError(
                f"{key}={value}: the trainer's own rollout loop is gone, and {key} now picks "
                f"the generating engine ({', '.join(CHOICES[key])}); use {successor}"
            )
    for key, allowed in CHOICES.items():
        if get_value(config, key) not in allowed:
            raise ConfigError(
                f"{key}: {get_value(config, key)!r} is not one of {', '.join(allowed)}"
            )
    for key in POSITIVE:
        if not get_value(config, key) > 0:
            raise ConfigError(f"{key}: must be greater than 0, got {get_value(config, key)!r}")
    for key in NON_NEGATIVE:
        if get_value(config, key) < 0:
            raise ConfigError(f"{key}: must be 0 or more, got {get_value(config, key)!r}")
    if config.algorithm.name in BACKEND_ONLY_ALGORITHMS:
        backend, reason = BACKEND_ONLY_ALGORITHMS[config.algorithm.name]
        if config.trainer.backend != backend:
            raise ConfigError(
                f"algorithm.name: {config.algorithm.name} runs on --backend {backend} only: "
                f"{reason}"
            )
    _check_sft(config)
    if config.model.init_from and config.trainer.backend != "native":
        raise ConfigError(
            "model.init_from: names a native trainer checkpoint, which the verl backend does not "
            "load; verl starts from a Hugging Face model directory (model.name)"
        )
    if not config.env.id.strip():
        raise ConfigError("env.id: must name a Gymnasium environment id")
    if config.rollout.executor == "ray":
        _check_ray_rollouts(config)
    if config.program.given:
        _check_program(config)
    _check_rollout_engine(config)
    if not 0.0 <= config.algorithm.rae_decay < 1.0:
        raise ConfigError(
            f"algorithm.rae_decay: must be at least 0 and below 1, got {config.algorithm.rae_decay}"
        )
    if config.algorithm.drop_zero_advantage and (
        config.algorithm.name == "ppo" or config.algorithm.kl_coef > 0
    ):
        raise ConfigError(
            "algorithm.drop_zero_advantage: sequences without advantage still train PPO's value "
            "head and the KL penalty; use it with grpo, rloo, reinforce_plus_plus or rae and "
            "kl_coef=0"
        )
    problems = check_rollout_correction(
        config.algorithm.rollout_correction, "algorithm.rollout_correction"
    )
    problems += check_judge(config.reward.judge, "reward.judge")
    problems += judge_refusals(
        config.reward.judge,
        "reward.judge",
        backend=config.trainer.backend,
        algorithm=config.algorithm.name,
    )
    if problems:
        raise ConfigError("; ".join(problems))
    problems = tree_problems(config)
    if problems:
        raise ConfigError("; ".join(problems))
    _check_curriculum(config)
    if config.algorithm.name in ("grpo", "rloo") and config.rollout.n < 2:
        raise ConfigError(
            f"rollout.n: {config.algorithm.name} compares rollouts within a group, so it needs "
            f"at least 2 per task, got {config.rollout.n}"
        )


def _check_curriculum(config: TrainConfig) -> None:
    problems = check_curriculum(config.curriculum)
    if problems:
        raise ConfigError("; ".join(problems))
    kind = config.curriculum.kind
    if not config.curriculum.weighted:
        return
    if config.trainer.backend != "native":
        raise ConfigError(
            f"curriculum.kind={kind}: the {config.trainer.backend} backend draws its batches "
            "with its own data loader, which the curriculum does not steer; use --backend "
            "native or curriculum.kind=uniform"
        )
    if config.algorithm.name == "sft":
        raise ConfigError(
            f"curriculum.kind={kind}: --algorithm sft trains on recorded episodes and plays no "
            "tasks; leave curriculum.kind=uniform"
        )


def _check_sft(config: TrainConfig) -> None:
    if config.algorithm.name != "sft":
        if config.sft.data:
            raise ConfigError(
                f"sft.data: recorded episodes are trained on with --algorithm sft, not "
                f"{config.algorithm.name}"
            )
        return
    if not config.sft.data:
        raise ConfigError(
            "sft.data: --algorithm sft trains on recorded episodes; name them with --data "
            "RUN_FOLDER_OR_FILE (an rllm-eval --output folder or an episodes.jsonl)"
        )
    if not math.isfinite(config.sft.min_reward):
        raise ConfigError(f"sft.min_reward: must be a finite number, got {config.sft.min_reward}")


def _check_ray_rollouts(config: TrainConfig) -> None:
    if config.trainer.backend != "native":
        raise ConfigError(
            f"rollout.executor=ray: the {config.trainer.backend} backend runs its agent loops on "
            "its own Ray workers; rollout.executor is for the native backend"
        )
    if config.rollout.dispatch != "async":
        raise ConfigError(
            "rollout.executor=ray runs each episode on a Ray worker, while lockstep dispatch "
            "plays every episode's turns in one process: set rollout.dispatch=async"
        )


def _check_rollout_engine(config: TrainConfig) -> None:
    rollout = config.rollout
    apart = rollout.mode == "async" or rollout.engine != "local"
    if not apart:
        if rollout.partial_rollouts:
            raise ConfigError(
                "rollout.partial_rollouts: episodes carry over an update only in rollout.mode=async"
            )
        return
    if config.trainer.backend != "native":
        raise ConfigError(
            f"rollout.mode / rollout.engine: the {config.trainer.backend} backend schedules its "
            "own rollouts (verl.mode=one_step_off or fully_async are its asynchronous modes)"
        )
    if config.program.given:
        raise ConfigError(
            "rollout.mode / rollout.engine: an agent program is served the trained model "
            "through the gateway, synchronously; leave rollout.mode=sync, rollout.engine=local"
        )
    if rollout.executor != "inline":
        raise ConfigError(
            "rollout.mode / rollout.engine: episodes on Ray workers are played from the "
            "trained model itself; use rollout.executor=inline with an engine apart"
        )


def _check_program(config: TrainConfig) -> None:
    program = config.program
    if program.function and program.command:
        raise ConfigError(
            "program: set program.function or program.command, not both (one agent program)"
        )
    if config.rollout.executor != "inline":
        raise ConfigError(
            "rollout.executor: agent programs run beside the gateway that serves the trained "
            "model to them (in the trainer's process, or in verl's agent-loop workers); use "
            "rollout.executor=inline"
        )
    if config.env.agent:
        raise ConfigError("env.agent: an agent program plays the env; leave env.agent empty")


def save_config(config: TrainConfig, path: Path) -> None:
    # Rewritten on every resume: a kill mid-write must leave the old file whole.
    write_atomic(path, yaml.safe_dump(config.to_dict(), sort_keys=False))
