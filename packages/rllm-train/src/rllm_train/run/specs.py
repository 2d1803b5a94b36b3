"""Who plays a run's episodes, and in which env: plain specs both backends build from.

* :class:`EnvSpec` - ``env.id`` and ``env.kwargs`` (``gym.make``), or ``env.entry_point``, a
  ``gymnasium.Env`` class made as ``Class(**kwargs)``: what ``AgentTrainer(env_class=...)``
  records.
* :class:`AgentSpec` - the agent class (``env.agent``, the class ``AgentTrainer`` was given, or
  the one registered for the env) and every argument it is made with: the trainer's defaults
  for the env, the caller's ``agent_args``, ``env.system_prompt``.

Both are resolved once, from the config, in the process that starts the run. The native
trainer calls them as factories; the verl backend writes them into its data rows (JSON), and
its agent-loop workers, separate processes, rebuild the very same agent and env from there.
A class handed over in code is used as it is where it was given, and by its import path
elsewhere.

An agent program (``program.function`` / ``program.command``) plays instead of an agent:
:func:`program_for_run` loads and checks it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rllm_agents.agents.registry import AGENT_ARGS, agent_args_for_env

from rllm_train.config import ConfigError, EnvConfig, ProgramConfig

# Agent arguments the trainer uses by default for an env id (the caller's agent_args win): the
# registry's, which rllm-eval uses too.
DEFAULT_AGENT_ARGS: dict[str, dict[str, object]] = AGENT_ARGS


def default_agent_args(env_id: str) -> dict[str, object]:
    return agent_args_for_env(env_id)


def import_path(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def load_class(path: str, key: str) -> type:
    """The class ``module:Class`` names, or a ConfigError naming `key`."""
    from rllm_envs.core.loading import LoadError, load_attr

    try:
        loaded = load_attr(path, what=key)
    except LoadError as error:
        raise ConfigError(str(error)) from error
    if not isinstance(loaded, type):
        raise ConfigError(f"{key}: {path!r} is not a class")
    return loaded


@dataclass(frozen=True)
class EnvSpec:
    """The env of every episode (see the module docstring)."""

    env_id: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    entry_point: str = ""  # "module:Class", made instead of gym.make(env_id)
    given_class: type | None = field(default=None, compare=False, repr=False)

    def env_class(self) -> type | None:
        """The env class made directly (None: ``gym.make(env_id)``)."""
        if self.given_class is not None:
            return self.given_class
        return load_class(self.entry_point, "env.entry_point") if self.entry_point else None

    def make(self):
        """A fresh env (the rllm ids registered first, for a process that never imported them)."""
        env_class = self.env_class()
        if env_class is not None:
            return env_class(**dict(self.kwargs))
        import gymnasium as gym
        import rllm_envs  # noqa: F401

        return gym.make(self.env_id, **dict(self.kwargs))

    def factory(self):
        """A zero-argument env factory, checked now: an unknown id or class is a ConfigError."""
        if self.given_class is not None:
            return self.make
        from rllm_train.envs import make_env_factory

        return make_env_factory(self.env_id, dict(self.kwargs), self.entry_point)


@dataclass(frozen=True)
class AgentSpec:
    """The agent of every episode: its class and the arguments it is made with."""

    class_path: str  # "module:Class"
    arguments: Mapping[str, Any] = field(default_factory=dict)
    given_class: type | None = field(default=None, compare=False, repr=False)

    def agent_class(self) -> type:
        if self.given_class is not None:
            return self.given_class
        from rllm_agents.agents.base import BaseAgent

        loaded = load_class(self.class_path, "env.agent")
        if not issubclass(loaded, BaseAgent):
            raise ConfigError(f"env.agent: {self.class_path!r} is not a BaseAgent subclass")
        return loaded

    def build(self):
        return self.agent_class()(**dict(self.arguments))

    __call__ = build  # an agent factory

    def to_json(self) -> str:
        return json.dumps(
            {"class": self.class_path, "arguments": dict(self.arguments)}, sort_keys=True
        )

    @classmethod
    def from_json(cls, text: str) -> AgentSpec | None:
        """The spec :meth:`to_json` wrote; a bare ``module:Class`` (rows of earlier versions)
        is that class with no arguments; empty: None."""
        if not text:
            return None
        if not text.lstrip().startswith("{"):
            return cls(text)
        fields = json.loads(text)
        return cls(fields["class"], fields.get("arguments", {}))


def env_spec(env: EnvConfig, env_class: type | None = None) -> EnvSpec:
    return EnvSpec(env.id, dict(env.kwargs), env.entry_point, given_class=env_class)


def agent_spec(
    env: EnvConfig,
    agent_class: type | None = None,
    agent_args: Mapping[str, Any] | None = None,
) -> AgentSpec:
    """The run's agent: `agent_class` (else ``env.agent``, else the env's registered agent),
    made with, later ones winning: the trainer's defaults for the env, ``env.system_prompt``,
    ``env.agent_args``, then `agent_args` (given in code)."""
    from rllm_agents.agents.registry import agent_for_env

    arguments = {} if env.entry_point else default_agent_args(env.id)
    if env.system_prompt:  # the config's prompt over the trainer's default one
        arguments["system_prompt"] = env.system_prompt
    arguments.update(env.agent_args)
    arguments.update(agent_args or {})
    if agent_class is not None:
        return AgentSpec(import_path(agent_class), arguments, given_class=agent_class)
    if env.agent:
        spec = AgentSpec(env.agent, arguments)
        spec.agent_class()  # a typo fails now, not in every episode
        return spec
    return AgentSpec(import_path(agent_for_env(env.id.rpartition(":")[2])), arguments)


def default_agent_spec(env_id: str) -> AgentSpec:
    """The agent an env gets when nothing names one: its registered agent, with the trainer's
    default arguments for the env."""
    from rllm_train.config import EnvConfig

    return agent_spec(EnvConfig(id=env_id))


def check_json_arguments(spec: AgentSpec) -> None:
    """Arguments that must travel in a data row (verl) are JSON values."""
    try:
        json.dumps(dict(spec.arguments))
    except TypeError as error:
        raise ConfigError(
            f"agent_args: verl's workers rebuild the agent from its data row, so its arguments "
            f"must be JSON values (text, numbers, lists, mappings): {error}"
        ) from error


def load_program(program: ProgramConfig):
    """The agent program the config names, loaded and checked; a ConfigError naming the key."""
    from rllm_agents.programs import ProgramSpecError, program_from_options

    key = "program.function" if program.function else "program.command"
    try:
        loaded = program_from_options(program.function, program.command)
    except ProgramSpecError as error:
        raise ConfigError(f"{key}: {error}") from error
    if loaded is None:
        raise ConfigError("program: set program.function or program.command")
    return loaded


def program_for_run(config: Any, multiagent: bool, train_rows: Any):
    """The run's agent program (None when an agent plays), once what it needs is checked: a
    single-agent env and task rows to give it."""
    if not config.program.given:
        return None
    if multiagent:
        raise ConfigError(
            f"program: {config.env.id!r} is a multi-agent env, whose seats are played by "
            "policies; an agent program plays a single-agent env"
        )
    if train_rows is None:
        raise ConfigError(
            f"program: an agent program is given task rows, and {config.env.id!r} has no "
            "shipped train split to draw them from (or env.kwargs chooses its tasks); name "
            "them in data.train"
        )
    return load_program(config.program)
