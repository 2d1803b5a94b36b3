"""rllm/Web-v0 with a real Chromium: every task family solved by its scripted solution, wrong
answers, invalid actions, crash recovery, cleanup, the network allowlist, hung pages, the
open-ended mode, screenshots and threads. (check_env, vector envs and the fuzz test come from
the conformance suite.)"""

from __future__ import annotations

import concurrent.futures
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from tests.benchmark_runs import run_benchmark
from tests.envs.web_support import outside_site, require_web

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def env():
    require_web()
    env = gym.make("rllm/Web-v0").unwrapped
    yield env
    env.close()


@pytest.fixture(scope="module")
def outside():
    with outside_site() as origin:
        yield origin


def title_reward(answer, page, task):
    """An open-ended reward function named by import string in a test row."""
    return 1.0 if answer == task["expected"] and page.title == "Outside" else 0.0


# -- every family, solved through the action grammar ----------------------------------------
def _families():
    from rllm_envs.web.tasks import FAMILIES

    return sorted(FAMILIES)


@pytest.mark.parametrize("family", _families())
def test_every_family_is_solved_by_its_scripted_solution(env, family):
    from rllm_envs.web.solver import play

    seed = 1000 + _families().index(family)  # a different instance per family, any seed works
    result = play(env, {"family": family, "seed": seed})
    assert result["reward"] == 1.0 and result["terminated"], result["last_observation"][-2000:]


def test_enter_that_submits_a_form_shows_the_page_it_loads(env):
    from rllm_envs.web.solver import step_action
    from rllm_envs.web.tasks import FAMILIES

    for seed in range(5):  # the load used to race the snapshot now and then
        instance = FAMILIES["search"].instance(seed)
        observation, _ = env.reset(options={"task": {"family": "search", "seed": seed}})
        env.step(step_action(instance.solution[0], observation))
        text, *_ = env.step('press("Enter")')
        assert "?q=" in text and "result(s)" in text, text


def test_suite_has_at_least_20_families_with_varied_seeded_instances():
    from rllm_envs.web.server import SITE
    from rllm_envs.web.tasks import FAMILIES

    assert len(FAMILIES) >= 20
    for family in FAMILIES.values():
        assert (SITE / f"{family.name}.js").is_file()  # its page ships with the package
        instances = {repr(family.instance(seed)) for seed in range(40)}
        assert len(instances) >= 20, family.name  # seeds give new instances
        assert family.instance(7) == family.instance(7)  # and the same seed the same one


# -- wrong outcomes, invalid actions -------------------------------------------------------
def test_wrong_answer_and_wrong_submission_get_zero(env):
    from rllm_envs.web.solver import step_action
    from rllm_envs.web.tasks.base import Step

    env.reset(options={"task": {"family": "table_cell", "seed": 3}})
    _, reward, terminated, _, info = env.step('answer("certainly not this")')
    assert (reward, terminated, info["is_correct"]) == (0.0, True, False)

    observation, _ = env.reset(options={"task": {"family": "dropdown", "seed": 3}})
    from rllm_envs.web.tasks import FAMILIES

    wanted = FAMILIES["dropdown"].instance(3).expected["state"]["country"]
    other = next(o for o in FAMILIES["dropdown"].instance(3).public["options"] if o != wanted)
    observation, *_ = env.step(
        step_action(Step("select", "combobox", "Country", other), observation)
    )
    _, reward, terminated, _, info = env.step(
        step_action(Step("click", "button", "Save"), observation)
    )
    assert (reward, terminated, info["is_correct"]) == (0.0, True, False)


def test_invalid_actions_explain_themselves_and_do_nothing(env):
    observation, _ = env.reset(options={"task": {"family": "login", "seed": 0}})
    for action, reason in [
        ("I am not sure what to do", "no action found"),
        ("click(the button)", "not an element ref"),
        ('fill(e3, "unterminated)', "never closed"),
        ("scroll(sideways)", "up"),
    ]:
        started = time.perf_counter()
        text, reward, terminated, truncated, info = env.step(action)
        assert time.perf_counter() - started < 0.05  # parsing failures never touch the browser
        assert info["action_valid"] is False and not terminated and not truncated
        assert "Invalid action" in text and reason in text and "answer(" in text
    text, *_, info = env.step("click(e999)")
    assert info["action_valid"] and "No element has ref e999" in text
    text, *_ = env.step("goto(javascript:alert(1))")
    assert "Only http:// and https://" in text


