"""The teacher of on-policy distillation (``distill.teacher``): which weights it names, the check
that it reads the student's tokens as the student does, and the frozen model itself.

``distill.teacher`` takes what ``--model`` takes - an embedded model (smollm2, tiny) or a local
Hugging Face model folder - or an rllm-train run: its folder (the latest checkpoint), its
``checkpoints/`` folder, a ``checkpoints/step_N`` folder or a ``state.pt``. A checkpoint holds
only the trained tensors, so the run's ``config.yaml`` says which model they belong to (its
``model`` section: the base model, LoRA's shape and the run's own ``--init-from``).

The teacher scores the student's token ids as they are, so both must map ids to the same
strings: a teacher with another vocabulary is refused (:func:`check_same_tokenizer`). A
different chat template is fine: the teacher reads the conversation as the student's template
rendered it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rllm_agents.models import EMBEDDED_MODELS, load_tokenizer

from rllm_train.config import ConfigError, ModelConfig, TrainConfig
from rllm_train.config.loading import read_yaml
from rllm_train.run.reporting import CONFIG_FILE

KEY = "distill.teacher"
# The keys of a run's model section that decide what its checkpoint's tensors fit.
RUN_MODEL_KEYS = ("name", "lora_rank", "lora_alpha", "lora_target_modules", "init_from")


@dataclass(frozen=True)
class TeacherSource:
    """Where the teacher's weights come from: a model, and maybe a run's checkpoint on top."""

    given: str  # distill.teacher as written
    model: ModelConfig  # the model built first (for a run: its base model, LoRA-shaped)
    checkpoint: str = ""  # a run's state.pt whose trained tensors replace the model's

    def describe(self) -> str:
        if not self.checkpoint:
            return self.model.name
        return f"{self.model.name} trained by the run at {self.given}"


def _is_model(name: str) -> bool:
    return name in EMBEDDED_MODELS or (Path(name).expanduser() / "config.json").is_file()


def _run_model_section(state: Path, given: str) -> dict[str, Any]:
    """The ``model`` section of the run a checkpoint file belongs to (its config.yaml sits in
    the run folder, up to three levels above ``checkpoints/step_N/state.pt``)."""
    for folder in list(state.parents)[:3]:
        path = folder / CONFIG_FILE
        if path.is_file():
            config = read_yaml(path.read_text(encoding="utf-8"), str(path)) or {}
            section = config.get("model") if isinstance(config, dict) else None
            if not isinstance(section, dict) or not section.get("name"):
                raise ConfigError(f"{KEY}: {path} names no model (model.name)")
            return {key: section[key] for key in RUN_MODEL_KEYS if key in section}
    raise ConfigError(
        f"{KEY}: {given!r} holds a checkpoint but no run's {CONFIG_FILE} beside it to say which "
        "model its tensors belong to; give the run folder"
    )


def teacher_source(given: str) -> TeacherSource:
    """What `given` (``distill.teacher``) names; a ConfigError when it names nothing usable."""
    from rllm_train.native.checkpoint import checkpoint_file

    name = given.strip()
    if _is_model(name):
        return TeacherSource(given, ModelConfig(name=name))
    try:
        state = checkpoint_file(name)
    except FileNotFoundError:
        raise ConfigError(
            f"{KEY}: {given!r} is neither a model --model accepts (smollm2, tiny, a local "
            "Hugging Face model folder with its config.json) nor an rllm-train run folder with "
            "a checkpoint"
        ) from None
    model = ModelConfig(**_run_model_section(state, given))
    if model.init_from and not _exists_checkpoint(model.init_from):
        raise ConfigError(
            f"{KEY}: the run at {given!r} started from {model.init_from!r} (its "
            "model.init_from), which holds no checkpoint now"
        )
    return TeacherSource(given, model, str(state))


def _exists_checkpoint(path: str) -> bool:
    from rllm_train.native.checkpoint import checkpoint_file

    try:
        checkpoint_file(path)
    except FileNotFoundError:
        return False
    return True


def vocabulary_difference(student: Any, teacher: Any) -> str:
    """Why two tokenizers map ids differently (empty: they map every id alike)."""
    student_vocab, teacher_vocab = student.get_vocab(), teacher.get_vocab()
    if student_vocab == teacher_vocab:
        return ""
    if len(student_vocab) != len(teacher_vocab):
        return f"the student's has {len(student_vocab)} tokens, the teacher's {len(teacher_vocab)}"
    moved = sorted(
        token for token, index in student_vocab.items() if teacher_vocab.get(token) != index
    )
    return f"{len(moved)} tokens have other ids, e.g. {', '.join(map(repr, moved[:3]))}"


def check_same_tokenizer(student_tokenizer: Any, source: TeacherSource) -> None:
    """Refuse a teacher whose vocabulary differs from the student's: it would score ids that
    mean other strings to it."""
    difference = vocabulary_difference(student_tokenizer, load_tokenizer(source.model.name))
    if difference:
        raise ConfigError(
            f"{KEY}: {source.describe()} has another tokenizer than the student ({difference}); "
            "the teacher scores the student's token ids, so both must share one vocabulary (a "
            "different chat template is fine)"
        )


def check_teacher(config: TrainConfig) -> TeacherSource | None:
    """The teacher named by `config`, checked without loading its weights (None: no teacher).
    Whether its engine can serve it: ``teacher_engines.check_teacher_engine``."""
    if not config.distill.on:
        return None
    source = teacher_source(config.distill.teacher)
    check_same_tokenizer(load_tokenizer(config.model.name), source)
    return source


def load_teacher(source: TeacherSource, device: Any) -> Any:
    """The teacher, frozen, in eval mode on `device` (float32; the trainer's autocast applies
    to its forward passes as to the student's). A LoRA run's adapters are merged in."""
    from rllm_train.native import checkpoint
    from rllm_train.native.models import load_policy

    model, _tokenizer, _dtype = load_policy(source.model, device)
    try:
        if source.model.init_from:
            checkpoint.load_weights(model, source.model.init_from)
        if source.checkpoint:
            checkpoint.load_weights(model, source.checkpoint)
    except (FileNotFoundError, ValueError) as error:
        raise ConfigError(f"{KEY}: {error}") from error
    if source.model.lora_rank > 0:
        model = model.merge_and_unload()  # one plain model: no adapter arithmetic per forward
    model.requires_grad_(False)
    return model.eval()
