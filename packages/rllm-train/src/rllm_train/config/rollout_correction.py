"""``algorithm.rollout_correction``: how the native trainer corrects for the rollout engine.

The engine that samples the episodes scores its tokens with its own log-probs (the behaviour
policy); the trainer scores them again with its weights. When the two are not the same
computation (another process, another numeric precision, llama.cpp or vLLM kernels, weights a
few updates old), the policy gradient is off-policy, and the update weighs each token by the
ratio of the two probabilities, truncated or masked (verl's rollout correction, whose key names
these are: see ``verl.trainer.config.algorithm.RolloutCorrectionConfig`` and
docs/training/rollout-correction.md).

Only plain-Python checks live here, so that reading a config never imports torch or verl; the
trainer also runs verl's own checks on these values before it loads a model
(:func:`rllm_train.native.rollout_correction.check_with_verl`).
"""

from __future__ import annotations

from dataclasses import dataclass

AUTO = "auto"
IS_LEVELS = ("token", "sequence")


@dataclass
class RolloutCorrectionConfig:
    # auto: on exactly when the episodes were sampled by something other than the trained
    # model object itself (the native sampler's in-process LocalEngine serves that very object,
    # so auto is off there; an engine in another process or on a copy of the weights is not).
    # true/on and false/off force it. (YAML reads on/off as booleans, hence bool | str.)
    enabled: bool | str = AUTO
    # Importance weights pi_trainer / pi_engine: per token, or one per sequence (the product
    # over its tokens), or off (false/null) for rejection and metrics alone.
    rollout_is: bool | str | None = "token"
    # A number: weights above it are cut to it (truncated IS). "lower_upper" (e.g. "0.5_2.0"):
    # weights outside [lower, upper] become 0 (masked IS, "IcePop"). Write the window with a
    # decimal point in both numbers or quoted: YAML reads 0.5_2 as the number 0.52.
    rollout_is_threshold: float | str = 2.0
    rollout_is_batch_normalize: bool = False  # rescale the batch's weights to mean 1
    # Rejection: tokens (token_k*) or whole sequences (seq_sum_k*, seq_mean_k*, seq_max_k*)
    # whose divergence estimate passes rollout_rs_threshold leave the loss; comma-separated
    # options must all pass. off (false/null) = no rejection.
    rollout_rs: bool | str | None = None
    rollout_rs_threshold: float | str | None = None

    @property
    def is_level(self) -> str | None:
        """The IS level verl is given: None when importance weights are off."""
        return None if _is_off(self.rollout_is) else str(self.rollout_is)

    @property
    def rs_options(self) -> str | None:
        """The rejection options verl is given: None when rejection is off."""
        return None if _is_off(self.rollout_rs) else str(self.rollout_rs)


def _is_off(value: bool | str | None) -> bool:
    return value is None or value is False or str(value).strip() in ("", "off")


def ratio_bounds(threshold: float | str) -> tuple[float | None, float]:
    """(lower, upper) of an IS threshold: (None, upper) truncates, (lower, upper) masks.

    Raises ValueError with what is wrong (the caller names the key).
    """
    text = str(threshold).strip()
    lower_text, sep, upper_text = text.partition("_")
    if not sep:
        lower_text, upper_text = "", text
    try:
        upper = float(upper_text)
        lower = float(lower_text) if sep else None
    except ValueError:
        raise ValueError(
            f"expected a number or 'lower_upper' (e.g. 2.0 or 0.5_2.0), got {threshold!r}"
        ) from None
    if lower is None and upper <= 1.0:
        # The cap applies to every weight: at or below 1 it would shrink on-policy tokens too.
        raise ValueError(
            f"a truncation cap must be above 1, got {upper} (YAML reads an unquoted 0.5_2 as "
            "the number 0.52: write a lower_upper window as 0.5_2.0 or quote it)"
        )
    if lower is not None and not 0.0 < lower <= 1.0 <= upper:
        # A window that leaves out 1 would zero the tokens on which both policies agree.
        raise ValueError(f"a mask window must hold 1 (0 < lower <= 1 <= upper), got {text!r}")
    return lower, upper


def check_rollout_correction(section: RolloutCorrectionConfig, where: str) -> list[str]:
    """What is wrong with the section, one sentence per problem, each naming its key."""
    problems = []
    if not isinstance(section.enabled, bool) and section.enabled != AUTO:
        problems.append(
            f"{where}.enabled: {section.enabled!r} is not auto, true (on) or false (off)"
        )
    if section.is_level is not None:
        if section.is_level not in IS_LEVELS:
            problems.append(
                f"{where}.rollout_is: {section.rollout_is!r} is not one of "
                f"{', '.join(IS_LEVELS)} or off"
            )
        try:
            ratio_bounds(section.rollout_is_threshold)
        except ValueError as error:
            problems.append(f"{where}.rollout_is_threshold: {error}")
    if section.rs_options is not None and section.rollout_rs_threshold in (None, ""):
        problems.append(
            f"{where}.rollout_rs_threshold: rejection ({where}.rollout_rs="
            f"{section.rollout_rs}) needs a threshold (e.g. 2.0 for token_k3, 0.5_2.0 for "
            "token_k1)"
        )
    return problems
