"""Build the env and the agent of one episode from its :class:`EpisodeSource`."""

from __future__ import annotations

from rllm_envs.core.loading import load_attr

from rllm_train.verl.data import EpisodeSource


def make_env(source: EpisodeSource):
    """A fresh Gymnasium env for the episode (rllm ids registered first)."""
    import gymnasium as gym
    import rllm_envs  # noqa: F401  (registers the rllm/ ids in this worker process)

    return gym.make(source.env_id, **dict(source.env_kwargs))


def load_agent_class(dotted: str) -> type:
    """An agent class named ``package.module:ClassName`` (a LoadError, a ValueError, if not)."""
    return load_attr(dotted, what="agent")


def make_agent(source: EpisodeSource):
    """The agent named in the row, else the one registered for the env id."""
    if source.agent:
        return load_agent_class(source.agent)()
    from rllm_agents.agents.registry import agent_for_env

    return agent_for_env(source.env_id)()
