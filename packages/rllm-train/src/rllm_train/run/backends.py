"""The backends, as a table: ``trainer.backend`` -> the module that trains with it.

Each module offers the same four functions of a :class:`~rllm_train.run.setup.RunSetup`:

* ``check(setup)`` - what the backend needs that the config alone cannot tell (the model, the
  env, recorded episodes...), quick, before the run folder is claimed;
* ``dry_run(setup) -> str`` - what it would run, checked, nothing slow started;
* ``train(setup, lock) -> rows`` - the run itself, in the claimed folder; its metric rows;
* ``resume_logs(setup) -> paths`` - the JSON-lines logs a resume keeps rows of, which
  ``rllm-train --resume`` checks for damaged lines (or ``--repair`` mends) before anything
  slow (:mod:`rllm_agents.damaged_lines`).

``rllm-train`` and ``AgentTrainer`` go through this table, so neither reaches into a backend,
and adding one is adding a row. The modules are imported on use: the verl backend's needs
(Ray, verl's trainer) are only imported by runs that ask for it.
"""

from __future__ import annotations

from types import ModuleType

from rllm_envs.core.loading import LoadError, load_module

from rllm_train.config import ConfigError

BACKEND_MODULES: dict[str, str] = {
    "native": "rllm_train.native.backend",
    "verl": "rllm_train.verl.backend",
}


def backend_module(name: str) -> ModuleType:
    """The module of backend `name` (a ConfigError saying what to install if it cannot load)."""
    try:
        return load_module(BACKEND_MODULES[name], f"the {name} backend")
    except KeyError:
        raise ConfigError(
            f"trainer.backend: {name!r} is not one of {', '.join(BACKEND_MODULES)}"
        ) from None
    except LoadError as error:
        raise ConfigError(
            f"trainer.backend: {name} needs the {name} backend: pip install 'rllm-train[{name}]' "
            f"({error})"
        ) from error
