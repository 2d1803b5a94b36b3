"""``distill``: on-policy distillation, a teacher's log-probs as a dense reward
(``rllm_train.native.distill``, docs/training/distill.md).

The student samples its own episodes; a teacher model scores every token the student
generated, and each such token gets the advantage ``log p_teacher(x_t) - log p_student(x_t)``
(minus the one-sample estimate of the per-token reverse KL). ``--algorithm distill`` trains on
that alone; any RL algorithm with ``distill.teacher`` set adds ``distill.weight`` times it to
its own advantages.

Only plain-Python checks live here (reading a config loads no model); the teacher's folder, its
tokenizer and its weights are checked and loaded by :mod:`rllm_train.native.teacher`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rllm_train.config import TrainConfig

LOCAL = "local"
OPENAI = "openai"
# What serves the teacher's log-probs of the student's tokens: transformers in the trainer's
# process (local), or an engine asked for the prompt log-probs of each sequence
# (rllm_agents.engines.scoring; started and closed with the trainer by
# rllm_train.native.served_teacher, except an openai server, which is the user's).
TEACHER_ENGINES = (LOCAL, "process", "vllm", "llamacpp", OPENAI)


@dataclass
class DistillConfig:
    # The teacher: any model --model accepts (smollm2, tiny, a local Hugging Face model
    # folder) or an rllm-train run folder (its latest checkpoint; a checkpoints/step_N folder
    # for another one). Empty: no distillation. It must share the student's tokenizer; its
    # chat template may differ (it scores the student's rendering of each conversation).
    # With engine=openai the server's model is the teacher, and this names its tokenizer (a
    # model or model folder with the same vocabulary), which is checked against the student's.
    teacher: str = ""
    # How much of the teacher's advantage is added, per token: advantage = the algorithm's
    # advantage + weight * (log p_teacher - log p_student). With --algorithm distill the
    # algorithm's share is 0.
    weight: float = 1.0
    # What serves the teacher: local (transformers in the trainer's process, one forward pass
    # per micro-batch); process (the same in a child process); vllm (vLLM, its engine core a
    # child process); llamacpp (llama.cpp in the trainer's process, on an F16 GGUF: a
    # SmolLM2-shaped teacher); openai (a server already running at base_url that echoes
    # prompt log-probs: vLLM's, or llama-cpp-python's). vllm serves a run folder's teacher
    # from OUTPUT/teacher, written at the start and removed at the end.
    engine: str = LOCAL
    base_url: str = ""  # openai: the server (http://host:port/v1)
    model: str = ""  # openai: the served model's name (empty: the first the server lists)
    api_key_env: str = ""  # openai: the environment variable that holds the API key, if any
    # openai: requests in flight at the server at once; the rest wait in the trainer, off the
    # request timeout (0: no limit; llama-cpp-python's server answers one at a time: 1).
    slots: int = 0
    # vllm: settings of the teacher's engine (VLLMSettings keywords, as rollout.engine_options;
    # other names go to vLLM's engine arguments), e.g. a share of a GPU the trainer also uses:
    # distill.engine_options.gpu_memory_utilization=0.3, or .dtype=float32 on a CPU.
    engine_options: dict[str, Any] = field(default_factory=dict)

    @property
    def on(self) -> bool:
        return bool(self.teacher.strip())


def distill_problems(config: TrainConfig) -> list[str]:
    """What is wrong with the ``distill`` section of `config`, each naming its key."""
    from rllm_train.run.algorithm import algorithm, names_where

    section = config.distill
    entry = algorithm(config.algorithm.name)
    if entry.teacher_only and not section.on:
        return [
            "distill.teacher: --algorithm distill needs a teacher to score the student's tokens: "
            "--teacher NAME|PATH|RUN (smollm2, tiny, a Hugging Face model folder or an "
            "rllm-train run folder)"
        ]
    if not section.on:
        return []
    problems = []
    if section.engine not in TEACHER_ENGINES:
        problems.append(
            f"distill.engine: {section.engine!r} is not one of {', '.join(TEACHER_ENGINES)}"
        )
    if section.engine == OPENAI and not section.base_url:
        problems.append(
            "distill.base_url: distill.engine=openai scores with a server already running; "
            "give its URL (http://host:port/v1)"
        )
    if section.slots < 0:
        problems.append(f"distill.slots: must be 0 (no limit) or more, got {section.slots}")
    if section.engine_options and section.engine != "vllm":
        problems.append(
            f"distill.engine_options: settings of distill.engine=vllm, got {section.engine}"
        )
    if not math.isfinite(section.weight) or section.weight <= 0:
        problems.append(
            f"distill.weight: the teacher's share of the advantage must be above 0, got "
            f"{section.weight} (leave distill.teacher empty for no distillation)"
        )
    if not entry.plays_tasks:
        rl = names_where(lambda a: a.plays_tasks and a.runs_on("native"))
        problems.append(
            f"distill.teacher: --algorithm {entry.name} trains on recorded episodes, while a "
            f"teacher scores the student's own samples; use it with {', '.join(rl)}"
        )
    return problems
