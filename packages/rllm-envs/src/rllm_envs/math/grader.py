"""Grading a model's reply to a math problem against the gold answer.

The rules, in order:

1. The answer is the last ``\\boxed{...}`` (or ``\\fbox{...}``) in the reply, after the last
   ``</think>`` when there is one; a reply still inside ``<think>`` has no answer.
2. When the gold answer is a plain number (GSM8K), a plain-number answer is compared exactly,
   ignoring thousands separators, ``$``, ``%`` and unit words: fast, no sympy.
3. Otherwise math-verify decides (LaTeX fractions, radicals, sets, intervals, ...), in a
   worker process with a deadline (:mod:`rllm_envs.math.verifier`). When it gives no verdict
   the grade is an infrastructure failure of kind ``"grader"``, never a silent "wrong".
"""

from __future__ import annotations

import atexit
import functools
from dataclasses import dataclass

from rllm_envs.core.failures import InfrastructureFailure
from rllm_envs.math.extract import extract_final_answer, plain_number
from rllm_envs.math.verifier import Verifier, VerifierError

# No gold answer is this long; longer "answers" are wrong without asking sympy to parse them.
MAX_ANSWER_CHARS = 1_000


class GraderFailure(InfrastructureFailure):
    """The grader could not decide (math-verify timed out or crashed)."""

    def __init__(self, message: str) -> None:
        super().__init__("grader", message)


@dataclass(frozen=True)
class GradeResult:
    is_correct: bool
    extracted_answer: str | None  # the boxed answer, None when the reply has none
    format_ok: bool  # the reply has a final boxed answer
    reason: str  # correct | wrong | no_boxed_answer | empty_boxed | unfinished_thinking
    #              | answer_too_long


@functools.cache
def shared_verifier() -> Verifier:
    """One worker per process for callers that do not bring their own (see `grade_answer`).

    Made on first use, so importing this module starts nothing; stopped at interpreter exit.
    """
    verifier = Verifier()
    atexit.register(verifier.close)
    return verifier


def grade_answer(response: str, gold: str, *, verifier: Verifier | None = None) -> GradeResult:
    """Grade `response` (the model's whole reply) against `gold` (the answer, LaTeX or number).

    Raises :class:`GraderFailure` when math-verify gives no verdict in time.
    """
    extraction = extract_final_answer(response)
    if extraction.answer is None:
        return GradeResult(False, None, False, extraction.reason)
    answer = extraction.answer
    if len(answer) > MAX_ANSWER_CHARS:
        return GradeResult(False, answer, True, "answer_too_long")
    gold = str(gold).strip()
    gold_number = plain_number(gold)
    answer_number = plain_number(answer) if gold_number is not None else None
    if answer_number is not None:
        is_correct = answer_number == gold_number
    else:
        try:
            is_correct = (verifier or shared_verifier()).verify(gold, answer)
        except VerifierError as error:
            raise GraderFailure(str(error)) from error
    return GradeResult(is_correct, answer, True, "correct" if is_correct else "wrong")