def test_seed_alone_picks_the_task_and_repeats_it(env):
    first, info = env.reset(seed=11)
    again, info_again = env.reset(seed=11)
    assert first == again and info["task_id"] == info_again["task_id"]
    assert info["task_id"].startswith("web/")


# -- reliability -------------------------------------------------------------------------
def test_crashed_browser_ends_the_episode_and_is_relaunched(env):
    from rllm_envs.web import processes

    env.reset(options={"task": {"family": "counter", "seed": 1}})
    host = env.resources.host
    launches = host.launches
    assert processes.kill_browsers(host.marker) == 1
    deadline = time.time() + 10
    while host.alive() and time.time() < deadline:
        time.sleep(0.05)
    # A reset after a crash between episodes relaunches the browser.
    observation, _ = env.reset(options={"task": {"family": "counter", "seed": 1}})
    assert host.launches == launches + 1 and "Dinner booking" in observation
    # A crash mid-episode ends that episode as an infrastructure failure.
    processes.kill_browsers(host.marker)
    ref = observation.split('button "Add guest" [ref=')[1].split("]")[0]
    _, reward, terminated, truncated, info = env.step(f"click({ref})")
    assert info["failure"] == "browser" and truncated and not terminated and reward == 0.0
    observation, _ = env.reset(options={"task": {"family": "counter", "seed": 1}})
    assert "Dinner booking" in observation and host.launches == launches + 2


def _chromium_pids() -> set[int]:
    from rllm_envs.web import processes

    return processes.named(("chromium", "chrome"))


CHILD = textwrap.dedent(
    """
    import os, sys, time, gymnasium as gym
    from rllm_envs.web import processes
    env = gym.make("rllm/Web-v0")
    env.reset(seed=0)
    host = env.unwrapped.resources.host
    print("browser", *processes.browser_processes(host.marker), flush=True)
    if sys.argv[1] == "close":
        env.close()
        print("left", *processes.browser_processes(host.marker), flush=True)
    elif sys.argv[1] == "error":
        raise RuntimeError("an error nobody catches, and no close()")
    else:
        time.sleep(120)
    """
)


def _wait_until_gone(pids: set[int], seconds: float = 15.0) -> set[int]:
    deadline = time.time() + seconds
    while time.time() < deadline:
        left = pids & _chromium_pids()
        if not left:
            return left
        time.sleep(0.1)
    return pids & _chromium_pids()


@pytest.mark.parametrize("ending", ["close", "error", "sigkill"])
def test_no_chromium_process_outlives_close_an_error_or_a_killed_owner(ending):
    require_web()
    before = _chromium_pids()
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, ending],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,  # the "error" child's traceback is expected
        text=True,
        cwd=REPO,
    )
    try:
        line = child.stdout.readline().split()
        assert line and line[0] == "browser" and len(line) > 2, line
        browser = {int(pid) for pid in line[1:]}
        if ending == "close":
            assert child.stdout.readline().split() == ["left"]
            child.wait(30)
        elif ending == "error":
            assert child.wait(30) == 1
        else:
            started = _chromium_pids() - before
            os.kill(child.pid, signal.SIGKILL)
            child.wait(10)
            browser |= started
        assert _wait_until_gone(browser) == set()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


