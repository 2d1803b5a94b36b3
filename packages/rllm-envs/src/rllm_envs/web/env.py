"""`WebEnv`: web tasks in a real Chromium, driven through Playwright (contract in __init__.py)."""

from __future__ import annotations

import functools
import io
import json
import os
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from gymnasium import spaces as gym_spaces

from rllm_envs.core import spaces
from rllm_envs.core.async_env import NATIVE_ASYNC_KEY, Io, Turn, adrive, drive
from rllm_envs.core.extras import require_extra
from rllm_envs.core.failures import InfrastructureFailure
from rllm_envs.core.snapshots import SnapshotUnsupported
from rllm_envs.core.tasks import Row, TaskSet, TaskSources
from rllm_envs.core.text_env import TextEnv, Transition
from rllm_envs.setup.command import setup_command
from rllm_envs.web.actions import GRAMMAR, WebAction, parse_action
from rllm_envs.web.browser import (
    LAUNCH_TIMEOUT_SECONDS,
    LOOP_SLACK_SECONDS,
    BrowserHost,
    ContextKind,
    Spare,
    acquire_host,
    find_browser,
    release_host,
)
from rllm_envs.web.openended import PageState, check_open_task, load_reward
from rllm_envs.web.page import (
    PageView,
    Tab,
    Timeouts,
    act,
    boot_tab,
    close_tab,
    open_tab,
    origin_of,
    prepare_tab,
    read_storage,
    resolve_url,
)
from rllm_envs.web.server import (
    SESSION_COOKIE,
    SPARE_PATH,
    TaskServer,
    acquire_server,
    family_script,
    release_server,
)
from rllm_envs.web.tasks import FAMILIES, Family, Instance, suite_rows

# The task site's address as agents see it. The real one has a random port, different in every
# process; showing one fixed name keeps observations identical across processes and runs.
SITE_ALIAS = "http://tasks.local"
_OPEN_ENDED = (
    "WebEnv cannot snapshot an open-ended task ({url}): that site keeps server-side state rllm "
    "cannot capture, and rebuilding its page would send the episode's actions to it again"
)
DEFAULT_VIEWPORT = (800, 600)


@dataclass
class _Resources:
    """What an env holds outside Python; released by close() or when the env is collected."""

    server: TaskServer | None = None
    host: BrowserHost | None = None
    tab: Tab | None = None
    session: str | None = None
    owner_pid: int = field(default_factory=os.getpid)

    def end_episode(self) -> Tab | None:
        """Forget the episode; returns its tab, which the caller closes (when convenient)."""
        tab, self.tab = self.tab, None
        if self.session is not None and self.server is not None:
            self.server.close_session(self.session)
        self.session = None
        return tab

    def release(self) -> None:
        if os.getpid() != self.owner_pid:
            return  # a forked copy: the browser and server belong to the parent
        host, tab = self.host, self.tab
        if host is not None and tab is not None:
            try:
                host.run(close_tab(tab), 10)
            except InfrastructureFailure:
                pass  # the browser is gone, and the context with it
            self.tab = None
        self.end_episode()
        if host is not None:
            host.forget(id(self))
            release_host(host)
        if self.server is not None:
            release_server(self.server)
        self.server = self.host = None


@dataclass
class _Episode:
    """What an episode is about: a suite instance, or an open-ended page and reward."""

    goal: str
    family: Family | None = None
    instance: Instance | None = None
    url: str = ""  # open-ended only: suite pages are booted in place
    reward_function: Any = None
    view: PageView = field(default_factory=lambda: PageView("", "", ""))
    # What was done to the page since it opened (a snapshot's restore replays it).
    actions: list[PageAction] = field(default_factory=list)
    # The first page outside the task site the episode opened (an allowlisted origin), if any.
    off_site: str | None = None

    def note_site(self, url: str, server: TaskServer | None) -> None:
        origin = origin_of(url)
        if (
            self.off_site is None
            and server is not None
            and origin not in (server.origin, "about://", "://")
        ):
            self.off_site = origin


@dataclass(frozen=True)
class PageAction:
    """An action that ran on the page, with the address a ``goto`` opened (as shown to the
    agent: the task site's real port differs from process to process)."""

    action: WebAction
    url: str | None = None


