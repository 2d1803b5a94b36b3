"""The agent an env is trained with: resolved in :mod:`rllm_train.run.specs`, which both
backends share; the trainer's default arguments stay importable from here."""

from __future__ import annotations

from rllm_train.run.specs import DEFAULT_AGENT_ARGS, default_agent_args

__all__ = ["DEFAULT_AGENT_ARGS", "default_agent_args"]
