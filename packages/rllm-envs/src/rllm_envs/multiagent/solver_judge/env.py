"""Solver-judge on math tasks: solvers answer at once, then a judge picks one answer."""

from __future__ import annotations

from typing import Any

import numpy as np

from rllm_envs.core.extras import require_extra
from rllm_envs.core.tasks import TaskSet, TaskSources, task_id
from rllm_envs.multiagent.moves import read_move
from rllm_envs.multiagent.phase_env import PhasedTextEnv, PhaseResult

JUDGE = "judge_0"
DEFAULT_TASKS = "shipped:gsm8k_train"
DEFAULT_INSTRUCTION = (
    "Solve the problem step by step. Put your final answer in \\boxed{}, for example \\boxed{42}."
)
REQUIRED_COLUMNS = ("question", "answer")


def solver_names(count: int) -> tuple[str, ...]:
    return tuple(f"solver_{i}" for i in range(count))


class SolverJudgeEnv(PhasedTextEnv):
    """Solvers and a judge (contract card: :mod:`rllm_envs.multiagent.solver_judge`)."""

    metadata = {**PhasedTextEnv.metadata, "name": "solver_judge_v0", "rllm.inline_safe": False}

    def __init__(
        self,
        tasks: Any = DEFAULT_TASKS,
        *,
        dataset: Any = None,
        split: str = "train",
        column_map: dict[str, str] | None = None,
        num_solvers: int = 2,
        instruction: str = DEFAULT_INSTRUCTION,
        format_penalty: float = 0.0,
        max_solution_chars: int = 2_000,
        grading_timeout_s: float = 5.0,
        max_cycles: int | None = None,
        **kwargs: Any,
    ) -> None:
        require_extra("math", "math_verify")
        from rllm_envs.math.sets import SHIPPED_SETS
        from rllm_envs.math.verifier import Verifier

        if not 1 <= num_solvers <= 16:
            raise ValueError(f"num_solvers must be 1 to 16, got {num_solvers}")
        if format_penalty < 0:
            raise ValueError(f"format_penalty is subtracted; give it >= 0, got {format_penalty}")
        if max_solution_chars < 100:
            raise ValueError(f"max_solution_chars must be at least 100, got {max_solution_chars}")
        self.solvers = solver_names(num_solvers)
        source = tasks if dataset is None else dataset
        self.tasks: TaskSet = TaskSources(shipped=SHIPPED_SETS).load(
            source, split=split, column_map=column_map, required=REQUIRED_COLUMNS
        )
        super().__init__(
            (*self.solvers, JUDGE), max_cycles=2 if max_cycles is None else max_cycles, **kwargs
        )
        self.instruction = instruction
        self.format_penalty = float(format_penalty)
        self.max_solution_chars = max_solution_chars
        self.verifier = Verifier(timeout_s=grading_timeout_s)
        self.phase = "solve"
        self.answers: dict[str, dict[str, Any]] = {}
        self.verdict: dict[str, Any] = {}

    # -- the task --------------------------------------------------------------------------
    def draw_task(self, rng: np.random.Generator) -> dict[str, Any]:
        return self.tasks.draw(rng)

    def begin(self, task: dict[str, Any]) -> None:
        missing = [column for column in REQUIRED_COLUMNS if task.get(column) in (None, "")]
        if missing:
            raise ValueError(f"a math task needs {list(REQUIRED_COLUMNS)}; missing {missing}")
        self.phase = "solve"
        self.answers = {}
        self.verdict = {}

    def task_id(self, task: dict[str, Any]) -> str:
        return task_id(task, "math")

    def role(self, agent: str) -> str:
        return "judge" if agent == JUDGE else "solver"

    # -- the rules -------------------------------------------------------------------------
    def acting(self) -> tuple[str, ...]:
        return self.solvers if self.phase == "solve" else (JUDGE,)

    def resolve(self, replies: dict[str, str]) -> PhaseResult:
        from rllm_envs.math.grader import grade_answer

        if self.phase == "solve":
            rewards, valid = {}, {}
            for solver in self.solvers:
                reply = replies.get(solver, "")
                grade = grade_answer(reply, str(self.task["answer"]), verifier=self.verifier)
                self.answers[solver] = {
                    "reply": reply,
                    "is_correct": grade.is_correct,
                    "extracted_answer": grade.extracted_answer,
                    "grade": grade.reason,
                }
                valid[solver] = grade.format_ok
                rewards[solver] = (
                    1.0 if grade.is_correct else (0.0 if grade.format_ok else self._penalty)
                )
            self.phase = "judge"
            return PhaseResult(rewards=rewards, valid=valid)
        reading = read_move(replies.get(JUDGE, ""), self._choices())
        if reading.move is None:
            self.verdict = {"picked": None, "is_correct": False, "problem": reading.problem}
            reward = self._penalty
        else:
            picked = self.solvers[int(reading.move) - 1]
            correct = bool(self.answers[picked]["is_correct"])
            self.verdict = {"picked": picked, "is_correct": correct}
            reward = 1.0 if correct else 0.0
        self.phase = "done"
        return PhaseResult(
            rewards={JUDGE: reward}, valid={JUDGE: reading.move is not None}, over=True
        )

    @property
    def _penalty(self) -> float:
        return -self.format_penalty if self.format_penalty else 0.0

    def _choices(self) -> list[str]:
        return [str(i + 1) for i in range(len(self.solvers))]

    # -- what agents see -------------------------------------------------------------------
    def view(self, agent: str) -> str:
        question = str(self.task["question"])
        if self.phase == "done":
            return self._ending(agent)
        if agent == JUDGE:
            if self.phase == "solve":
                return "Waiting for the solvers to answer."
            return self._judge_prompt(question)
        if self.phase == "solve":
            return f"{question}\n\n{self.instruction}" if self.instruction else question
        return "Your answer was recorded. Waiting for the judge."

    def _judge_prompt(self, question: str) -> str:
        parts = [
            "You are the judge. Several solvers answered this problem:",
            question,
        ]
        for i, solver in enumerate(self.solvers):
            reply = self.answers[solver]["reply"].strip() or "(no answer)"
            if len(reply) > self.max_solution_chars:
                reply = "[... start cut]\n" + reply[-self.max_solution_chars :]
            parts.append(f"Solution {i + 1}:\n{reply}")
        parts.append(
            "Which solution's final answer is correct? Reply with its number in backticks, "
            f"e.g. `1` (1 to {len(self.solvers)})."
        )
        return "\n\n".join(parts)

    def _ending(self, agent: str) -> str:
        gold = self.task["answer"]
        if agent == JUDGE:
            picked = self.verdict.get("picked")
            if picked is None:
                return f"Your reply named no solution ({self.verdict.get('problem')}). The answer was {gold}."
            verdict = "correct" if self.verdict["is_correct"] else "wrong"
            return f"You picked {picked}'s answer, which is {verdict}. The answer was {gold}."
        answer = self.answers.get(agent, {})
        verdict = "correct" if answer.get("is_correct") else "not correct"
        return f"Your answer was {verdict}. The answer was {gold}."

    def spectator_view(self) -> str:
        lines = [f"question: {self.task['question']}", f"answer: {self.task['answer']}"]
        for solver, answer in self.answers.items():
            lines.append(f"{solver}: {answer['extracted_answer']} ({answer['grade']})")
        if self.verdict:
            lines.append(f"judge picked {self.verdict.get('picked')}")
        return "\n".join(lines)

    def extra_info(self, agent: str) -> dict[str, Any]:
        if agent == JUDGE:
            info: dict[str, Any] = {}
            if self.phase == "judge":
                info["legal_moves"] = self._choices()
            if self.verdict:
                info.update(picked=self.verdict["picked"], is_correct=self.verdict["is_correct"])
                info["any_solver_correct"] = any(a["is_correct"] for a in self.answers.values())
            return info
        answer = self.answers.get(agent)
        if answer is None:
            return {}
        return {key: answer[key] for key in ("is_correct", "extracted_answer", "grade")}

    def close(self) -> None:
        self.verifier.close()
