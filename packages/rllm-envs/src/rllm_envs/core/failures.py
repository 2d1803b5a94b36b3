"""Infrastructure failures: not the agent's fault, so trainers can drop or retry the episode.

An environment that loses its sandbox, grader, browser or tool server raises
:class:`InfrastructureFailure`; :class:`~rllm_envs.core.text_env.TextEnv` turns it into an
ended episode with ``info["failure"]`` set to the failure's ``kind``.
"""

from __future__ import annotations


class InfrastructureFailure(RuntimeError):
    """Something the agent did not cause broke; `kind` is a short name such as "sandbox"."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
