"""The whole training config: dataclasses, YAML files and dotted command-line overrides.

A config is built in three layers, later ones winning: the defaults (the embedded default run;
:mod:`~rllm_train.config.sections`), an optional YAML file, then ``section.key=value``
overrides such as ``trainer.lr=1e-5`` or ``env.kwargs.max_turns=4``
(:mod:`~rllm_train.config.loading`). Every key is checked against the dataclasses and every
value against the field's type *before* anything slow starts, and an error names the bad key
(:mod:`~rllm_train.config.validation`). The config imports no backend.
"""

from __future__ import annotations

from rllm_train.config.curriculum import CURRICULUM_KINDS, CurriculumConfig
from rllm_train.config.loading import (
    SHIPPED_CONFIGS,
    build_config,
    config_file,
    from_mapping,
    parse_override,
    read_yaml,
    save_config,
)
from rllm_train.config.reward import RewardConfig
from rllm_train.config.rollout_correction import RolloutCorrectionConfig
from rllm_train.config.sections import (
    ALGORITHMS,
    BACKENDS,
    DTYPES,
    EXECUTORS,
    ROLLOUT_DISPATCH,
    ROLLOUT_ENGINES,
    ROLLOUT_MODES,
    SEQUENCE_MODES,
    AlgorithmConfig,
    ConfigError,
    DataConfig,
    EnvConfig,
    ModelConfig,
    MultiAgentConfig,
    ProgramConfig,
    RolloutConfig,
    SFTConfig,
    TrainConfig,
    TrainerConfig,
)
from rllm_train.config.tree import TreeConfig
from rllm_train.config.validation import CHOICES, NON_NEGATIVE, POSITIVE, get_value, validate
from rllm_train.config.verl_section import VerlOptions

__all__ = [
    "ALGORITHMS",
    "BACKENDS",
    "CHOICES",
    "CURRICULUM_KINDS",
    "DTYPES",
    "EXECUTORS",
    "NON_NEGATIVE",
    "POSITIVE",
    "ROLLOUT_DISPATCH",
    "ROLLOUT_ENGINES",
    "ROLLOUT_MODES",
    "SEQUENCE_MODES",
    "SHIPPED_CONFIGS",
    "AlgorithmConfig",
    "ConfigError",
    "CurriculumConfig",
    "DataConfig",
    "EnvConfig",
    "ModelConfig",
    "MultiAgentConfig",
    "ProgramConfig",
    "RewardConfig",
    "RolloutConfig",
    "RolloutCorrectionConfig",
    "SFTConfig",
    "TrainConfig",
    "TrainerConfig",
    "TreeConfig",
    "VerlOptions",
    "build_config",
    "config_file",
    "from_mapping",
    "get_value",
    "parse_override",
    "read_yaml",
    "save_config",
    "validate",
]
