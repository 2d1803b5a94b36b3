"""What an episode does to its page: open it, apply one action, read it back.

These coroutines run on the browser host's loop. Mistakes the agent can cause (a stale ref, an
option that does not exist, a blocked URL, a page that does not respond in time) come back as a
note for the observation; only a dead browser or renderer is an infrastructure failure.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urljoin, urlsplit

from rllm_envs.core.failures import InfrastructureFailure
from rllm_envs.web.actions import WebAction

SNAPSHOT_ATTEMPTS = 3
ERROR_LINE_CHARS = 300


@dataclass(frozen=True)
class Timeouts:
    action: float = 5.0  # seconds for one click, fill, key press...
    navigation: float = 10.0  # seconds for a page load

    def budget(self) -> float:
        """An upper bound on one step's browser time (action, load, snapshot, screenshot)."""
        return 2 * self.action + self.navigation + 2 * self.action


@dataclass(frozen=True)
class PageView:
    url: str
    title: str
    snapshot: str
    screenshot: bytes | None = None


@dataclass
class Tab:
    """An episode's browser context and page, and whether the renderer died."""

    context: Any
    page: Any
    timeouts: Timeouts
    crashed: bool = False


def watch(context: Any, page: Any, timeouts: Timeouts) -> Tab:
    """A :class:`Tab` that learns from the page's events when its renderer crashes."""
    tab = Tab(context, page, timeouts)
    page.on("crash", lambda _page: setattr(tab, "crashed", True))
    return tab


def allowed_url_pattern(origins: Iterable[str]) -> re.Pattern[str]:
    """A regex matching every URL *outside* `origins` (those requests are aborted).

    An origin is ``scheme://host[:port]``, or ``host[:port]`` for both http and https. The
    regex runs inside Playwright's driver, so allowed requests never wait for Python.
    """
    alternatives = []
    for origin in origins:
        if "://" in origin:
            alternatives.append(re.escape(origin.rstrip("/")))
        else:
            host = origin.strip().rstrip("/")
            port = "" if ":" in host else r"(?::\d+)?"
            alternatives.append(r"https?://" + re.escape(host) + port)
    allowed = "|".join(alternatives) or "(?!)"
    return re.compile(rf"^(?!(?:{allowed})(?:[/?#]|$))[a-z][a-z0-9+.-]*://", re.IGNORECASE)


def origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


async def _abort(route: Any) -> None:
    await route.abort("blockedbyclient")


async def prepare_tab(
    context: Any,
    page: Any,
    *,
    timeouts: Timeouts,
    cookies: list[Mapping[str, Any]],
    allowed_origins: Iterable[str],
    warm_url: str | None = None,
) -> None:
    """Set a fresh context up before its episode: cookies, network policy, time limits; with
    `warm_url`, also load that page and read it once, so the renderer process and Playwright's
    page-side scripts are ready before the episode needs them."""
    page.set_default_timeout(timeouts.action * 1000)
    page.set_default_navigation_timeout(timeouts.navigation * 1000)
    if cookies:
        await context.add_cookies([dict(cookie) for cookie in cookies])
    await context.route(allowed_url_pattern(allowed_origins), _abort)
    if warm_url is not None:
        await page.goto(warm_url, wait_until="domcontentloaded")
        await page.aria_snapshot(mode="ai")
        await page.title()


async def open_tab(
    context: Any, page: Any, url: str, *, timeouts: Timeouts, screenshot: bool
) -> tuple[Tab, PageView, str]:
    """Open `url` in a prepared context and read the page."""
    tab = watch(context, page, timeouts)
    note = await _guard(tab, _goto(page, url))
    return tab, await read_page(tab, screenshot), note


_BOOT = "([path, title, task, script]) => boot(path, title, task, script)"


async def boot_tab(
    context: Any,
    page: Any,
    *,
    path: str,
    title: str,
    task: Any,
    script: str,
    timeouts: Timeouts,
    screenshot: bool,
) -> tuple[Tab, PageView, str]:
    """Turn a warm spare page into the task's page in place (no new document to load)."""
    tab = watch(context, page, timeouts)
    note = await _guard(tab, _evaluate(page, _BOOT, [path, title, task, script]))
    return tab, await read_page(tab, screenshot), note


async def _evaluate(page: Any, expression: str, argument: Any) -> str:
    await page.evaluate(expression, argument)
    return ""


async def _goto(page: Any, url: str) -> str:
    await page.goto(url, wait_until="domcontentloaded")
    return ""


async def _click(tab: Tab, action: WebAction) -> str:
    await _element(tab, action.ref).click()
    return f"Clicked {action.ref}."


async def _fill(tab: Tab, action: WebAction) -> str:
    await _element(tab, action.ref).fill(action.text)
    return f"Filled {action.ref}."


async def _select(tab: Tab, action: WebAction) -> str:
    # A string matches an option's value or its label.
    await _element(tab, action.ref).select_option(action.text)
    return f"Selected {action.text!r} in {action.ref}."


async def _press(tab: Tab, action: WebAction) -> str:
    # Through the focused element when there is one: unlike `keyboard.press`, an element's
    # press waits for a page load it starts (Enter submitting a form).
    focused = tab.page.locator("*:focus")
    if await focused.count():
        await focused.first.press(action.text)
    else:
        await tab.page.keyboard.press(action.text)
    return f"Pressed {action.text}."


