"""`BrowserHost`: one Chromium per process, driven by Playwright on a private event-loop thread.

Playwright objects belong to the thread that made them, while envs are called from anywhere:
the main thread, the execution engine's worker threads, a vector env's subprocess. So the host
owns an asyncio loop on a daemon thread and every browser call is a coroutine submitted to
it with a deadline; envs never touch Playwright objects themselves, and several envs in one
process run their browser work concurrently on the one loop.

The browser is launched lazily, shared by every env of the process (reference counted: the last
env to close stops it), and relaunched when it dies. Each episode gets a fresh context (its own
cookies, storage and cache); spares, one per env, are prepared in the background so a reset
does not wait for one. Cleanup does not rely on Playwright alone: the browser carries a marker
switch, and closing the host (or a process exit) kills the marked process group. The browser
runs under a small reaper (``reaper_program.py``, named to Playwright as the executable by a
two-line launch script) that reaps every one of its processes, orphans included, so neither a
crash nor a close leaves zombies behind.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import glob
import os
import secrets
import shlex
import shutil
import sys
import tempfile
import threading
from collections.abc import Awaitable, Callable, Coroutine, Hashable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from rllm_envs.core.async_env import Io
from rllm_envs.core.failures import InfrastructureFailure
from rllm_envs.core.loop_bridge import LoopBridge
from rllm_envs.web import processes

# Debian's Chromium, headless, with the background services that would reach the network off.
LAUNCH_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
    "--disable-breakpad",
    "--disable-dev-shm-usage",
)
# Every context opens a browser window, and every window of the full (new headless) Chromium
# preloads its address bar's popup as two WebUI pages: two more renderer processes running
# Chrome's own UI code, never shown headless. They were most of a context's CPU, which the
# background preparation of the next context took from the running episode's steps.
DISABLED_FEATURES = ("WebUIOmniboxPopup", "WebUIOmniboxAimPopup")
# Chromium honours only the last `--disable-features` switch, and Playwright passes its own
# (this one, as of Playwright 1.65), so ours has to repeat it. `_launch` reads the browser's
# real command line and relaunches with the union when a Playwright upgrade changed the list.
PLAYWRIGHT_DISABLED_FEATURES = (
    "AvoidUnnecessaryBeforeUnloadCheckSync",
    "DestroyProfileOnBrowserClose",
    "HttpsUpgrades",
    "HttpsFirstBalancedModeAutoEnable",
    "LensOverlay",
    "MediaRouter",
    "PaintHolding",
    "ThirdPartyStoragePartitioning",
    "AvoidCorsURLLoaderRestartOnRedirect",
    "TcpPortRandomizationWin",
    "OptimizationHints",
    "NetworkTimeServiceQuerying",
    "AimEnabled",
    "PreconnectToSearch",
    "msForceBrowserSignIn",
    "msEdgeUpdateLaunchServicesPreferredVersion",
)
DISABLE_FEATURES_SWITCH = "--disable-features="
SYSTEM_BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
# Slack on top of a coroutine's own deadline before the caller gives up on the loop thread.
LOOP_SLACK_SECONDS = 5.0
LAUNCH_TIMEOUT_SECONDS = 60.0
# How long a killed browser's reaper may take to reap its processes and exit.
REAP_TIMEOUT_SECONDS = 5.0


def bundled_chromium() -> str | None:
    """Playwright's own Chromium when `playwright install chromium` has put one in its cache."""
    root = os.environ.get("PLAYWRIGHT_BROWSERS_PATH") or os.path.expanduser(
        "~/.cache/ms-playwright"
    )
    found = sorted(glob.glob(os.path.join(root, "chromium-*", "chrome-linux*", "chrome")))
    return found[-1] if found else None


def find_browser(executable: str | None = None) -> str | None:
    """The Chromium to launch: `executable`, else Playwright's bundled one, else the system's."""
    if executable:
        return executable if os.path.exists(executable) else shutil.which(executable)
    bundled = bundled_chromium()
    if bundled:
        return bundled
    for name in SYSTEM_BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    return None


def reaper_launcher(executable: str, folder: str) -> str:
    """Write, in `folder`, a launch script that runs `executable` under the reaper; return its
    path, which Playwright is given as the browser's executable."""
    program = Path(folder) / "reaper_program.py"
    program.write_text(
        resources.files("rllm_envs.web").joinpath("reaper_program.py").read_text("utf-8"),
        encoding="utf-8",
    )
    command = [sys.executable, "-I", "-S", str(program), processes.REAPER_MARK, executable]
    script = Path(folder) / "browser"
    script.write_text(f'#!/bin/sh\nexec {shlex.join(command)} "$@"\n', encoding="utf-8")
    script.chmod(0o700)
    return str(script)


