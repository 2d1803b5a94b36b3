"""The training algorithms, as one table both backends and the config read.

Each entry says what an algorithm is made of - verl's advantage estimator, whether its
baseline is the other samples of the same task, whether it learns a value function, keeps
per-role baselines, fine-tunes on recorded episodes or learns from a teacher alone - and which
backends run it, with the reason the others cannot. Code asks the entry
(``algorithm(name).learns_values``) instead of comparing names; adding an algorithm is adding a
row (verl's own ``register_adv_est`` is the model). Plain data: importing this module imports neither torch nor verl.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

BOTH = frozenset({"native", "verl"})
NATIVE_ONLY = frozenset({"native"})
VERL_ONLY = frozenset({"verl"})


@dataclass(frozen=True)
class Algorithm:
    """One algorithm (see the module docstring)."""

    name: str
    # verl's advantage estimator (``core_algos.get_adv_estimator_fn``); None: advantages come
    # from elsewhere (per-role baselines) or there are none (fine-tuning).
    estimator: str | None
    backends: frozenset[str] = BOTH
    # backend -> why it cannot run this algorithm (for each backend not in `backends`).
    refused: Mapping[str, str] = field(default_factory=dict)
    compares_group: bool = False  # its baseline is the task's other samples: needs n >= 2
    learns_values: bool = False  # trains a value function (PPO: a value head / critic)
    role_baselines: bool = False  # running baselines per role, kept across steps (RAE)
    greedy_baseline: bool = False  # a greedy rollout of each task is its baseline (ReMax)
    plays_tasks: bool = True  # False: trains on recorded episodes, plays none (SFT)
    # Its advantages are a teacher's per-token log-probs alone (distill; config/distill.py).
    teacher_only: bool = False

    def runs_on(self, backend: str) -> bool:
        return backend in self.backends


_ENTRIES = (
    Algorithm("grpo", "grpo", compares_group=True),
    Algorithm("rloo", "rloo", compares_group=True),
    Algorithm("reinforce_plus_plus", "reinforce_plus_plus"),
    # PPO: GAE over a learned value function (native: a value head on the policy; verl: a
    # critic model started from the policy's weights).
    Algorithm("ppo", "gae", learns_values=True),
    Algorithm(
        "rae",
        None,
        NATIVE_ONLY,
        refused={
            "verl": "rae keeps per-role running baselines across steps, which verl's advantage "
            "estimators do not; use it with --backend native, or grpo/rloo on verl"
        },
        role_baselines=True,
    ),
    Algorithm(
        "remax",
        "remax",
        VERL_ONLY,
        refused={
            "native": "ReMax's baseline is a greedy rollout of each task, which verl's trainer "
            "runs between sampling and the update"
        },
        greedy_baseline=True,
    ),
    # verl's other estimators: its trainer supplies what they need beyond the rewards.
    *(
        Algorithm(
            name,
            name,
            VERL_ONLY,
            refused={
                "native": f"{name} is one of verl's estimators the native trainer does not run"
            },
            compares_group=name in ("opo", "gpg"),
        )
        for name in ("reinforce_plus_plus_baseline", "opo", "gpg")
    ),
    Algorithm(
        "sft",
        None,
        NATIVE_ONLY,
        refused={
            "verl": "fine-tuning on recorded episodes is a step of the native trainer, and verl's "
            "own SFT trainer is not wired to rllm's episodes"
        },
        plays_tasks=False,
    ),
    # On-policy distillation: each generated token's advantage is the teacher's log-prob of it
    # minus the student's (rllm_train.native.distill).
    Algorithm(
        "distill",
        None,
        NATIVE_ONLY,
        refused={
            "verl": "the teacher scores the student's tokens in the native trainer's step; "
            "verl 0.9.1 has its own on-policy distillation (its distillation section: a teacher "
            "served by vLLM or SGLang on GPUs of its own, beside the trainer's), which rllm's "
            "verl backend does not wire"
        },
        teacher_only=True,
    ),
)

ALGORITHMS: Mapping[str, Algorithm] = MappingProxyType({entry.name: entry for entry in _ENTRIES})
ALGORITHM_NAMES: tuple[str, ...] = tuple(ALGORITHMS)


def algorithm(name: str) -> Algorithm:
    """The entry of `name` (a ValueError naming the choices for an unknown one)."""
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise ValueError(
            f"unknown algorithm {name!r}; choose from {', '.join(ALGORITHMS)}"
        ) from None


def names_where(predicate) -> tuple[str, ...]:
    """The algorithms whose entry satisfies `predicate`, in table order (for messages)."""
    return tuple(entry.name for entry in _ENTRIES if predicate(entry))
