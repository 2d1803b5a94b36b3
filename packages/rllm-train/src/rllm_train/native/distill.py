"""On-policy distillation's arithmetic: per-token advantages from a teacher's log-probs, and
the KL figures that say how far the student is from it (config/distill.py,
docs/training/distill.md).

Every tensor is ``(batch, length)`` in the layout of a
:class:`~rllm_train.native.batch.TensorBatch`: position t holds the log-prob of token t given
the tokens before it, and ``loss_mask`` is 1 exactly on the tokens the student generated. The
env's observations, tool results and the chat template's glue between turns are context for
both models and are never scored.

Pure functions of tensors (no model, no config): the trainer gets the log-probs
(:mod:`.distill_trainer`) and the policy update mixes the advantages
(:mod:`.policy_update`).
"""

from __future__ import annotations

import torch


def teacher_advantages(
    teacher_logprobs: torch.Tensor, student_logprobs: torch.Tensor, loss_mask: torch.Tensor
) -> torch.Tensor:
    """``log p_teacher(x_t) - log p_student(x_t)`` on every generated token, 0 elsewhere.

    Minus the one-sample estimate of the reverse KL at that token: a token the teacher finds
    likelier than the student does is pushed up, one it finds less likely is pushed down. Under
    the policy gradient its expectation is the gradient of ``-KL(student || teacher)``, summed
    over positions (each token's own term; no discounting over the tokens after it).
    """
    mask = loss_mask.float()
    return (teacher_logprobs.float() - student_logprobs.float()) * mask


def mixed_advantages(
    advantages: torch.Tensor,
    teacher_logprobs: torch.Tensor,
    student_logprobs: torch.Tensor,
    loss_mask: torch.Tensor,
    weight: float,
) -> torch.Tensor:
    """An algorithm's per-token `advantages` plus `weight` times the teacher's
    (:func:`teacher_advantages`); with --algorithm distill the algorithm's are all 0."""
    return advantages.float() + weight * teacher_advantages(
        teacher_logprobs, student_logprobs, loss_mask
    )


def sampled_reverse_kl(
    teacher_logprobs: torch.Tensor, student_logprobs: torch.Tensor, loss_mask: torch.Tensor
) -> float:
    """The mean over generated tokens of ``log p_student - log p_teacher``: the sample estimate
    of the per-token reverse KL, KL(student || teacher), the student's tokens being draws of
    the student (0 with no generated token)."""
    mask = loss_mask.float()
    tokens = float(mask.sum())
    if tokens == 0:
        return 0.0
    return float(((student_logprobs.float() - teacher_logprobs.float()) * mask).sum() / tokens)


def distill_metrics(
    teacher_logprobs: torch.Tensor, student_logprobs: torch.Tensor, loss_mask: torch.Tensor
) -> dict[str, float]:
    """A step's distillation figures: the per-token reverse KL (``distill/kl``), the teacher's
    mean log-prob of the student's tokens and how many tokens it scored."""
    mask = loss_mask.float()
    tokens = float(mask.sum())
    teacher_mean = float((teacher_logprobs.float() * mask).sum() / tokens) if tokens else 0.0
    return {
        "distill/kl": sampled_reverse_kl(teacher_logprobs, student_logprobs, loss_mask),
        "distill/teacher_logprob_mean": teacher_mean,
        "distill/tokens": tokens,
    }


def exact_reverse_kl(student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    """KL(student || teacher) of the next-token distributions, over the whole vocabulary, at
    each position of ``(..., vocabulary)`` logits (the vocabularies must be the same size):
    what the sampled estimate estimates, for measuring a model on held-out prompts."""
    student = torch.log_softmax(student_logits.float(), dim=-1)
    teacher = torch.log_softmax(teacher_logits.float(), dim=-1)
    return (student.exp() * (student - teacher)).sum(dim=-1)
