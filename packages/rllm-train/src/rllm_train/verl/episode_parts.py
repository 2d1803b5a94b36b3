"""Build the env and the agent of one episode from its :class:`EpisodeSource`."""

from __future__ import annotations

from rllm_envs.core.loading import load_attr

from rllm_train.verl.data import EpisodeSource


def make_env(source: EpisodeSource):
    """A fresh env for the episode, as the run's env spec makes it (rllm ids registered first)."""
    return source.env.make()


def load_agent_class(dotted: str) -> type:
    """An agent class named ``package.module:ClassName`` (a LoadError, a ValueError, if not)."""
    return load_attr(dotted, what="agent")


def make_agent(source: EpisodeSource):
    """The agent the row names, made with its arguments (system prompt included), else the one
    registered for the env id with the trainer's defaults for it: the agent the native
    backend makes for the same config (rllm_train.run.specs)."""
    from rllm_train.run.specs import default_agent_spec

    spec = source.agent if source.agent is not None else default_agent_spec(source.env_id)
    return spec.build()
