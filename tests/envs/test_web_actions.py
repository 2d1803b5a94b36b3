"""The web action grammar and the network filter, as pure functions (no browser needed)."""

from __future__ import annotations

import pytest
from rllm_envs.web.actions import WebAction, parse_action
from rllm_envs.web.page import allowed_url_pattern, resolve_url


@pytest.mark.parametrize(
    ("reply", "action"),
    [
        ("click(e5)", WebAction("click", ref="e5")),
        ("I will press it: `click(e12)`", WebAction("click", ref="e12")),
        ("click([ref=f1e7])", WebAction("click", ref="f1e7")),
        ('fill(e3, "hello, world")', WebAction("fill", ref="e3", text="hello, world")),
        ("fill(ref=e3, 'it\\'s')", WebAction("fill", ref="e3", text="it's")),
        ('select(e4, "Blue")', WebAction("select", ref="e4", text="Blue")),
        ('press("Enter")', WebAction("press", text="Enter")),
        ("press(Control+a)", WebAction("press", text="Control+a")),
        ('scroll("DOWN")', WebAction("scroll", text="down")),
        ("goto(/login)", WebAction("goto", text="/login")),
        ("back()", WebAction("back")),
        ("answer(Paris, France)", WebAction("answer", text="Paris, France")),
        ("click(e1) no, rather click(e2)", WebAction("click", ref="e2")),
        ("<think>click(e1)</think>\nback()", WebAction("back")),
    ],
)
def test_the_last_action_in_a_reply_is_parsed(reply, action):
    assert parse_action(reply).action == action


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        ("", "no action found"),
        ("Let me think about it.", "no action found"),
        ("click(", "no closing parenthesis"),
        ("click(the button)", "not an element ref"),
        ("fill(e1)", 'expected fill(ref, "text"), got 1'),
        ('answer("unterminated)', "never closed"),
        ("scroll(left)", 'takes "up" or "down"'),
        ('press("a b")', "not a key name"),
        ("back(e1)", "takes no arguments"),
        ("reclick(e1)", "no action found"),
    ],
)
def test_malformed_replies_say_what_is_wrong(reply, problem):
    parsed = parse_action(reply)
    assert parsed.action is None and problem in parsed.problem


def test_actions_print_back_in_the_grammar():
    for action in (WebAction("fill", ref="e3", text='say "hi"'), WebAction("back")):
        assert parse_action(str(action)).action == action


def test_the_network_filter_matches_exactly_the_urls_outside_the_allowed_origins():
    blocked = allowed_url_pattern(["http://127.0.0.1:8000", "example.org", "docs.site:8443"])
    for url in [
        "http://127.0.0.1:8000/login",
        "http://127.0.0.1:8000",
        "https://example.org/a?b",
        "http://example.org:81/",
        "https://docs.site:8443/x",
    ]:
        assert not blocked.search(url), url
    for url in [
        "http://127.0.0.1:8001/",
        "http://127.0.0.1:8000.evil.com/",
        "https://evil.example.org/",
        "https://example.org.evil.com/",
        "https://docs.site/x",
        "ws://example.org.evil/",
    ]:
        assert blocked.search(url), url
    assert resolve_url("/cart", "http://h:1/shop/item") == "http://h:1/cart"