async def _scroll(tab: Tab, action: WebAction) -> str:
    sign = 1 if action.text == "down" else -1
    await tab.page.evaluate("(sign) => window.scrollBy(0, sign * window.innerHeight * 0.8)", sign)
    return f"Scrolled {action.text}."


async def _back(tab: Tab, action: WebAction) -> str:
    response = await tab.page.go_back(wait_until="domcontentloaded")
    if response is None and tab.page.url in ("", "about:blank"):
        return "There is no previous page."
    return "Went back."


ACTIONS: Mapping[str, Callable[[Tab, WebAction], Awaitable[str]]] = {
    "click": _click,
    "fill": _fill,
    "select": _select,
    "press": _press,
    "scroll": _scroll,
    "back": _back,
}


def _element(tab: Tab, ref: str | None) -> Any:
    return tab.page.locator(f"aria-ref={ref}")


async def act(
    tab: Tab, action: WebAction, url: str | None, screenshot: bool
) -> tuple[PageView, str]:
    """Apply `action` (``goto`` with its resolved `url`); the new page view and a note."""
    if action.verb == "goto":
        operation = _goto(tab.page, url or "")
    else:
        operation = ACTIONS[action.verb](tab, action)
    note = await _guard(tab, operation)
    return await read_page(tab, screenshot), note


async def _guard(tab: Tab, operation: Awaitable[str]) -> str:
    """Run a page operation; agent-caused errors become a note, a dead browser a failure."""
    from playwright.async_api import Error
    from playwright.async_api import TimeoutError as PageTimeout

    try:
        # Some calls (evaluate, key presses) have no timeout of their own: bound them all.
        return await asyncio.wait_for(operation, tab.timeouts.action + tab.timeouts.navigation)
    except (PageTimeout, TimeoutError):
        await _check_alive(tab)
        return "The page did not respond in time; the action may not have taken effect."
    except Error as error:
        await _check_alive(tab, error)
        return "That did not work: " + _first_line(error)


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    line = text[0] if text else type(error).__name__
    if "ERR_BLOCKED_BY_CLIENT" in line:
        return "this address is outside the sites this browser may visit."
    return line[:ERROR_LINE_CHARS]


# Errors that mean the page or browser went away. The "disconnected" event can arrive just
# after the error itself, so these wait a moment for it before calling the browser alive.
_GONE_WORDS = ("closed", "crashed", "disconnected")
GONE_WAIT_SECONDS = 1.0


async def _check_alive(tab: Tab, error: BaseException | None = None) -> None:
    waits = int(GONE_WAIT_SECONDS / 0.05)
    if error is None or not any(word in str(error) for word in _GONE_WORDS):
        waits = 0
    for attempt in range(waits + 1):
        browser = tab.context.browser
        gone = browser is not None and not browser.is_connected()
        if tab.crashed or tab.page.is_closed() or gone:
            raise InfrastructureFailure("browser", "the browser or its page crashed")
        if attempt < waits:
            await asyncio.sleep(0.05)


async def read_page(tab: Tab, screenshot: bool) -> PageView:
    """URL, title and the aria snapshot with refs (and a PNG screenshot when asked)."""
    from playwright.async_api import Error

    page = tab.page
    for attempt in range(SNAPSHOT_ATTEMPTS):
        try:
            # A click or key press may have started a navigation: read the new document.
            await page.wait_for_load_state(
                "domcontentloaded", timeout=tab.timeouts.navigation * 1000
            )
            # `title()` has no timeout of its own and a busy page never answers: bound them all.
            return await asyncio.wait_for(
                _read(page, screenshot, tab.timeouts), tab.timeouts.action
            )
        except (Error, TimeoutError) as error:
            await _check_alive(tab, error)
            if isinstance(error, TimeoutError) or "Timeout" in str(error):
                return PageView(page.url, "", "(the page is not responding)")
            if attempt + 1 == SNAPSHOT_ATTEMPTS:
                return PageView(page.url, "", f"(the page could not be read: {_first_line(error)})")
            await asyncio.sleep(0.05)  # a navigation replaced the document mid-read
    raise AssertionError("unreachable")


async def _read(page: Any, screenshot: bool, timeouts: Timeouts) -> PageView:
    limit = timeouts.action * 1000
    reads = [page.aria_snapshot(mode="ai", timeout=limit), page.title()]
    if screenshot:
        reads.append(page.screenshot(type="png", timeout=limit))
    # One round trip's wait for all of them: the driver serves them concurrently.
    results = await asyncio.gather(*reads, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    snapshot, title, *image = results
    return PageView(page.url, title, snapshot, image[0] if image else None)


_STORAGE = """() => JSON.stringify([sessionStorage, localStorage].map(
    (store) => Object.keys(store).sort().map((key) => [key, store.getItem(key)])))"""


async def read_storage(tab: Tab) -> str:
    """The page's session and local storage as JSON (keys sorted): state its scripts keep
    across page loads that the page itself may not show."""
    from playwright.async_api import Error

    try:
        return await tab.page.evaluate(_STORAGE)
    except Error as error:  # e.g. an opaque origin has no storage
        await _check_alive(tab, error)
        return f"(storage unreadable: {_first_line(error)})"


async def close_tab(tab: Tab) -> None:
    try:
        await asyncio.wait_for(tab.context.close(), 5)
    except Exception:
        pass  # a dead browser took the context with it


def resolve_url(target: str, current: str) -> str:
    """`target` made absolute against the current page (so ``/login`` stays on this site)."""
    return urljoin(current or "", target.strip())