def launch_args(marker: str, playwright_features: tuple[str, ...]) -> list[str]:
    """The switches we add to Playwright's: the base set, the merged feature list, the marker."""
    features = list(dict.fromkeys((*playwright_features, *DISABLED_FEATURES)))
    return [*LAUNCH_ARGS, DISABLE_FEATURES_SWITCH + ",".join(features), marker]


def missing_features(command_line: list[str], known: tuple[str, ...]) -> tuple[str, ...]:
    """Features another `--disable-features` switch of the real command line (Playwright's,
    or a distribution's wrapper's) disables that `known` lacks: what our own switch, the last
    one, would otherwise turn back on."""
    covered = {*known, *DISABLED_FEATURES}
    missing: dict[str, None] = {}
    for arg in command_line:
        if arg.startswith(DISABLE_FEATURES_SWITCH):
            for name in arg[len(DISABLE_FEATURES_SWITCH) :].split(","):
                if name and name not in covered:
                    missing[name] = None
    return tuple(missing)


@dataclass
class Spare:
    context: Any
    page: Any
    data: Any = None  # what the kind's `prepare` returned (e.g. the session it joined)


@dataclass(frozen=True)
class ContextKind:
    """How an episode's context is set up. Spares are kept per `key`: contexts with the same
    key are prepared the same way, whichever env made them."""

    key: Hashable
    viewport: tuple[int, int]
    prepare: Callable[[Any, Any], Awaitable[Any]]  # (context, page) -> data, before use


