"""Stage ``browser``: rllm/Web-v0's Chromium starts here, headless, and renders a page.

Nothing to build: the browser is Playwright's own Chromium (``playwright install chromium``)
or the system's (``apt-get install chromium``), found the way the env finds it. The check
launches it the way the env does (under the env's process reaper, with its switches) and
renders one page, so a browser that is there but cannot start is caught here, not mid-episode.
"""

from __future__ import annotations

from typing import Any

from rllm_envs.core.extras import MissingExtraError, require_extra
from rllm_envs.setup.base import SetupError, SetupRun, Stage, StageFailed, StageProgress, short

_PROBE_PAGE = "<title>rllm</title><p>ready</p>"


async def _render(browser: Any) -> str:
    page = await browser.new_page()
    try:
        await page.set_content(_PROBE_PAGE)
        return await page.locator("p").inner_text()
    finally:
        await page.close()


def check_browser(run: SetupRun, progress: StageProgress) -> str:
    try:
        require_extra("web", "playwright")
    except MissingExtraError as error:
        raise SetupError(str(error)) from error
    from rllm_envs.web.browser import LAUNCH_TIMEOUT_SECONDS, BrowserHost, find_browser

    executable = find_browser()
    if executable is None:
        raise SetupError(
            "rllm/Web-v0 needs Chromium and none was found: apt-get install chromium (Debian), "
            "or playwright install chromium"
        )
    progress.note(f"launching {executable}")
    host = BrowserHost(executable)
    try:
        browser = host.run(host.ensure_browser(), LAUNCH_TIMEOUT_SECONDS)
        rendered = host.run(_render(browser), LAUNCH_TIMEOUT_SECONDS)
        version = browser.version
    except Exception as error:
        raise StageFailed(f"{executable} did not start or render a page: {short(error)}") from error
    finally:
        host.shutdown()
    if rendered != "ready":
        raise StageFailed(f"{executable} rendered {rendered!r} instead of the probe page")
    return f"{executable} (Chromium {version}) renders headless"


STAGE = Stage("browser", "Chromium for rllm/Web-v0", check_browser)