@dataclass(frozen=True)
class PageFingerprint:
    """How a page reads, to check a restored one against: what the agent sees (the address,
    title and aria snapshot, refs included, as shown), the page's session and local storage,
    and the app state the task server holds for the episode."""

    url: str
    title: str
    snapshot: str
    storage: str
    app_state: str

    def difference(self, other: PageFingerprint) -> str:
        names = [
            name
            for name in self.__dataclass_fields__
            if getattr(self, name) != getattr(other, name)
        ]
        return ", ".join(names) or "nothing"


@dataclass(frozen=True)
class WebEpisodeState:
    """A web episode beyond the base fields: the page actions to replay and the page they
    must give (None once the episode ended), and the last screenshot."""

    actions: tuple[PageAction, ...]
    page: PageFingerprint | None
    last_image: np.ndarray = field(compare=False)


def plan_episode(task: Row) -> _Episode:
    """The episode a task row asks for; a clear ValueError for a row that cannot be run."""
    if "family" in task:
        family = FAMILIES.get(str(task["family"]))
        if family is None:
            raise ValueError(f"unknown web task family {task['family']!r}; see FAMILIES")
        instance = family.instance(int(task.get("seed", 0)))
        return _Episode(instance.goal, family, instance)
    check_open_task(task)
    return _Episode(task["goal"], url=task["url"], reward_function=load_reward(task.get("reward")))


def load_web_tasks(
    tasks: str | Sequence[Row] | TaskSet,
    families: Sequence[str] | None,
    seeds: int,
    column_map: Mapping[str, str] | None,
) -> TaskSet:
    if isinstance(tasks, str) and tasks == "suite":
        return TaskSet("web-suite", tuple(suite_rows(families, seeds)))
    return TaskSources().load(tasks, column_map=column_map)


