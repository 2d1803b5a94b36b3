"""``--algorithm sft``: rejection-sampling fine-tuning on the best recorded episodes.

The native trainer's loop, run folder, checkpoints, metrics and validation, with a different
step: instead of sampling episodes and following a policy gradient, each step takes the next
``sft.batch_size`` sequences of the chosen trajectories (:mod:`.sft_data`; a seeded order,
reshuffled each epoch, fixed by the run seed and the step so a resumed run sees the same data)
and lowers their negative log-likelihood, token-mean over the tokens the RL update would
train (the batch's ``loss_mask``). Its checkpoints are RL checkpoints: ``rllm-train
--init-from RUN`` starts RL from the fine-tuned weights.

Each row's ``reward_mean`` is the recorded reward of the sequences it trained on (they all
passed ``sft.min_reward``); what fine-tuning did to the reward is the validation's business
(held-out validation runs before the first and after the last step where the env has a
test split). ``sft/probe_loss`` - the loss on the first :data:`PROBE_SEQUENCES` chosen
sequences, no update - sits in the "step 0" row and the last step's row.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from rllm_train.config import TrainConfig
from rllm_train.native.batch import TensorBatch, TrainSequence, to_tensors
from rllm_train.native.sft_data import select_trajectories, sft_sequences, validation_task_ids
from rllm_train.native.trainer import NativeTrainer

SFT_STREAM = 13  # seeds the order of the fine-tuning data apart from the other draws
PROBE_SEQUENCES = 256  # how many sequences the before/after loss is measured on
PROBE_LOSS = "sft/probe_loss"


def batch_indices(count: int, batch_size: int, seed: int, step: int) -> list[int]:
    """Which of `count` sequences step `step` trains on: positions ``step * batch_size`` on of
    an endless order made of one seeded permutation per epoch."""
    indices: list[int] = []
    position = step * batch_size
    while len(indices) < batch_size:
        epoch, offset = divmod(position, count)
        order = np.random.default_rng([seed, epoch, SFT_STREAM]).permutation(count)
        take = min(batch_size - len(indices), count - offset)
        indices.extend(int(index) for index in order[offset : offset + take])
        position += take
    return indices


def masked_nll(
    logprobs: torch.Tensor, loss_mask: torch.Tensor, total_tokens: float
) -> torch.Tensor:
    """The negative log-likelihood of the masked tokens, summed and divided by `total_tokens`
    (the whole batch's count, so micro-batches add up to the batch's token mean)."""
    return -(logprobs * loss_mask).sum() / total_tokens


class SFTTrainer(NativeTrainer):
    """The native trainer with a fine-tuning step (see the module doc)."""

    def __init__(self, config: TrainConfig, **kwargs: Any) -> None:
        super().__init__(config, **kwargs)
        chosen, self.selection = select_trajectories(config.sft, validation_task_ids(self.data.val))
        data = sft_sequences(
            chosen,
            self.tokenizer,
            config.algorithm.sequence_mode,
            config.sft.retokenize,
            self.model.get_input_embeddings().num_embeddings,
        )
        self.sequences: list[TrainSequence] = data.sequences
        self.retokenized = data.retokenized

    def _nll_pass(self, batch: TensorBatch, train: bool) -> torch.Tensor:
        """The batch's token-mean NLL, micro-batch by micro-batch (gradients accumulated)."""
        total_tokens = float(batch.loss_mask.sum().clamp(min=1))
        parts = []
        for rows in self.policy_update.micro_batches(len(batch)):
            part = batch.rows(rows)
            logprobs, _ = self.policy_update.forward(part)
            loss = masked_nll(logprobs, part.loss_mask.to(self.device), total_tokens)
            if train:
                loss.backward()
            parts.append(loss.detach())
        return torch.stack(parts).sum()

    def fit(self, batch: TensorBatch) -> dict[str, float]:
        """One optimizer step on `batch`'s masked NLL."""
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        started = time.perf_counter()
        loss = self._nll_pass(batch, train=True)
        forward_backward = time.perf_counter() - started
        parameters = [p for group in self.optimizer.param_groups for p in group["params"]]
        grad_norm = torch.nn.utils.clip_grad_norm_(parameters, self.config.trainer.max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        loss_value, grad_value = torch.stack([loss, grad_norm.detach().float()]).tolist()
        return {
            "loss": loss_value,
            "grad_norm": grad_value,
            "time/forward_backward_s": forward_backward,
            "time/optimizer_s": time.perf_counter() - started - forward_backward,
        }

    @torch.no_grad()
    def loss_on(self, sequences: list[TrainSequence]) -> float:
        """The token-mean NLL of `sequences` under the current weights (no update)."""
        self.model.eval()
        return float(self._nll_pass(to_tensors(sequences, self.pad_id), train=False))

    def probe_loss(self) -> float:
        return self.loss_on(self.sequences[:PROBE_SEQUENCES])

    def train_step(self, step: int) -> dict[str, Any]:
        started = time.perf_counter()
        settings = self.config.sft
        indices = batch_indices(
            len(self.sequences), settings.batch_size, self.config.trainer.seed, step
        )
        chosen = [self.sequences[index] for index in indices]
        batch = to_tensors(chosen, self.pad_id)
        update = self.fit(batch)
        return {
            "step": step + 1,
            "reward_mean": float(np.mean([sequence.reward for sequence in chosen])),
            "sequences": len(chosen),
            "trained_tokens": int(batch.loss_mask.sum()),
            "epoch": (step + 1) * settings.batch_size / len(self.sequences),
            **update,
            "time/update_s": time.perf_counter() - started,
            "time/step_s": time.perf_counter() - started,
        }

    def start_metrics(self) -> dict[str, Any]:
        return {
            **super().start_metrics(),
            PROBE_LOSS: self.probe_loss(),
            "sft/sequences": len(self.sequences),
            "sft/trajectories": self.selection.selected,
            "sft/trajectories_recorded": self.selection.trajectories,
            "sft/held_out_episodes": self.selection.held_out,
            "sft/retokenized": self.retokenized,
        }

    def end_metrics(self) -> dict[str, Any]:
        return {PROBE_LOSS: self.probe_loss()}