@dataclass
class BrowserHost:
    """The loop thread, the Playwright driver and the browser (see the module docstring)."""

    executable: str
    serial: str = field(default_factory=lambda: secrets.token_hex(4))  # names the marker
    owner_pid: int = field(default_factory=os.getpid)
    closed: bool = False
    loop: asyncio.AbstractEventLoop | None = None
    bridge: LoopBridge | None = None  # for async callers (rllm_envs.core.loop_bridge)
    thread: threading.Thread | None = None
    playwright: Any = None
    browser: Any = None
    launches: int = 0
    playwright_features: tuple[str, ...] = PLAYWRIGHT_DISABLED_FEATURES
    spares: dict[Hashable, list[Spare]] = field(default_factory=dict)
    refills: dict[tuple[Hashable, Hashable], asyncio.Task] = field(default_factory=dict)
    owners: dict[Hashable, set[Hashable]] = field(default_factory=dict)  # envs per context kind
    lock: threading.Lock = field(default_factory=threading.Lock)
    launcher_folder: str | None = None  # holds the reaper's launch script while the host lives
    browser_lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # used on the loop only
    closing: set[asyncio.Future] = field(default_factory=set)  # contexts closing or unwanted

    @property
    def marker(self) -> str:
        return processes.host_marker(self.owner_pid, self.serial)

    # -- the loop ----------------------------------------------------------------------------
    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self.lock:
            if self.closed:
                raise InfrastructureFailure("browser", "the browser host has been shut down")
            if self.loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=loop.run_forever, name=f"rllm-web-browser-{self.serial}", daemon=True
                )
                thread.start()
                self.loop, self.thread, self.bridge = loop, thread, LoopBridge(loop)
            return self.loop

    def run(self, coroutine: Coroutine[Any, Any, Any], timeout: float) -> Any:
        """Run `coroutine` on the host loop; a browser failure if it overruns `timeout`."""
        loop = self._ensure_loop()
        future = asyncio.run_coroutine_threadsafe(asyncio.wait_for(coroutine, timeout), loop)
        try:
            return future.result(timeout + LOOP_SLACK_SECONDS)
        except (TimeoutError, asyncio.TimeoutError, concurrent.futures.TimeoutError) as error:
            future.cancel()
            raise self._overran(timeout) from error

    async def arun(self, coroutine: Coroutine[Any, Any, Any], timeout: float) -> Any:
        """:meth:`run`, awaited from another event loop: no thread waits on the host loop.
        Cancelling the caller cancels the coroutine on the host loop."""
        self._ensure_loop()
        assert self.bridge is not None
        bounded = asyncio.wait_for(coroutine, timeout)
        try:
            return await self.bridge.run(bounded, timeout + LOOP_SLACK_SECONDS)
        except (TimeoutError, asyncio.TimeoutError) as error:
            raise self._overran(timeout) from error

    def io(self, make: Callable[[], Coroutine[Any, Any, Any]], timeout: float) -> Io:
        """A coroutine for the host loop as a turn's I/O (:mod:`rllm_envs.core.async_env`)."""
        return Io(lambda: self.run(make(), timeout), lambda: self.arun(make(), timeout))

    def _overran(self, timeout: float) -> InfrastructureFailure:
        # A wedged browser poisons every later call: start over at the next use.
        self.kill_browser()
        return InfrastructureFailure(
            "browser", f"the browser did not answer within {timeout:.0f} s"
        )

    def submit(self, coroutine: Coroutine[Any, Any, Any]) -> None:
        """Run `coroutine` in the background (cleanup that nobody waits for)."""
        asyncio.run_coroutine_threadsafe(coroutine, self._ensure_loop())

    # -- the browser -------------------------------------------------------------------------
    async def ensure_browser(self) -> Any:
        # One relaunch at a time: a reset and a spare's preparation both find a dead browser,
        # and a second relaunch's clean-up (a kill by the shared marker) would take the first
        # one's new browser down mid-launch, leaving its calls waiting forever.
        async with self.browser_lock:
            if self.browser is not None and self.browser.is_connected():
                return self.browser
            await self._drop_browser()
            if self.playwright is None:
                from playwright.async_api import async_playwright

                self.playwright = await async_playwright().start()
            try:
                self.browser = await self._launch()
            except Exception:
                # The driver itself may be gone (killed with the browser): restart it once.
                await self._stop_playwright()
                from playwright.async_api import async_playwright

                self.playwright = await async_playwright().start()
                self.browser = await self._launch()
            self.launches += 1
            return self.browser

    async def _launch(self) -> Any:
        browser = await self._launch_once()
        missing = missing_features(
            processes.main_command_line(self.marker), self.playwright_features
        )
        if not missing:
            return browser
        # Playwright now disables more than we repeat: learn the list, launch again with it.
        self.playwright_features = (*self.playwright_features, *missing)
        try:
            await asyncio.wait_for(browser.close(), 5)
        except Exception:
            pass
        await self._end_browser_processes()
        return await self._launch_once()

    def _launch_path(self) -> str:
        """The reaper's launch script for this host's browser (written once), or the browser
        itself where no script can be written (its orphans are then left to PID 1 to reap)."""
        if self.launcher_folder is None:
            folder = tempfile.mkdtemp(prefix="rllm-web-browser-")
            try:
                reaper_launcher(self.executable, folder)
            except OSError:
                shutil.rmtree(folder, ignore_errors=True)
                return self.executable
            self.launcher_folder = folder
        return os.path.join(self.launcher_folder, "browser")

    async def _launch_once(self) -> Any:
        return await self.playwright.chromium.launch(
            executable_path=self._launch_path(),
            args=launch_args(self.marker, self.playwright_features),
            timeout=LAUNCH_TIMEOUT_SECONDS * 1000,
        )

    async def _drop_browser(self) -> None:
        browser, self.browser, self.spares = self.browser, None, {}
        if browser is not None:
            try:
                await asyncio.wait_for(browser.close(), 5)
            except Exception:
                pass  # already dead: the process group is killed below
        await self._end_browser_processes()

    async def _end_browser_processes(self) -> None:
        """Kill what is left of the browser and wait for its reaper to have reaped it all.
        Stopping the driver before then would kill the reaper too (the driver ends the
        process groups it started), handing the browser's orphans to PID 1 after all."""
        processes.kill_browsers(self.marker)
        deadline = asyncio.get_running_loop().time() + REAP_TIMEOUT_SECONDS
        while processes.reapers(self.marker) and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.02)

    async def _stop_playwright(self) -> None:
        playwright, self.playwright = self.playwright, None
        if playwright is not None:
            try:
                await asyncio.wait_for(playwright.stop(), 5)
            except Exception:
                pass

    def alive(self) -> bool:
        return self.browser is not None and self.browser.is_connected()

    def kill_browser(self) -> None:
        """Kill the browser now (from any thread); the next episode relaunches it."""
        processes.kill_browsers(self.marker)

    # -- contexts ----------------------------------------------------------------------------
    async def _new_spare(self, kind: ContextKind) -> Spare:
        browser = await self.ensure_browser()
        width, height = kind.viewport
        creating = asyncio.ensure_future(
            browser.new_context(
                viewport={"width": width, "height": height}, service_workers="block"
            )
        )
        try:
            # Shielded: a context the browser makes for a caller that was cancelled meanwhile
            # is closed once it exists, instead of living as long as the browser.
            context = await asyncio.shield(creating)
        except asyncio.CancelledError:
            self.closing.add(creating)
            creating.add_done_callback(self._close_unwanted)
            raise
        try:
            page = await context.new_page()
            return Spare(context, page, await kind.prepare(context, page))
        except BaseException:
            self.close_later(context)
            raise

    def _close_unwanted(self, creating: asyncio.Future) -> None:
        self.closing.discard(creating)
        if not creating.cancelled() and creating.exception() is None:
            self.close_later(creating.result())

    async def take_context(self, kind: ContextKind) -> Spare:
        """A fresh, prepared context and page: a spare when one is ready, else a new one.
        Call :meth:`refill` once the episode's page is up to prepare the next spare."""
        await self.ensure_browser()
        pool = self.spares.setdefault(kind.key, [])
        in_flight = [task for (key, _), task in self.refills.items() if key == kind.key]
        if not pool and in_flight:
            # A spare is on its way: waiting for it beats making another one beside it.
            await asyncio.wait(
                [asyncio.shield(task) for task in in_flight], return_when="FIRST_COMPLETED"
            )
        spare = pool.pop() if pool else None
        if spare is None or spare.page.is_closed():
            spare = await self._new_spare(kind)
        return spare

    def refill(self, kind: ContextKind, owner: Hashable) -> None:
        """Prepare a spare for `owner`'s next reset in the background (returns at once). Run
        after a reset rather than during it, so the two do not compete for the CPU. Each
        owner (env) keeps at most one spare on the way, so N envs sharing the browser find N
        spares ready, not one."""
        slot = (kind.key, owner)
        if slot not in self.refills:
            task = asyncio.get_running_loop().create_task(self._refill(kind))
            self.refills[slot] = task
            task.add_done_callback(lambda _task: self.refills.pop(slot, None))
        self.owners.setdefault(kind.key, set()).add(owner)

    def forget(self, owner: Hashable) -> None:
        """`owner` makes no more episodes: its spares are no longer wanted (any thread)."""
        for owners in list(self.owners.values()):  # a copy made under the GIL: thread-safe
            owners.discard(owner)

    def close_later(self, context: Any) -> None:
        """Close `context` in the background (call on the host loop)."""
        task = asyncio.get_running_loop().create_task(_close_quietly(context))
        self.closing.add(task)  # the loop keeps only weak references to its tasks
        task.add_done_callback(self.closing.discard)

    async def _refill(self, kind: ContextKind) -> None:
        try:
            spare = await self._new_spare(kind)
        except Exception:
            return  # the next reset makes its own
        pool = self.spares.setdefault(kind.key, [])
        if len(pool) >= len(self.owners.get(kind.key, ())) or not self.alive():
            await _close_quietly(spare.context)
        else:
            pool.append(spare)

    # -- shutdown ----------------------------------------------------------------------------
    async def _shutdown(self) -> None:
        for pool in self.spares.values():
            for spare in pool:
                await _close_quietly(spare.context)
        await self._drop_browser()
        await self._stop_playwright()

    def shutdown(self) -> None:
        """Close the browser and the driver and stop the loop; kill whatever is left."""
        if os.getpid() != self.owner_pid:
            return  # a forked child inherited this host (and its exit hook): not its browser
        with self.lock:
            loop, thread = self.loop, self.thread
            self.loop = self.thread = self.bridge = None
            self.closed = True
        if loop is not None:
            future = asyncio.run_coroutine_threadsafe(self._shutdown(), loop)
            try:
                future.result(15)
            except Exception:
                pass
            loop.call_soon_threadsafe(loop.stop)
            if thread is not None:
                thread.join(5)
            if not loop.is_running():
                loop.close()
        processes.kill_browsers(self.marker)
        if self.launcher_folder is not None:
            shutil.rmtree(self.launcher_folder, ignore_errors=True)


