"""What a judge reads: transcripts of episodes, the prompt templates, the reply's JSON schema.

A :data:`Transcript` is an episode as turns: the task (the first observation), then the agent's
replies and the env's answers in between. The env's answer to the agent's last reply is left
out: for an env with a grader it would hand the judge the grade.

A :class:`JudgePrompt` holds three templates (Python ``str.format`` text):

* ``system``: the judge's instructions and the rubric;
* ``pointwise``: one transcript, asking for ``{"score": N}``;
* ``group``: several transcripts of the same task, asking for ``{"scores": [N1, N2, ...]}``,
  one per transcript, relative to each other.

Each may use ``{rubric}``, ``{scale}``, ``{task}``, ``{transcript}`` (pointwise),
``{transcripts}`` and ``{count}`` (group); literal braces are written ``{{`` and ``}}``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from rllm_agents.types import Episode, Step

DEFAULT_RUBRIC = (
    "The agent does what the task asks: its answer is correct, relevant and complete, and it "
    "says no more than it needs to."
)

DEFAULT_SYSTEM = (
    "You are a judge. You read what an agent was asked to do and what it replied, and you "
    "score the agent by the rubric below. A score is a whole number from 0 (does not meet the "
    "rubric at all) to {scale} (meets it fully).\n\nRubric:\n{rubric}"
)
DEFAULT_POINTWISE = (
    "{task}{transcript}\n\nScore the agent by the rubric. Answer with JSON only, in the form "
    '{{"score": N}}, where N is a whole number from 0 to {scale}.'
)
DEFAULT_GROUP = (
    "{count} agents were given the same task. Their transcripts follow.\n\n{task}{transcripts}"
    "\n\nScore each agent by the rubric, comparing them with each other: a better transcript "
    'gets a higher score. Answer with JSON only, in the form {{"scores": [N1, N2, ...]}}, '
    "with exactly {count} whole numbers from 0 to {scale}, in the order of the transcripts."
)
TEMPLATE_FIELDS = ("rubric", "scale", "task", "transcript", "transcripts", "count")
MAX_SCALE = 100


@dataclass(frozen=True)
class Turn:
    role: str  # "task", "env" or "agent"
    text: str


Transcript = tuple[Turn, ...]


def clip_text(text: str, max_chars: int) -> str:
    """`text`, or its head and tail with the middle cut out when it is longer than max_chars."""
    if max_chars <= 0 or len(text) <= max_chars:
        return text
    keep = max(max_chars - 40, 2)
    head, tail = text[: keep // 2], text[len(text) - keep // 2 :]
    return f"{head}\n[... {len(text) - 2 * (keep // 2)} characters cut ...]\n{tail}"


def as_text(value: Any) -> str:
    """An observation or action as text (a multimodal observation by its ``text`` key)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("text"), str):
        return value["text"]
    return "" if value is None else str(value)


def _step_prompt(step: Step) -> str:
    """What the agent answered in this step: the env's observation, or (a step recorded from
    an agent program's model calls) the last message before its reply."""
    if step.observation is not None:
        return as_text(step.observation)
    sent = [m for m in step.chat_completions[:-1] if m.get("role") in ("user", "tool")]
    return as_text(sent[-1].get("content")) if sent else ""


def episode_transcript(episode: Episode) -> Transcript:
    """The main trajectory of `episode` as turns (module doc)."""
    steps = episode.trajectories[0].steps if episode.trajectories else []
    turns: list[Turn] = []
    for index, step in enumerate(steps):
        asked = _step_prompt(step)
        if index == 0:
            turns.append(Turn("task", asked))
        elif asked:
            turns.append(Turn("env", asked))
        turns.append(Turn("agent", step.model_response or as_text(step.action)))
    return tuple(turns)


def render_turns(turns: Sequence[Turn], max_chars: int) -> str:
    return "\n".join(f"[{turn.role}] {clip_text(turn.text, max_chars)}" for turn in turns)


def _shared_task(transcripts: Sequence[Transcript]) -> str | None:
    """The task every transcript starts with, when they all start with the same one."""
    firsts = {t[0].text for t in transcripts if t and t[0].role == "task"}
    starts_with_task = all(t and t[0].role == "task" for t in transcripts)
    return firsts.pop() if starts_with_task and len(firsts) == 1 else None


