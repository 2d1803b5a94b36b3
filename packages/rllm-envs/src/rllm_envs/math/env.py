"""`MathEnv`: math problems graded on the final boxed answer (contract in __init__.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rllm_envs.core.extras import require_extra
from rllm_envs.core.tasks import Row, TaskSources
from rllm_envs.core.text_env import TextEnv, Transition
from rllm_envs.math.grader import GradeResult, grade_answer
from rllm_envs.math.sets import SHIPPED_SETS
from rllm_envs.math.verifier import Verifier

DEFAULT_TASKS = "shipped:gsm8k_train"
DEFAULT_INSTRUCTION = (
    "Solve the problem step by step. Put your final answer in \\boxed{}, for example \\boxed{42}."
)
REQUIRED_COLUMNS = ("question", "answer")

# What the model is told after a try that was not correct, by grade reason.
_RETRY_PROMPTS: Mapping[str, str] = {
    "wrong": (
        "Your answer {answer} is not correct. Review your solution step by step, find the "
        "mistake, and give your corrected final answer in \\boxed{{}}."
    ),
    "answer_too_long": (
        "Your boxed answer is far too long to be a final answer. Review your solution and "
        "give only the final answer in \\boxed{{}}."
    ),
    "no_boxed_answer": (
        "Your reply has no final answer in \\boxed{{}}. Review your solution and give your "
        "final answer in \\boxed{{}}."
    ),
    "empty_boxed": (
        "Your \\boxed{{}} is empty. Review your solution and put your final answer inside it."
    ),
    "unfinished_thinking": (
        "Your reply opened <think> but never closed it, so it has no final answer. Finish "
        "with </think> and your final answer in \\boxed{{}}."
    ),
}
_FINAL_MESSAGES: Mapping[bool, str] = {
    True: "Correct. The answer is {answer}.",
    False: "Not correct: {reason}. The episode has ended.",
}
_REASON_TEXT: Mapping[str, str] = {
    "wrong": "your answer {answer} is wrong",
    "answer_too_long": "the boxed answer is too long",
    "no_boxed_answer": "no final answer in \\boxed{{}}",
    "empty_boxed": "the \\boxed{{}} is empty",
    "unfinished_thinking": "the reply never closed <think>",
}


class MathEnv(TextEnv):
    """Answer a math problem; the reward is 1 for a correct final boxed answer."""

    def __init__(
        self,
        tasks: Any = DEFAULT_TASKS,
        *,
        dataset: Any = None,
        split: str = "train",
        column_map: dict[str, str] | None = None,
        max_turns: int = 1,
        format_penalty: float = 0.0,
        instruction: str = DEFAULT_INSTRUCTION,
        grading_timeout_s: float = 5.0,
        render_mode: str | None = None,
    ) -> None:
        require_extra("math", "math_verify")
        if max_turns is None or max_turns < 1:
            raise ValueError(f"max_turns must be a positive integer, got {max_turns!r}")
        if format_penalty < 0:
            raise ValueError(f"format_penalty is subtracted; give it >= 0, got {format_penalty}")
        source = tasks if dataset is None else dataset  # `dataset=` is an alias of `tasks`
        task_set = TaskSources(shipped=SHIPPED_SETS).load(
            source, split=split, column_map=column_map, required=REQUIRED_COLUMNS
        )
        super().__init__(task_set, max_turns=max_turns, render_mode=render_mode)
        self.format_penalty = float(format_penalty)
        self.instruction = instruction
        # The math-verify worker starts on the first answer that needs it, and close() stops it.
        self.verifier = Verifier(timeout_s=grading_timeout_s)

    def task_name(self) -> str:
        return "math"

    def begin(self, task: Row) -> tuple[str, dict[str, Any]]:
        missing = [column for column in REQUIRED_COLUMNS if task.get(column) in (None, "")]
        if missing:
            raise ValueError(f"a math task needs {list(REQUIRED_COLUMNS)}; missing {missing}")
        prompt = (
            f"{task['question']}\n\n{self.instruction}" if self.instruction else task["question"]
        )
        return prompt, {"source": str(task.get("source", "user"))}

    def act(self, action: str) -> Transition:
        assert self.task is not None
        grade = grade_answer(action, str(self.task["answer"]), verifier=self.verifier)
        reward = 1.0 if grade.is_correct else (0.0 if grade.format_ok else -self.format_penalty)
        # One try: the reply is the answer, whatever its form. More tries: only a correct
        # answer ends the episode; the turn limit truncates it otherwise.
        terminated = grade.is_correct or self.max_turns == 1
        info = {
            "is_correct": grade.is_correct,
            "action_valid": grade.format_ok,
            "extracted_answer": grade.extracted_answer,
            "grade": grade.reason,
        }
        return Transition(self._feedback(grade, terminated), reward, terminated, False, info)

    def _feedback(self, grade: GradeResult, terminated: bool) -> str:
        answer = grade.extracted_answer or ""
        if grade.is_correct:
            return _FINAL_MESSAGES[True].format(answer=answer)
        if terminated or self.turn >= (self.max_turns or 1):
            reason = _REASON_TEXT[grade.reason].format(answer=answer)
            return _FINAL_MESSAGES[False].format(reason=reason)
        return _RETRY_PROMPTS[grade.reason].format(answer=answer)

    # -- snapshots (rllm_envs.core.snapshots) ---------------------------------------------
    # The task, the turn and whether the episode is over - the base snapshot - are the whole
    # episode; the verifier worker grades the same way whatever the snapshot.
    def capture_state(self) -> None:
        return None

    def restore_state(self, state: None) -> None:
        pass

    def close(self) -> None:
        self.verifier.close()
        super().close()