async def _close_quietly(context: Any) -> None:
    try:
        await asyncio.wait_for(context.close(), 5)
    except Exception:
        pass


@dataclass
class _ProcessHost:
    """The process's one host; envs hold references and the last to let go shuts it down. A
    forked child gets its own (threads and the driver's pipes do not survive a fork)."""

    pid: int = -1
    host: BrowserHost | None = None
    users: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def acquire(self, executable: str) -> BrowserHost:
        with self.lock:
            if self.host is None or self.pid != os.getpid() or self.host.executable != executable:
                if self.host is not None and self.pid == os.getpid():
                    # Another browser binary was asked for: a second host (rare), unshared.
                    host = BrowserHost(executable)
                    atexit.register(host.shutdown)
                    return host
                self.host, self.pid, self.users = BrowserHost(executable), os.getpid(), 0
                atexit.register(self.host.shutdown)
            self.users += 1
            return self.host

    def release(self, host: BrowserHost) -> None:
        with self.lock:
            if host is self.host:
                self.users -= 1
                if self.users > 0:
                    return
                self.host = None
        atexit.unregister(host.shutdown)
        host.shutdown()


# Process-wide by design: one browser per process is what makes resets cheap.
_PROCESS_HOST = _ProcessHost()


def acquire_host(executable: str) -> BrowserHost:
    return _PROCESS_HOST.acquire(executable)


def release_host(host: BrowserHost) -> None:
    _PROCESS_HOST.release(host)
