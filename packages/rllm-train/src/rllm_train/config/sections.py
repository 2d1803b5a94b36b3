"""The sections of the training config: one dataclass each, with their defaults.

The defaults are the embedded default run. :mod:`~rllm_train.config.loading` fills them from
YAML and overrides, :mod:`~rllm_train.config.validation` checks them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from rllm_train.config.compaction import CompactionConfig
from rllm_train.config.curriculum import CurriculumConfig
from rllm_train.config.distill import DistillConfig
from rllm_train.config.reward import RewardConfig
from rllm_train.config.rollout_correction import RolloutCorrectionConfig
from rllm_train.config.tree import TreeConfig
from rllm_train.config.verl_section import VerlOptions
from rllm_train.run.algorithm import ALGORITHM_NAMES

ALGORITHMS = ALGORITHM_NAMES  # the algorithm.name choices (rllm_train.run.algorithm)
BACKENDS = ("native", "verl")
SEQUENCE_MODES = ("trajectory", "step")
DTYPES = ("auto", "float32", "bfloat16", "float16")
ROLLOUT_DISPATCH = ("lockstep", "async")
EXECUTORS = ("inline", "ray")
ROLLOUT_MODES = ("sync", "async")
ROLLOUT_ENGINES = ("auto", "local", "process", "llamacpp", "vllm")


class ConfigError(ValueError):
    """A bad key or value in the training config (the message names it)."""


@dataclass
class ModelConfig:
    name: str = "smollm2"  # "smollm2", "tiny" or a local Hugging Face model directory
    dtype: str = "auto"  # auto = bfloat16 on CUDA, float32 on CPU
    # > 0 trains LoRA adapters (peft) instead of all weights; 0: full fine-tuning. The default
    # (rank 16 on the attention projections) gave the main job 1.3-1.5x the held-out gain per
    # minute of full fine-tuning on 2 cores (docs/training/native.md).
    lora_rank: int = 16
    lora_alpha: int = 32
    lora_target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj"]
    )
    gradient_checkpointing: bool = False
    # A trainer checkpoint to start from (--init-from): a run's output dir, its checkpoints/
    # dir, a checkpoints/step_N dir or a state.pt. Its trained weights replace the model's
    # before the first step (RL after an SFT run); the optimizer and step count start afresh.
    init_from: str = ""


@dataclass
class EnvConfig:
    # Any Gymnasium id; "pkg.module:ns/Name-vN" imports the registering module first.
    id: str = "rllm/RunningTotal-v0"  # the embedded default task (rllm_envs.running_total)
    kwargs: dict[str, Any] = field(default_factory=dict)
    agent: str = ""  # "module:Class" of a BaseAgent; empty = the agent registered for the env
    # Keyword arguments the agent is made with (AgentTrainer's agent_args land here), on top of
    # the trainer's defaults for the env; env.system_prompt fills in "system_prompt".
    agent_args: dict[str, Any] = field(default_factory=dict)
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
    # as JSON on stdin; its last stdout line is its answer, or a JSON object with a reward). It
    # plays task rows (data.train, or the env's shipped train split); an answer it returns is
    # graded by the env.
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
    # Model turns per episode; 0: the env's own limit (its max_turns, or the max_episode_steps
    # it was registered with; 8 where it states none), worked out once when the run is set up.
    max_turns: int = 0
    max_response_tokens: int = 12  # per turn
    max_prompt_tokens: int = 1024  # the whole conversation; longer episodes stop (or compact)
    # What a conversation past max_prompt_tokens does: end (policy=none), or compact its context
    # and go on (config/compaction.py, docs/training/compaction.md).
    compaction: CompactionConfig = field(default_factory=CompactionConfig)
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
    # re-exported after each update (docs/training/weight-sync.md). vllm: vLLM (AsyncLLM; its
    # CPU build on a CPU), its engine core and worker in processes of their own, full weights
    # (or the LoRA adapter) loaded by name after each update. Validation always plays the
    # trained weights. auto: llamacpp where it can play the run and was measured fastest (the
    # embedded model on a CPU, native backend, BaseAgent episodes played inline, no tree), else
    # local; worked out once when the run is set up (run.defaults.resolve_engine).
    engine: str = "auto"
    engine_slots: int = 0  # llamacpp: sequences decoding together, 0 = the rollout batch size
    # The engine apart's CPU threads (0: local every core, as the trainer's; process half the
    # cores; llamacpp every core; vllm every core in sync mode, half the cores in async mode,
    # the update then held to the other half unless trainer.cpu_threads says otherwise);
    # with engine_replicas, divided among the replicas (at least one each)
    engine_threads: int = 0
    # How many engines apart generate the training episodes (process, llamacpp, vllm, or local
    # in async mode), each sent every new version before it plays on it. A conversation's turns
    # stay on the replica that served its first; other requests go to the replica with the
    # fewest in flight (native/replicas.py, docs/training/native.md). 1: the one engine.
    engine_replicas: int = 1
    # vllm: settings of the engine (rllm_agents.engines.vllm.config.VLLMSettings keywords, e.g.
    # rollout.engine_options.dtype=bfloat16, .kv_cache_gib=1, .sync_pause=keep; other names
    # go to vLLM's engine arguments). sync_pause is what a weight push does to the requests
    # running when it comes, i.e. with partial_rollouts: wait (they finish on the old weights),
    # abort (they start again on the new ones) or keep (they carry on with the new ones).
    engine_options: dict[str, Any] = field(default_factory=dict)
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
    # PPO's value function learns at trainer.lr times this (native: the value head's own
    # optimizer group; verl: its critic model's learning rate).
    critic_lr_scale: float = 10.0
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
    steps: int = 20
    # 0: the method's own (run.defaults.resolve_lr): 1e-3 for a LoRA, 2e-5 for full fine-tuning.
    lr: float = 0.0
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
    # Checkpoints kept (the newest): one is all --resume needs, and each holds the trainable
    # weights and the optimizer's state (1.6 GB for the 135M embedded model, fully trained).
    keep_checkpoints: int = 1
    val_every: int = 0  # 0 = no validation (but see validate_held_out)
    val_tasks: int = 32
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
    # A step whose failed episodes (an infrastructure failure, a crashed program or engine:
    # not a zero reward) are more than this share of its episodes stops the run with an error
    # (1 = never stop).
    max_failure_rate: float = 0.5


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
    distill: DistillConfig = field(default_factory=DistillConfig)  # config/distill.py
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    verl: VerlOptions = field(default_factory=VerlOptions)  # used by the verl backend only

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
