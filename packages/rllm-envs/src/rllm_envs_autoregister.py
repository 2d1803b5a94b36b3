"""Registers rllm's environment ids the moment a program imports Gymnasium.

Gymnasium 1.x has no plugin entry points, so ``gym.make("rllm/FrozenLake-v0")`` would fail in
code that never imports ``rllm_envs``. The ``rllm_envs_autoregister.pth`` file installed next to
this module imports it at interpreter start-up; it only puts a one-shot import hook on
``sys.meta_path`` (microseconds). When, and only when, ``gymnasium`` is imported, the hook lets
it load normally and then registers rllm's ids, which imports no environment code.
Set ``RLLM_ENVS_NO_AUTOREGISTER=1`` to turn it off.
"""

import os
import sys


class _RegisterAfterGymnasium:
    """A meta-path finder that wraps the loader of the top-level `gymnasium` module."""

    def find_spec(self, name, path=None, target=None):
        if name != "gymnasium":
            return None
        sys.meta_path.remove(self)  # one-shot; also keeps the lookup below from recursing
        import importlib.util

        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _LoaderThenRegister(spec.loader)
        return spec


class _LoaderThenRegister:
    def __init__(self, loader):
        self._loader = loader

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        try:
            from rllm_envs.core.registry import register_envs

            register_envs()
        except Exception as error:  # never break a program that merely imports gymnasium
            import warnings

            warnings.warn(f"rllm_envs could not register its environments: {error}", stacklevel=2)

    def __getattr__(self, attribute):
        return getattr(self._loader, attribute)


def install() -> None:
    if os.environ.get("RLLM_ENVS_NO_AUTOREGISTER"):
        return
    if "gymnasium" in sys.modules:  # imported before site ran (rare): register right away
        from rllm_envs.core.registry import register_envs

        register_envs()
        return
    if not any(isinstance(finder, _RegisterAfterGymnasium) for finder in sys.meta_path):
        sys.meta_path.insert(0, _RegisterAfterGymnasium())


install()