REAPING_CHILD = textwrap.dedent(
    """
    import ctypes, json, os, time, gymnasium as gym
    from rllm_envs.web import processes

    # Stand in for a container whose PID 1 is the training script: every orphan of the
    # browser that the env does not reap itself comes here and, never reaped, stays a zombie.
    assert ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0  # CHILD_SUBREAPER

    def descendants():
        parents, names = {}, {}
        for entry in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    stat = handle.read()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[-1].split()
            parents[int(entry)] = int(fields[1])
            names[int(entry)] = (fields[0], stat[stat.find("(") + 1 : stat.rfind(")")])
        found, todo = [], [os.getpid()]
        while todo:
            parent = todo.pop()
            for pid, ppid in parents.items():
                if ppid == parent:
                    found.append([pid, *names[pid]])
                    todo.append(pid)
        return found

    def settled():
        # Reaped within a few seconds, or never: a zombie handed to us is never reaped.
        deadline = time.time() + 5
        while time.time() < deadline:
            left = [p for p in descendants() if p[1] == "Z" or p[2].startswith("chrom")]
            if not left:
                break
            time.sleep(0.05)
        return descendants()

    task = {"family": "counter", "seed": 1}
    env = gym.make("rllm/Web-v0")
    observation, _ = env.reset(options={"task": task})
    report = {"running": descendants()}
    assert processes.kill_browsers(env.unwrapped.resources.host.marker) == 1
    ref = observation.split('button "Add guest" [ref=')[1].split("]")[0]
    report["failure"] = env.step(f"click({ref})")[4].get("failure")
    report["after_kill"] = settled()
    env.reset(options={"task": task})
    report["relaunched"] = descendants()
    env.close()
    report["after_close"] = settled()
    print(json.dumps(report))
    """
)


def test_every_chromium_process_is_reaped_after_a_crash_and_after_close():
    require_web()
    result = subprocess.run(
        [sys.executable, "-c", REAPING_CHILD],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.splitlines()[-1])

    def chromium(stage):
        return [p for p in report[stage] if p[2].startswith("chrom")]

    def zombies(stage):
        return [p for p in report[stage] if p[1] == "Z"]

    # The browser ran below the env's process (helpers and crash handlers included) ...
    assert len(chromium("running")) >= 3 and len(chromium("relaunched")) >= 3
    assert zombies("running") == []
    # ... its crash ended the episode, and neither the crash nor close() left a zombie or a
    # live Chromium process behind.
    assert report["failure"] == "browser"
    assert zombies("after_kill") == [] and chromium("after_kill") == []
    assert zombies("after_close") == [] and chromium("after_close") == []


def test_only_the_task_site_is_reachable_unless_allowlisted(env, outside):
    env.reset(options={"task": {"family": "login", "seed": 0}})
    text, *_, info = env.step(f"goto({outside}/)")
    assert "outside the sites" in text and "Outside page" not in text
    open_env = gym.make("rllm/Web-v0", allowlist=[outside.removeprefix("http://")]).unwrapped
    try:
        open_env.reset(options={"task": {"family": "login", "seed": 0}})
        text, *_ = open_env.step(f"goto({outside}/)")
        assert "Outside page" in text and "Title: Outside" in text
        assert open_env.resources.host is env.resources.host  # one browser per process
    finally:
        open_env.close()


def test_hung_page_times_out_with_an_observation(outside):
    require_web()
    hung = gym.make("rllm/Web-v0", action_timeout=1.0, navigation_timeout=2.0).unwrapped
    try:
        started = time.perf_counter()
        row = {"url": f"{outside}/hang", "goal": "Wait."}
        hung.reset(options={"task": row})
        time.sleep(0.2)  # the page's script is now spinning
        text, reward, terminated, truncated, info = hung.step('scroll("down")')
        assert "did not respond in time" in text and "not responding" in text
        assert not info.get("failure") and not truncated
        assert time.perf_counter() - started < 30
        # The next episode gets a fresh context and works.
        observation, _ = hung.reset(options={"task": {"family": "radio", "seed": 0}})
        assert "Plan a trip" in observation
    finally:
        hung.close()


def test_open_ended_task_with_a_user_reward_function(env, outside):
    row = {
        "url": f"{outside}/",
        "goal": "Press the button, then answer 'done'.",
        "reward": "tests.envs.test_web:title_reward",
        "expected": "done",
    }
    observation, info = env.reset(options={"task": row})
    assert "Outside page" in observation and info["goal"] == row["goal"]
    _, reward, terminated, _, info = env.step('answer("done")')
    assert (reward, terminated, info["is_correct"]) == (1.0, True, True)
    env.reset(options={"task": row})
    assert env.step('answer("nope")')[1] == 0.0
    with pytest.raises(ValueError, match="reward function"):
        env.reset(options={"task": {**row, "reward": "no_such_module:f"}})


