"""The table of rllm environment ids and their registration with Gymnasium.

Entry points are strings, so registering imports no env module: an env whose extra is not
installed fails only when made, with a :class:`~rllm_envs.core.extras.MissingExtraError`
naming the ``pip install`` to run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class EnvEntry:
    id: str
    entry_point: str
    extra: str | None = None  # the rllm-envs extra the env needs, if any
    kwargs: dict[str, Any] = field(default_factory=dict)
    max_episode_steps: int | None = None


ENV_ENTRIES: tuple[EnvEntry, ...] = (
    EnvEntry("rllm/FrozenLake-v0", "rllm_envs.frozenlake:FrozenLakeEnv"),
    EnvEntry("rllm/Math-v0", "rllm_envs.math:MathEnv", extra="math"),
    EnvEntry("rllm/GymText-v0", "rllm_envs.gymtext:GymTextEnv"),
    EnvEntry("rllm/Code-v0", "rllm_envs.code:CodeEnv", extra="code"),
    EnvEntry("rllm/MCP-v0", "rllm_envs.mcp:MCPEnv", extra="mcp"),
    EnvEntry("rllm/Web-v0", "rllm_envs.web:WebEnv", extra="web"),
    EnvEntry("rllm/SWE-v0", "rllm_envs.swe:SWEEnv", extra="swe"),
    EnvEntry("rllm/Arithmetic-v0", "rllm_envs.arithmetic:ArithmeticEnv"),
    EnvEntry("rllm/RunningTotal-v0", "rllm_envs.running_total:RunningTotalEnv"),
    EnvEntry("rllm/OpenEnded-v0", "rllm_envs.openended:OpenEndedEnv"),
    EnvEntry("rllm/Harbor-v0", "rllm_envs.harbor:HarborEnv", extra="harbor"),
)

# Envs that play an env served elsewhere: registered, but not in ENV_IDS, as they cannot be
# made without a server to reach (tests/envs/test_remote.py runs the env checks on them).
CLIENT_ENTRIES: tuple[EnvEntry, ...] = (
    EnvEntry("rllm/Remote-v0", "rllm_envs.remote:RemoteEnv", extra="remote"),
)

# Old ids kept for one version after an env moved: registered too (so code using them still
# works), but not listed in ENV_IDS; their env warns with the new id when made.
DEPRECATED_ENTRIES: tuple[EnvEntry, ...] = (
    EnvEntry("rllm_train/Arithmetic-v0", "rllm_envs.arithmetic:DeprecatedArithmeticEnv"),
)


def register_envs() -> None:
    """Register every rllm id with Gymnasium (idempotent)."""
    from gymnasium.envs.registration import register, registry

    for entry in (*ENV_ENTRIES, *CLIENT_ENTRIES, *DEPRECATED_ENTRIES):
        if entry.id not in registry:
            register(
                id=entry.id,
                entry_point=entry.entry_point,
                kwargs=dict(entry.kwargs),
                max_episode_steps=entry.max_episode_steps,
            )
