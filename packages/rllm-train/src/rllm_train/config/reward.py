"""``reward.judge``: a judge model scores the training episodes (docs/agents/judge.md).

With ``mode`` pointwise (each episode alone) or group (the ``rollout.n`` episodes of a task in
one prompt, scored relative to each other), the native trainer asks a judge model for a score
on 0..1 per episode after each step's episodes are played and before their advantages are
computed; the score replaces the env's reward or is added to it. Its engine is one of ours:
llama.cpp servers (the default: the embedded SmolLM2), a transformers model in the trainer's
process, or any OpenAI-compatible server.

Only plain-Python checks live here (reading a config loads no model); the judge itself is made
by :mod:`rllm_train.native.judging`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from rllm_agents.rewards.judge_prompt import MAX_SCALE

JUDGE_MODES = ("off", "pointwise", "group")
JUDGE_ENGINES = ("llamacpp", "local", "openai")
REWARD_USES = ("replace", "add")
OUT_OF_RANGE = ("clip", "refuse")
AUTO = "auto"
CONSTRAINTS = (AUTO, "off", "json_object", "json_schema")
# What constrain=auto asks each engine for: llama.cpp's server builds a grammar from a
# json_object schema; OpenAI-style servers take json_schema; transformers constrains nothing.
AUTO_CONSTRAINT = {"llamacpp": "json_object", "openai": "json_schema", "local": "off"}


@dataclass
class JudgeConfig:
    # off | pointwise (one prompt per episode) | group (one prompt per task: its rollout.n
    # episodes side by side, scored against each other).
    mode: str = "off"
    # llamacpp: llama.cpp servers started for the run; local: transformers in the trainer's
    # process, on its device; openai: a model already served at base_url.
    engine: str = "llamacpp"
    # llamacpp: smollm2 or a .gguf path; local: smollm2, tiny or a Hugging Face model
    # directory; openai: the served model's name.
    model: str = "smollm2"
    base_url: str = ""  # openai: the server (http://host:port/v1)
    api_key_env: str = ""  # openai: the environment variable that holds the API key, if any
    # llamacpp: servers side by side, each answering one request at a time on its share of
    # the cores; 0: one per core, at most 4 (as rllm-eval runs them). One server on every core
    # was several times slower on a busy machine (its threads wait for each other).
    slots: int = 0
    rubric: str = ""  # what a good episode is; empty: rllm_agents.rewards.DEFAULT_RUBRIC
    rubric_file: str = ""  # a text file holding the rubric (instead of rubric)
    prompt_file: str = ""  # a YAML file with templates: system, pointwise, group (any of them)
    # replace: the reward is weight * score; add: the env's reward + weight * score.
    use: str = "replace"
    weight: float = 1.0
    # On 0..1: the score of an episode the judge's reply gives no usable score for (the reply
    # did not parse); such replies are counted (judge/parse_failures) and logged.
    default_score: float = 0.0
    out_of_range: str = "clip"  # a score outside 0..scale: clip it, or refuse it (default_score)
    scale: int = 10  # the judge writes whole numbers 0..scale; the score is that / scale
    # How replies are held to the JSON shape asked for: auto (json_object on llamacpp,
    # json_schema on openai, nothing on local), off, json_object or json_schema.
    constrain: str = AUTO
    temperature: float = 0.0
    max_tokens: int = 128  # of the judge's reply
    max_chars: int = 2000  # per turn of a transcript shown to the judge (head and tail kept)

    @property
    def on(self) -> bool:
        return self.mode != "off"


@dataclass
class RewardConfig:
    judge: JudgeConfig = field(default_factory=JudgeConfig)


def check_judge(section: JudgeConfig, where: str) -> list[str]:
    """What is wrong with the judge section, one sentence per problem, each naming its key."""
    problems = []
    choices = {
        "mode": JUDGE_MODES,
        "engine": JUDGE_ENGINES,
        "use": REWARD_USES,
        "out_of_range": OUT_OF_RANGE,
        "constrain": CONSTRAINTS,
    }
    for key, allowed in choices.items():
        if getattr(section, key) not in allowed:
            problems.append(
                f"{where}.{key}: {getattr(section, key)!r} is not one of {', '.join(allowed)}"
            )
    if not section.on:
        return problems
    if section.rubric.strip() and section.rubric_file:
        problems.append(f"{where}.rubric / {where}.rubric_file: give the rubric once, not both")
    if section.rubric_file and not Path(section.rubric_file).is_file():
        problems.append(f"{where}.rubric_file: no such file: {section.rubric_file}")
    if section.engine == "openai" and not section.base_url:
        problems.append(f"{where}.base_url: the openai judge engine needs the server's URL")
    if not 1 <= section.scale <= MAX_SCALE:
        problems.append(f"{where}.scale: must be from 1 to {MAX_SCALE}, got {section.scale}")
    if not 0.0 <= section.default_score <= 1.0:
        problems.append(f"{where}.default_score: must be from 0 to 1, got {section.default_score}")
    if not math.isfinite(section.weight):
        problems.append(f"{where}.weight: must be a finite number, got {section.weight}")
    if section.slots < 0:
        problems.append(f"{where}.slots: must be 0 (one per core) or more, got {section.slots}")
    if section.max_tokens < 1:
        problems.append(f"{where}.max_tokens: must be at least 1, got {section.max_tokens}")
    if section.temperature < 0:
        problems.append(f"{where}.temperature: must be 0 or more, got {section.temperature}")
    if section.max_chars < 0:
        problems.append(f"{where}.max_chars: must be 0 (no limit) or more, got {section.max_chars}")
    if section.prompt_file:
        from rllm_agents.rewards.judge_prompt import JudgePrompt

        try:
            JudgePrompt.from_file(section.prompt_file)
        except ValueError as error:
            problems.append(f"{where}.prompt_file: {error}")
    return problems