def test_screenshot_mode_passes_check_env_and_shows_the_page():
    require_web()
    from gymnasium.utils.env_checker import check_env

    shot = gym.make("rllm/Web-v0", screenshot=True, viewport=(640, 480)).unwrapped
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            check_env(shot)
        observation, _ = shot.reset(options={"task": {"family": "login", "seed": 0}})
        image = observation["screenshot"]
        assert image.shape == (480, 640, 3) and image.dtype == np.uint8
        assert len(np.unique(image.reshape(-1, 3), axis=0)) > 10  # a rendered page, not a blank
        assert "Sign in" in observation["text"]
    finally:
        shot.close()


@pytest.mark.slow
def test_latency_benchmark_runs_and_reports_percentiles():
    require_web()
    result = run_benchmark(
        "web_latency.py", "--episodes=3", "--rounds=1", "--envs=2", "--episodes-per-env=1"
    )
    assert "reset          p50" in result.stdout and "step           p50" in result.stdout
    assert "scripted solutions won: 100%" in result.stdout
    assert "browser hosts: 1, browser launches: 1" in result.stdout


def test_close_is_idempotent_and_an_env_can_be_dropped_without_it():
    require_web()
    first = gym.make("rllm/Web-v0").unwrapped
    first.reset(seed=0)
    first.close()
    first.close()
    dropped = gym.make("rllm/Web-v0").unwrapped
    dropped.reset(seed=1)
    finalizer = dropped._finalizer
    del dropped
    import gc

    gc.collect()
    assert not finalizer.alive  # the browser share was released by the finaliser


def test_env_calls_from_other_threads_work(env):
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        observation, _ = pool.submit(
            env.reset, options={"task": {"family": "tabs", "seed": 2}}
        ).result()
        text, *_ = pool.submit(env.step, "scroll(down)").result()
    assert "Store information" in observation and "Scrolled down" in text


def test_launch_keeps_playwrights_disabled_features_and_adds_ours():
    from rllm_envs.web.browser import DISABLED_FEATURES, launch_args, missing_features

    args = launch_args("--marker", ("PaintHolding", "MediaRouter"))
    switch = next(arg for arg in args if arg.startswith("--disable-features="))
    assert switch.split("=", 1)[1].split(",") == ["PaintHolding", "MediaRouter", *DISABLED_FEATURES]
    assert args[-1] == "--marker"
    # Playwright's switch (or a wrapper's) comes first on the real command line; ours, the
    # last, is the one Chromium honours, so it must cover what the others disable.
    known = ("PaintHolding", "MediaRouter")
    playwrights = "--disable-features=PaintHolding,NewOne,MediaRouter"
    command_line = ["chromium", "--disable-features=Wrapped", playwrights, switch]
    assert missing_features(command_line, known) == ("Wrapped", "NewOne")
    assert missing_features(command_line, (*known, "NewOne", "Wrapped")) == ()
    assert missing_features(["chromium"], ()) == ()


def test_browser_windows_hold_only_the_episode_pages(env):
    # Each context is a window; its address bar's WebUI pages must not be preloaded (they
    # cost more CPU than the episode), and Playwright's own disabled features must stay off.
    from rllm_envs.web import processes
    from rllm_envs.web.browser import PLAYWRIGHT_DISABLED_FEATURES

    env.reset(options={"task": {"family": "login", "seed": 3}})
    host = env.resources.host

    async def target_types():
        session = await host.browser.new_browser_cdp_session()
        try:
            targets = await session.send("Target.getTargets")
        finally:
            await session.detach()
        return sorted(target["type"] for target in targets["targetInfos"])

    assert set(host.run(target_types(), 10)) == {"page"}
    switches = [
        arg
        for arg in processes.main_command_line(host.marker)
        if arg.startswith("--disable-features=")
    ]
    effective = switches[-1].split("=", 1)[1].split(",")
    assert set(PLAYWRIGHT_DISABLED_FEATURES) <= set(effective)
    assert "WebUIOmniboxPopup" in effective
