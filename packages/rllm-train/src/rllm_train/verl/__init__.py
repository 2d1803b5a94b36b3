"""The verl backend of ``rllm-train``: our agent + env loop inside verl's trainer, on Ray.

* :mod:`~rllm_train.verl.spec` - the run's settings and the checks that reject what verl cannot run;
* :mod:`~rllm_train.verl.from_config` - a run's setup (:mod:`rllm_train.run`) as those settings (+ the config's ``verl`` section);
* :mod:`~rllm_train.verl.compose` - verl's own trainer config composed from them and validated by verl;
* :mod:`~rllm_train.verl.modes` - verl's schedules: synchronous, one step off, fully asynchronous;
* :mod:`~rllm_train.verl.weight_mailbox` - where the asynchronous modes' weight transfers meet;
* :mod:`~rllm_train.verl.data` - tasks as verl data rows carrying the whole task;
* :mod:`~rllm_train.verl.agent_loop` - ``RllmAgentLoop``, registered with verl as ``rllm_agent``;
* :mod:`~rllm_train.verl.engine_server` - an rllm engine behind verl's server-manager call (CPU runs);
* :mod:`~rllm_train.verl.failure_check` - verl's agent-loop manager with the run's failure rule;
* :mod:`~rllm_train.verl.launch` - ``dry_run`` and ``run``;
* :mod:`~rllm_train.verl.backend` - the entry points ``rllm-train`` and ``AgentTrainer`` call.

What both backends share - the agent and env specs, the task plan, the algorithm table, the
refusals, what a run writes - comes from :mod:`rllm_train.run`; nothing here imports the
native backend.

verl is imported only inside these functions, so ``import rllm_train.verl`` is cheap and a
missing verl gives :class:`~rllm_train.verl.versions.VerlUnavailableError` when used.
"""

from __future__ import annotations

from typing import Any

# The verl section of the config (it lives with the other sections: the config imports no
# backend). The backend's own modules are imported inside the functions, so importing this
# package stays cheap.
from rllm_train.config.verl_section import VerlOptions


def as_spec(config: Any):
    """A :class:`~rllm_train.verl.spec.VerlRunSpec` as it is, or one translated from a
    ``TrainConfig`` or a :class:`~rllm_train.run.setup.RunSetup`."""
    from rllm_train.run.setup import RunSetup
    from rllm_train.verl.from_config import spec_from_config
    from rllm_train.verl.spec import VerlRunSpec

    if isinstance(config, VerlRunSpec):
        return config
    if isinstance(config, RunSetup):
        return spec_from_config(config.config, config)
    return spec_from_config(config)


def dry_run(config: Any) -> str:
    """The composed verl config and data layout (no GPU, no Ray); `config` as in :func:`run`."""
    from rllm_train.verl.launch import dry_run as _dry_run

    return _dry_run(as_spec(config))


def run(config: Any) -> list[dict[str, Any]]:
    """Train with verl's trainer on Ray; `config` is a ``TrainConfig``, a ``RunSetup`` or a
    :class:`VerlRunSpec`. Returns the run's metric rows (``metrics.jsonl``)."""
    from pathlib import Path

    from rllm_train.config import save_config
    from rllm_train.run.setup import RunSetup
    from rllm_train.verl.launch import run as _run

    spec = as_spec(config)  # a config error leaves no run folder behind
    train_config = config.config if isinstance(config, RunSetup) else config
    if not hasattr(train_config, "trainer"):  # a spec given as it is: no rllm-train config
        return _run(spec)
    # The same config.yaml as the native backend writes.
    output = Path(train_config.trainer.output)
    output.mkdir(parents=True, exist_ok=True)
    save_config(train_config, output / "config.yaml")
    return _run(spec)


__all__ = ["VerlOptions", "as_spec", "dry_run", "run"]
