"""Text spaces for multi-agent envs, laid out so PettingZoo's test suites accept them.

PettingZoo's ``api_test`` compares the dtype of an observation with its space's; a string has
none, so a bare text observation space fails it. Observations are therefore a ``Dict`` with one
``"text"`` key (the test checks only a key named ``"observation"``), over the package's
:class:`~rllm_envs.core.spaces.UnicodeText`: models read and write any Unicode, and its
``sample()`` produces the malformed replies envs must survive. Actions are plain text.
"""

from __future__ import annotations

from gymnasium import spaces

from rllm_envs.core.spaces import DEFAULT_ACTION_CHARS, UnicodeText, fit_observation

OBSERVATION_KEY = "text"
DEFAULT_OBSERVATION_CHARS = 8_192


def observation_space(max_chars: int = DEFAULT_OBSERVATION_CHARS) -> spaces.Dict:
    return spaces.Dict({OBSERVATION_KEY: UnicodeText(max_chars, min_length=0)})


def action_space(max_chars: int = DEFAULT_ACTION_CHARS) -> UnicodeText:
    return UnicodeText(max_chars, min_length=0)


def text_observation(text: str, space: spaces.Dict) -> dict[str, str]:
    """An observation of `space` holding `text` (clipped to the space's bound, saying so)."""
    return {OBSERVATION_KEY: fit_observation(text, space[OBSERVATION_KEY])}


def per_agent_spaces(
    agents: tuple[str, ...], max_observation_chars: int = DEFAULT_OBSERVATION_CHARS
) -> tuple[dict[str, spaces.Dict], dict[str, UnicodeText]]:
    """One observation and one action space per agent (PettingZoo wants the same object back
    on every call, so envs keep these dicts)."""
    return (
        {agent: observation_space(max_observation_chars) for agent in agents},
        {agent: action_space() for agent in agents},
    )