class WebEnv(TextEnv):
    """See the package docstring (`rllm_envs.web`) for the full contract."""

    # The browser is driven on the host's loop: areset/astep await it, no thread waits.
    metadata = {**TextEnv.metadata, NATIVE_ASYNC_KEY: True}

    def __init__(
        self,
        tasks: str | Sequence[Row] | TaskSet = "suite",
        *,
        families: Sequence[str] | None = None,
        seeds: int = 100,
        screenshot: bool = False,
        viewport: tuple[int, int] = DEFAULT_VIEWPORT,
        allowlist: Sequence[str] = (),
        max_turns: int = 20,
        action_timeout: float = 5.0,
        navigation_timeout: float = 10.0,
        format_penalty: float = 0.0,
        browser: str | None = None,
        column_map: Mapping[str, str] | None = None,
        render_mode: str | None = None,
        max_observation_chars: int = spaces.DEFAULT_OBSERVATION_CHARS,
    ) -> None:
        require_extra("web", "playwright", *(("PIL",) if screenshot else ()))
        super().__init__(
            load_web_tasks(tasks, families, seeds, column_map),
            max_turns=max_turns,
            render_mode=render_mode,
            max_observation_chars=max_observation_chars,
        )
        width, height = (int(value) for value in viewport)
        if not (100 <= width <= 4000 and 100 <= height <= 4000):
            raise ValueError(f"viewport must be (width, height) in 100..4000, got {viewport}")
        executable = find_browser(browser)
        if executable is None:
            raise RuntimeError(
                "rllm/Web-v0 needs Chromium: `apt-get install chromium` (Debian), or "
                "`playwright install chromium`, or pass browser='/path/to/chromium'; then "
                f"`{setup_command('web')}` checks that it starts"
            )
        self.executable = executable
        self.viewport = (width, height)
        self.screenshot = bool(screenshot)
        self.allowlist = tuple(str(origin) for origin in allowlist)
        self.timeouts = Timeouts(float(action_timeout), float(navigation_timeout))
        self.format_penalty = float(format_penalty)
        self.text_space = self.observation_space
        if self.screenshot:
            self.observation_space = gym_spaces.Dict(
                {
                    "text": self.text_space,
                    "screenshot": gym_spaces.Box(0, 255, (height, width, 3), np.uint8),
                }
            )
        self.last_image = np.zeros((height, width, 3), np.uint8)
        self.episode: _Episode | None = None
        self.resources = _Resources()
        # Frees the browser share even when an env is dropped without close().
        self._finalizer = weakref.finalize(self, self.resources.release)

    def task_name(self) -> str:
        return "web"

    # -- the episode -------------------------------------------------------------------------
    def _acquire(self) -> tuple[TaskServer, BrowserHost]:
        resources = self.resources
        if resources.server is None:
            resources.server = acquire_server()
        if resources.host is None:
            resources.host = acquire_host(self.executable)
        return resources.server, resources.host

    def begin(self, task: Row) -> tuple[Any, dict[str, Any]]:
        return drive(self._begin_turn(task))

    async def abegin(self, task: Row) -> tuple[Any, dict[str, Any]]:
        return await adrive(self._begin_turn(task))

    def _begin_turn(self, task: Row) -> Turn[tuple[Any, dict[str, Any]]]:
        episode = plan_episode(task)  # a bad row fails here, before the last episode ends
        if episode.family is not None and not any(k in task for k in ("task_id", "id", "uid")):
            task["task_id"] = f"web/{episode.family.name}/{int(task.get('seed', 0))}"
        view, note = yield from self._open_turn(episode, ())
        intro = f"Web task. Goal: {episode.goal}\n\n{GRAMMAR}\n\n"
        info = {"goal": episode.goal, "url": self._shown(view.url)}
        if episode.family is not None:
            info["family"] = episode.family.name
        return self._observe(intro + self._page_text(view, note), view), info

    def _open_turn(
        self, episode: _Episode, replayed: Sequence[PageAction]
    ) -> Turn[tuple[PageView, str]]:
        """Make `episode` this env's episode on a fresh page, with `replayed` actions applied
        to it (a snapshot's restore); the page's view and the last note."""
        if self.resources.server is None or self.resources.host is None:
            yield Io.in_thread(self._acquire)  # starts the task server (once per process)
        server, host = self._acquire()
        allowed = (
            server.origin,
            *self.allowlist,
            *((origin_of(episode.url),) if episode.url else ()),
        )
        old_tab = self.resources.end_episode()
        self.episode = episode
        kind = self._context_kind(server, allowed, with_session=episode.family is not None)

        async def open_episode() -> tuple[Tab, PageView, str]:
            try:
                tab, view, note = await self._start_page(episode, kind, host, server)
                self.resources.tab = tab
                for action in replayed:
                    url = self._real(action.url) if action.url else None
                    view, note = await act(tab, action.action, url, False)
                return tab, view, note
            finally:
                # Housekeeping after the page is up, while the agent reads it.
                if old_tab is not None:
                    host.close_later(old_tab.context)
                host.refill(kind, owner=id(self.resources))

        budget = self.timeouts.budget() * (1 + len(replayed)) + LAUNCH_TIMEOUT_SECONDS
        tab, view, note = yield host.io(open_episode, budget)
        self.resources.tab, episode.view = tab, view
        episode.actions = list(replayed)
        return view, note

    async def _start_page(
        self, episode: _Episode, kind: ContextKind, host: BrowserHost, server: TaskServer
    ) -> tuple[Tab, PageView, str]:
        """On the host loop: take a spare context and put the episode's page in it."""
        spare = await host.take_context(kind)
        try:
            return await self._open_page(episode, spare, server)
        except BaseException:
            # Failed, timed out or cancelled (an astep's caller gave up) before the env held
            # the page: nobody else would close this context before the browser closes.
            host.close_later(spare.context)
            raise

    async def _open_page(
        self, episode: _Episode, spare: Spare, server: TaskServer
    ) -> tuple[Tab, PageView, str]:
        family, instance = episode.family, episode.instance
        if family is None or instance is None:
            return await open_tab(
                spare.context,
                spare.page,
                episode.url,
                timeouts=self.timeouts,
                screenshot=self.screenshot,
            )
        # The spare joined a reserved session and waits on the app's empty page: bind the
        # task to the session, then boot the page into it.
        server.bind_session(spare.data, family.name, family.title, instance.public)
        self.resources.session = spare.data
        return await boot_tab(
            spare.context,
            spare.page,
            path=f"/{family.name}",
            title=family.title,
            task=instance.public,
            script=family_script(server.assets, family.name),
            timeouts=self.timeouts,
            screenshot=self.screenshot,
        )

    def _context_kind(
        self, server: TaskServer, allowed: tuple[str, ...], *, with_session: bool
    ) -> ContextKind:
        timeouts = self.timeouts

        async def prepare(context: Any, page: Any) -> str | None:
            token = server.reserve_session() if with_session else None
            cookies = (
                [{"name": SESSION_COOKIE, "value": token, "url": server.origin}] if token else []
            )
            await prepare_tab(
                context,
                page,
                timeouts=timeouts,
                cookies=cookies,
                allowed_origins=allowed,
                warm_url=server.origin + SPARE_PATH if with_session else None,
            )
            return token

        key = (self.viewport, allowed, with_session, timeouts, id(server))
        return ContextKind(key, self.viewport, prepare)

    def act(self, action: str) -> Transition:
        return drive(self._act_turn(action))

    async def aact(self, action: str) -> Transition:
        return await adrive(self._act_turn(action))

    def _act_turn(self, action: str) -> Turn[Transition]:
        episode, tab, host = self.episode, self.resources.tab, self.resources.host
        assert episode is not None and tab is not None and host is not None
        parsed = parse_action(action)
        if parsed.action is None:
            text = f"Invalid action: {parsed.problem}\n{GRAMMAR}\n\n" + self._page_text(
                episode.view
            )
            penalty = -self.format_penalty if self.format_penalty else 0.0
            return Transition(
                self._observe(text, episode.view), penalty, info={"action_valid": False}
            )
        web_action = parsed.action
        info: dict[str, Any] = {"action": str(web_action)}
        if web_action.verb == "answer":
            return self._grade(episode, web_action.text, info)
        if web_action.ref is not None and f"[ref={web_action.ref}]" not in episode.view.snapshot:
            note = (
                f"No element has ref {web_action.ref} on this page (refs change when the page "
                "does: use one from the latest snapshot)."
            )
            return Transition(
                self._observe(self._page_text(episode.view, note), episode.view), info=info
            )
        url = None
        if web_action.verb == "goto":
            url = resolve_url(self._real(web_action.text or ""), episode.view.url)
            if not url.startswith(("http://", "https://")):
                note = "Only http:// and https:// addresses can be opened."
                text = self._page_text(episode.view, note)
                return Transition(self._observe(text, episode.view), info=info)
        # Logged before it runs: an action that fails half-way has still touched the page.
        episode.actions.append(PageAction(web_action, self._shown(url) if url else None))
        browse = functools.partial(act, tab, web_action, url, self.screenshot)
        view, note = yield host.io(browse, self.timeouts.budget())
        episode.view = view
        episode.note_site(view.url, self.resources.server)
        info["url"] = self._shown(view.url)
        if episode.family is not None and self._app_state().get("done"):
            return self._grade(episode, None, info)
        return Transition(self._observe(self._page_text(view, note), view), info=info)

    def _app_state(self) -> dict[str, Any]:
        server, session = self.resources.server, self.resources.session
        return server.state(session) if server is not None and session is not None else {}

    def _grade(self, episode: _Episode, answer: str | None, info: dict[str, Any]) -> Transition:
        if episode.family is not None and episode.instance is not None:
            correct = episode.family.check(episode.instance.expected, self._app_state(), answer)
            reward = 1.0 if correct else 0.0
            info["is_correct"] = correct
        elif episode.reward_function is not None:
            view = episode.view
            page = PageState(self._shown(view.url), view.title, self._shown(view.snapshot))
            try:
                reward = float(episode.reward_function(answer=answer, page=page, task=self.task))
            except Exception as error:  # the user's grader broke: not the agent's fault
                raise InfrastructureFailure(
                    "grader", f"the reward function failed: {error}"
                ) from error
            info["is_correct"] = reward > 0
        else:
            reward = 0.0
        if answer is not None:
            info["answer"] = answer
        outcome = "Your answer was recorded." if answer is not None else "The task was submitted."
        text = f"{outcome} The episode is over.\n\n" + self._page_text(episode.view)
        return Transition(self._observe(text, episode.view), reward, terminated=True, info=info)

    # -- observations ------------------------------------------------------------------------
    def _shown(self, text: str) -> str:
        server = self.resources.server
        return text.replace(server.origin, SITE_ALIAS) if server is not None else text

    def _real(self, url: str) -> str:
        server = self.resources.server
        return url.replace(SITE_ALIAS, server.origin, 1) if server is not None else url

    def _page_text(self, view: PageView, note: str = "") -> str:
        lines = [f"URL: {self._shown(view.url)}", f"Title: {view.title}"]
        if note:
            lines.append(f"Result: {note}")
        lines.append("Page:")
        lines.append(self._shown(view.snapshot) or "(empty page)")
        return "\n".join(lines)

    def _observe(self, text: str, view: PageView) -> str:
        if self.screenshot and view.screenshot is not None:
            self.last_image = decode_png(view.screenshot, self.viewport)
        return text

    def _emit(self, observation: str) -> Any:
        text = spaces.fit_observation(observation, self.text_space)
        if self.screenshot:
            self.last_observation = {"text": text, "screenshot": self.last_image.copy()}
        else:
            self.last_observation = text
        return self.last_observation

    def render(self) -> str | None:
        if self.render_mode != "ansi":
            return None
        observation = self.last_observation
        return observation["text"] if isinstance(observation, dict) else observation

    # -- snapshots (rllm_envs.core.snapshots) ---------------------------------------------
    # A page cannot be copied: its scripts keep state in memory (a wizard's answers), the
    # browser numbers element refs by the page's history, and the task app's state is on the
    # server. So a snapshot keeps what was done to the page, and a restore replays it on a
    # fresh page of the same task, then checks that the page reads exactly as it did.
    def capture_state(self) -> WebEpisodeState | None:
        episode = self.episode
        if self.task is None or episode is None:
            # Before an episode (how tools probe for support): refuse up front when the task
            # set holds open-ended rows, whose episodes could never be snapshotted.
            open_ended = next((row for row in self.tasks.rows if "family" not in row), None)
            if open_ended is not None:
                raise SnapshotUnsupported(_OPEN_ENDED.format(url=open_ended.get("url")))
            return None
        if self.episode_over:  # nothing left to rebuild: later steps never touch the page
            return WebEpisodeState(tuple(episode.actions), None, self.last_image.copy())
        if episode.family is None:
            raise SnapshotUnsupported(_OPEN_ENDED.format(url=episode.url))
        if episode.off_site is not None:
            raise SnapshotUnsupported(
                f"WebEnv cannot snapshot this episode: it opened {episode.off_site}, a site "
                "outside the task app whose server-side state rllm cannot capture"
            )
        return WebEpisodeState(
            tuple(episode.actions), self._fingerprint(episode.view), self.last_image.copy()
        )

    def restore_state(self, state: WebEpisodeState | None) -> None:
        if state is None or state.page is None:
            self._end_page()
            if state is not None:
                self.last_image = state.last_image.copy()
            return
        assert self.task is not None
        view, _ = drive(self._open_turn(plan_episode(self.task), state.actions))
        rebuilt = self._fingerprint(view)
        if rebuilt != state.page:
            self.episode_over = True  # the page is not where the snapshot was: no steps on it
            raise SnapshotUnsupported(
                f"WebEnv could not restore this snapshot: replaying its {len(state.actions)} "
                f"page action(s) gave a page whose {rebuilt.difference(state.page)} differs "
                "(the page does not behave the same way twice); the episode has ended"
            )
        self.last_image = state.last_image.copy()

    def _fingerprint(self, view: PageView) -> PageFingerprint:
        tab, host = self.resources.tab, self.resources.host
        assert tab is not None and host is not None
        storage = host.run(read_storage(tab), self.timeouts.action + LOOP_SLACK_SECONDS)
        app_state = json.dumps(self._app_state(), sort_keys=True)
        return PageFingerprint(
            self._shown(view.url), view.title, self._shown(view.snapshot), storage, app_state
        )

    def _end_page(self) -> None:
        tab, host = self.resources.end_episode(), self.resources.host
        if tab is not None and host is not None:
            host.submit(close_tab(tab))
        self.episode = None

    def close(self) -> None:
        self.resources.release()
        self.episode = None
        super().close()


def decode_png(data: bytes, viewport: tuple[int, int]) -> np.ndarray:
    """A screenshot as an (height, width, 3) uint8 array of exactly the viewport's size."""
    from PIL import Image

    width, height = viewport
    with Image.open(io.BytesIO(data)) as image:
        pixels = np.asarray(image.convert("RGB"), dtype=np.uint8)
    out = np.zeros((height, width, 3), np.uint8)
    rows, cols = min(height, pixels.shape[0]), min(width, pixels.shape[1])
    out[:rows, :cols] = pixels[:rows, :cols]
    return out


__all__ = ["SITE_ALIAS", "WebAction", "WebEnv"]