@dataclass(frozen=True)
class JudgePrompt:
    system: str = DEFAULT_SYSTEM
    pointwise: str = DEFAULT_POINTWISE
    group: str = DEFAULT_GROUP

    def __post_init__(self) -> None:
        for template in fields(self):
            _check_template(template.name, getattr(self, template.name))

    @classmethod
    def from_file(cls, path: str | Path) -> JudgePrompt:
        """Templates from a YAML or JSON file: a mapping with any of ``system``,
        ``pointwise`` and ``group`` (the others keep their defaults)."""
        import yaml

        location = Path(path)
        try:
            data = yaml.safe_load(location.read_text(encoding="utf-8"))
        except OSError as error:
            raise ValueError(f"judge prompt file {location}: {error.strerror}") from None
        except yaml.YAMLError as error:
            raise ValueError(f"judge prompt file {location}: not valid YAML ({error})") from None
        names = [template.name for template in fields(cls)]
        if not isinstance(data, dict) or not data or set(data) - set(names):
            raise ValueError(
                f"judge prompt file {location}: expected a mapping with some of "
                f"{', '.join(names)}, got {str(data)[:80]!r}"
            )
        return replace(cls(), **{str(key): str(value) for key, value in data.items()})

    def messages(
        self, transcripts: Sequence[Transcript], rubric: str, scale: int, max_chars: int
    ) -> list[dict[str, str]]:
        """The chat messages asking for the scores of `transcripts` (one: pointwise)."""
        task = _shared_task(transcripts)
        shown = [t[1:] if task is not None else t for t in transcripts]
        task_block = (
            f"<task>\n{clip_text(task, max_chars)}\n</task>\n\n" if task is not None else ""
        )
        values = {"rubric": rubric, "scale": scale, "task": task_block, "count": len(shown)}
        if len(shown) == 1:
            body = f"<transcript>\n{render_turns(shown[0], max_chars)}\n</transcript>"
            user = self.pointwise.format(**values, transcript=body, transcripts=body)
        else:
            body = "\n\n".join(
                f'<transcript id="{i}">\n{render_turns(turns, max_chars)}\n</transcript>'
                for i, turns in enumerate(shown, start=1)
            )
            user = self.group.format(**values, transcripts=body, transcript=body)
        return [
            {
                "role": "system",
                "content": self.system.format(**values, transcript="", transcripts=""),
            },
            {"role": "user", "content": user},
        ]


def _check_template(name: str, template: str) -> None:
    """Refuse a template that names a field no judge prompt fills (before any call)."""
    try:
        template.format(**dict.fromkeys(TEMPLATE_FIELDS, ""))
    except KeyError as error:
        raise ValueError(
            f"judge prompt {name!r} uses {{{error.args[0]}}}, which is not one of "
            f"{', '.join('{' + f + '}' for f in TEMPLATE_FIELDS)}"
        ) from None
    except (IndexError, ValueError) as error:
        raise ValueError(f"judge prompt {name!r} is not a valid template: {error}") from None


def scores_schema(count: int, scale: int) -> dict[str, Any]:
    """The JSON schema of a reply with `count` whole-number scores from 0 to `scale`."""
    score = {"type": "integer", "enum": list(range(scale + 1))}
    if count == 1:
        return {"type": "object", "properties": {"score": score}, "required": ["score"]}
    scores = {"type": "array", "items": score, "minItems": count, "maxItems": count}
    return {"type": "object", "properties": {"scores": scores}, "required": ["scores"]}


def _json_object(schema: dict[str, Any]) -> dict[str, Any]:
    # llama-cpp-python's server: its grammar is built from the schema.
    return {"type": "json_object", "schema": schema}


def _json_schema(schema: dict[str, Any]) -> dict[str, Any]:
    # OpenAI's structured outputs, which vLLM and SGLang servers take too.
    return {"type": "json_schema", "json_schema": {"name": "judge_scores", "schema": schema}}


# How a reply is constrained to the schema: the request's response_format, by name.
RESPONSE_FORMATS: dict[str, Callable[[dict[str, Any]], dict[str, Any]] | None] = {
    "off": None,
    "json_object": _json_object,
    "json_schema": _json_schema,
}


def response_format(constrain: str, count: int, scale: int) -> str | None:
    """The ``SamplingParams.response_format`` text for `constrain` (None: unconstrained)."""
    try:
        build = RESPONSE_FORMATS[constrain]
    except KeyError:
        raise ValueError(
            f"constrain must be one of {', '.join(RESPONSE_FORMATS)}, got {constrain!r}"
        ) from None
    return None if build is None else json.dumps(build(scores_schema(count, scale)))
