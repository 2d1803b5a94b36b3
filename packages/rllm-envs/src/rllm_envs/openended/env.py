"""`OpenEndedEnv`: one reply to an open-ended prompt, graded by nothing (contract in __init__.py)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rllm_envs.core.tasks import Row, TaskSources
from rllm_envs.core.text_env import TextEnv, Transition

ENV_ID = "rllm/OpenEnded-v0"
SHIPPED_SETS: Mapping[str, Path] = {"prompts": Path(__file__).parent / "data" / "prompts.jsonl"}
REQUIRED_COLUMNS = ("prompt",)


class OpenEndedEnv(TextEnv):
    """Reply to a prompt; the reward is left to a judge outside the env (package doc)."""

    metadata = {**TextEnv.metadata, "rllm.inline_safe": True}  # pure Python, microseconds a call

    def __init__(
        self,
        tasks: Any = "shipped:prompts",
        *,
        split: str = "train",
        column_map: dict[str, str] | None = None,
        render_mode: str | None = None,
    ) -> None:
        task_set = TaskSources(shipped=SHIPPED_SETS).load(
            tasks, split=split, column_map=column_map, required=REQUIRED_COLUMNS
        )
        super().__init__(task_set, max_turns=1, render_mode=render_mode)

    def begin(self, task: Row) -> tuple[str, dict[str, Any]]:
        return str(task["prompt"]), {}

    def act(self, action: str) -> Transition:
        replied = bool(action.strip())
        feedback = (
            "Reply received. The episode has ended."
            if replied
            else "The reply was empty. The episode has ended."
        )
        info = {"graded": False, "action_valid": replied}
        return Transition(feedback, reward=0.0, terminated=True, info=info)

    # -- snapshots (rllm_envs.core.snapshots) ---------------------------------------------
    # The task and whether the one turn was played - the base snapshot - are the whole episode.
    def capture_state(self) -> None:
        return None

    def restore_state(self, state: None) -> None:
        pass
