"""The keyword form of `AgentExecutionEngine` (rLLM's documented one), as the factory form.

``AgentExecutionEngine(agent_class=..., agent_args=..., env_class=..., env_args=...,
engine_name="openai", rollout_engine_args={...}, sampling_params={..., "model": ...},
max_response_length=..., max_prompt_length=..., n_parallel_agents=...)`` is read here into the
agent factory, env factory, rollout engine and limits the engine itself runs on, so both forms
share one implementation.

``env_class`` is a Gymnasium env class (made with ``env_args``) or a registered env id
(``gym.make(env_id, **env_args)``, ``"pkg.module:ns/Name-vN"`` importing ``pkg.module``
first). ``engine_name`` is a key of :data:`rllm_agents.engines.ENGINES`; its arguments are
``rollout_engine_args`` plus the ``model`` named in ``sampling_params``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from rllm_agents.agents.base import BaseAgent
from rllm_agents.engines import make_engine
from rllm_agents.engines.base import SamplingParams

SAMPLING_FIELDS = frozenset(field.name for field in dataclasses.fields(SamplingParams))
# The keyword form's arguments, as rLLM documents them.
KEYWORDS = (
    "agent_class",
    "agent_args",
    "env_class",
    "env_args",
    "engine_name",
    "rollout_engine_args",
    "sampling_params",
    "max_response_length",
    "max_prompt_length",
    "n_parallel_agents",
)


@dataclass(frozen=True)
class FactoryForm:
    """What the keyword form amounts to: the factory form's arguments."""

    agent_factory: Callable[[], BaseAgent]
    env_factory: Callable[[], Any]
    engine: Any
    sampling: SamplingParams
    settings: Mapping[str, Any]  # AgentExecutionEngine settings (n_parallel, token budgets)


def read_keyword_form(
    keywords: Mapping[str, Any], tokenizer: Any, given: tuple[Any, ...] = ()
) -> FactoryForm:
    """The factory form of rLLM-style `keywords` (names of KEYWORDS); a TypeError when they
    come with factories or an engine (`given`), or lack the agent or env class."""
    if any(part is not None for part in given):
        raise TypeError("pass agent_class/env_class or the factories and engine, not both")
    if keywords.get("agent_class") is None or keywords.get("env_class") is None:
        given_names = ", ".join(sorted(keywords))
        raise TypeError(
            f"the keyword form needs both agent_class and env_class (given: {given_names})"
        )
    return factory_form(
        tokenizer=tokenizer, **{**keywords, "engine_name": keywords.get("engine_name") or "openai"}
    )


def agent_factory(agent_class: type[BaseAgent], agent_args: Mapping[str, Any] | None):
    arguments = dict(agent_args or {})
    return lambda: agent_class(**arguments)


def env_factory(env_class: type | str, env_args: Mapping[str, Any] | None) -> Callable[[], Any]:
    """Makes the env: a class called with `env_args`, or a registered id through gym.make."""
    arguments = dict(env_args or {})
    if isinstance(env_class, type):
        return lambda: env_class(**arguments)
    import gymnasium as gym
    import rllm_envs  # noqa: F401 - registers the rllm/* ids
    from rllm_envs.core.loading import plain_env_id

    env_id = plain_env_id(env_class, what="env_class")  # "mod:id" imports mod, as gym.make does
    return lambda: gym.make(env_id, **arguments)


def sampling_of(sampling_params: Mapping[str, Any], max_response_length: int | None):
    """(SamplingParams, model name) from rLLM-style sampling params (``model`` among them)."""
    params = dict(sampling_params)
    model = params.pop("model", None)
    unknown = sorted(set(params) - SAMPLING_FIELDS)
    if unknown:
        raise ValueError(
            f"sampling_params: unknown key(s) {unknown}; known: {sorted(SAMPLING_FIELDS)}, model"
        )
    if "stop" in params:
        params["stop"] = tuple(
            [params["stop"]] if isinstance(params["stop"], str) else params["stop"]
        )
    if max_response_length is not None:
        params.setdefault("max_tokens", max_response_length)
    return SamplingParams(**params), model


def factory_form(
    *,
    agent_class: type[BaseAgent],
    env_class: type | str,
    agent_args: Mapping[str, Any] | None = None,
    env_args: Mapping[str, Any] | None = None,
    engine_name: str = "openai",
    rollout_engine_args: Mapping[str, Any] | None = None,
    tokenizer: Any = None,
    sampling_params: Mapping[str, Any] | None = None,
    max_response_length: int | None = None,
    max_prompt_length: int | None = None,
    n_parallel_agents: int | None = None,
) -> FactoryForm:
    sampling, model = sampling_of(sampling_params or {}, max_response_length)
    engine_args = dict(rollout_engine_args or {})
    if model is not None:
        engine_args.setdefault("model", model)
    if engine_name == "openai" and tokenizer is not None:
        engine_args.setdefault("tokenizer", tokenizer)
    settings = {
        "max_response_tokens": max_response_length,
        "max_prompt_tokens": max_prompt_length,
        "n_parallel": n_parallel_agents,
    }
    return FactoryForm(
        agent_factory=agent_factory(agent_class, agent_args),
        env_factory=env_factory(env_class, env_args),
        engine=make_engine(engine_name, **engine_args),
        sampling=sampling,
        settings={key: value for key, value in settings.items() if value is not None},
    )
