"""`WebAgent` for ``rllm/Web-v0``: reads the page snapshot, replies with one browser action.

The env parses the reply itself (the last action in it counts), so the agent passes the whole
reply on. Page snapshots are long: ``max_history_turns`` bounds the prompt on long episodes
(at the cost of prefix-consistent multi-turn training segments, see :class:`TextAgent`).
"""

from __future__ import annotations

from typing import Any

from rllm_agents.agents.text_agent import TextAgent

WEB_SYSTEM_PROMPT = """\
You are a web agent operating a real browser to complete a task on a website.
Each observation shows the goal (first turn), the page URL and title, what your last action \
did (Result), and the page as an accessibility tree. Every element you can act on carries a \
label such as [ref=e12] or [ref=f1e7]; refs change when the page changes, so always use refs \
from the latest page.

Write at most a sentence or two of reasoning, then end your reply with exactly one action:
  click(ref)              e.g. click(e12)
  fill(ref, "text")       type into a text box, replacing its content
  select(ref, "option")   choose an option of a drop-down list (combobox)
  press("Enter")          press a key: Enter, Tab, Escape, ArrowDown, Backspace...
  scroll("down")          or scroll("up")
  goto(url)               open a URL; a path such as /login stays on this site
  back()                  go to the previous page
  answer("text")          give the final answer when the task asks a question; this ends \
the episode

Tasks that ask you to submit, save, confirm or place something end when you press that \
button. Tasks that ask a question end with answer("...")."""


class WebAgent(TextAgent):
    """A :class:`TextAgent` with the web instructions; screenshots are left to the env's text."""

    system_prompt = WEB_SYSTEM_PROMPT

    def format_observation(self, observation: Any, info: dict[str, Any]) -> str:
        # Dict observations (screenshot mode) carry the page text under "text"; a text model
        # reads that, and a vision model's agent would add the image here.
        if isinstance(observation, dict):
            observation = observation.get("text", "")
        return str(observation)
