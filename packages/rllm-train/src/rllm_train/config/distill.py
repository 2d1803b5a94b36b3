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
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rllm_train.config import TrainConfig

LOCAL = "local"
# The engines that serve the teacher's log-probs of a given token sequence.
TEACHER_ENGINES = (LOCAL,)
# Engines the rest of rllm knows, and why none of them can be the teacher yet: the teacher has
# to score tokens it is given (prompt log-probs), while these return log-probs only of the
# tokens they sample themselves.
UNSERVED_TEACHER_ENGINES = {
    "process": "the process engine returns log-probs of the tokens it samples, not of a given "
    "sequence",
    "vllm": "rllm's vLLM engine returns log-probs of the tokens it samples; vLLM's "
    "prompt_logprobs is not wired to it",
    "llamacpp": "rllm's llama.cpp engine returns log-probs of the tokens it samples, not of a "
    "given sequence",
    "openai": "OpenAI-compatible servers give prompt log-probs only through server-specific "
    "options (echo, prompt_logprobs), which rllm's client does not send",
}


@dataclass
class DistillConfig:
    # The teacher: any model --model accepts (smollm2, tiny, a local Hugging Face model
    # folder) or an rllm-train run folder (its latest checkpoint; a checkpoints/step_N folder
    # for another one). Empty: no distillation. It must share the student's tokenizer; its
    # chat template may differ (it scores the student's rendering of each conversation).
    teacher: str = ""
    # How much of the teacher's advantage is added, per token: advantage = the algorithm's
    # advantage + weight * (log p_teacher - log p_student). With --algorithm distill the
    # algorithm's share is 0.
    weight: float = 1.0
    engine: str = LOCAL  # what serves the teacher: transformers in the trainer's process

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
    if section.engine in UNSERVED_TEACHER_ENGINES:
        problems.append(
            f"distill.engine: {section.engine} cannot serve the teacher: "
            f"{UNSERVED_TEACHER_ENGINES[section.engine]}; the teacher runs with transformers in "
            f"the trainer's process (distill.engine={LOCAL})"
        )
    elif section.engine not in TEACHER_ENGINES:
        problems.append(
            f"distill.engine: {section.engine!r} is not one of {', '.join(TEACHER_ENGINES)}"
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
