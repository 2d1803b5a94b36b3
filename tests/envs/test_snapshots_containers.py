"""Snapshots of the envs whose state lives outside Python, on the real parts: rllm/Code-v0 on
the Docker sandbox, rllm/SWE-v0's container (both capture methods) and rllm/Web-v0's page in
Chromium. After a restore the same actions give the same transitions, what was changed after
the snapshot is gone, forks are independent, and nothing is left behind."""

from __future__ import annotations

import dataclasses
import importlib.util

import gymnasium as gym
import pytest
import rllm_envs  # noqa: F401  (registers the ids)
from rllm_envs.core.snapshots import SnapshotUnsupported, fork, release, restore, snapshot
from rllm_envs.sandbox.docker_backend import OWNER_LABEL, owner_tag
from rllm_envs.swe.integrity import SUBMIT, bash, call

from tests.envs.swe_support import FAST_POLICY, require_images, shipped_rows
from tests.envs.test_code import ADD_TASK, reply
from tests.envs.web_support import outside_site
from tests.parts import require_part
from tests.sandbox.conftest import require_backend

pytestmark = pytest.mark.slow


def play(env, actions):
    return [env.step(action) for action in actions]


def own_containers(client, label: str) -> set[str]:
    """Ids of this process's containers carrying `label` (other processes' come and go)."""
    listed = client.containers.list(all=True, filters={"label": label}, ignore_removed=True)
    return {c.id for c in listed if c.labels.get(OWNER_LABEL) == owner_tag()}


# -- rllm/Code-v0 on the Docker sandbox --------------------------------------------------------
def test_code_restore_repeats_the_tries_and_forks_are_independent():
    require_backend("docker")
    import docker

    client = docker.from_env()
    before = own_containers(client, "rllm.sandbox=1")
    env = gym.make(
        "rllm/Code-v0", tasks=[ADD_TASK], backend="docker", policy=FAST_POLICY, max_turns=3
    )
    forks = []
    try:
        env.reset(options={"task": ADD_TASK})
        env.step(reply("def add(a, b):\n    return a - b"))  # wrong: feedback, another try
        snap = snapshot(env)
        tries = [
            reply("def add(a, b):\n    return a * b"),
            reply("def add(a, b):\n    return a + b"),
        ]
        later = play(env, tries)
        assert [(t[1], t[2], t[4]["turn"]) for t in later] == [(0.0, False, 2), (1.0, True, 3)]
        # Solved after the snapshot; after the restore the episode runs again from turn 1.
        restore(env, snap)
        assert play(env, tries) == later
        restore(env, snap)
        forks = fork(env, 2)
        solved = forks[0].step(tries[1])
        wrong = forks[1].step(tries[0])
        assert (solved[1], solved[2]) == (1.0, True)
        assert (wrong[1], wrong[2], wrong[4]["turn"]) == (0.0, False, 2)
        assert env.step(tries[0])[4]["turn"] == 2  # the original stood still meanwhile
    finally:
        for made in (*forks, env):
            made.close()
    assert own_containers(client, "rllm.sandbox=1") == before


# -- rllm/SWE-v0: the agent's container ----------------------------------------------------------
@pytest.fixture(scope="module")
def toolz_row():
    row = next(row for row in shipped_rows("train") if row["repo"] == "toolz")
    return row, require_images([row["image_name"]])


def swe_env(row, method="auto"):
    return gym.make(
        "rllm/SWE-v0", tasks=[row], policy=FAST_POLICY, pool_spares=0, snapshot_method=method
    )


EDITS = bash(
    "echo kept > notes.txt && chmod 600 notes.txt && rm README.rst && "
    "echo '# edited' >> toolz/utils.py && echo scratch > /tmp/keep"
)
LATER = [
    bash(
        "ls later.txt 2>&1; echo later > later.txt; rm -r toolz/curried; echo more >> notes.txt;"
        " git status --short; stat -c '%a %s %n' notes.txt; cat /tmp/keep"
    ),
    call("str_replace", path="toolz/utils.py", old_str="# edited", new_str="# edited twice"),
    bash("git diff --stat; ls toolz; cat notes.txt"),
]


def test_swe_restore_undoes_later_changes_and_repeats_the_steps(toolz_row):
    row, client = toolz_row
    before = own_containers(client, "rllm.swe=1")
    env = swe_env(row, "tar")
    try:
        env.reset(options={"task": row})
        env.step(EDITS)
        snap = snapshot(env)
        actions = [*LATER, SUBMIT]  # graded at the end: the reward comes from the restored tree
        later = play(env, actions)
        status = later[0][0]
        assert "No such file" in status and "600 10 notes.txt" in status and "scratch" in status
        assert (
            "?? notes.txt" in status and " D README.rst" in status and "M toolz/utils.py" in status
        )
        restore(env, snap)
        assert play(env, actions) == later
    finally:
        env.close()
    assert own_containers(client, "rllm.swe=1") == before


def test_swe_large_workspace_is_committed_and_outlives_its_env_until_released(toolz_row):
    row, client = toolz_row
    import docker

    before = own_containers(client, "rllm.swe=1")
    env = swe_env(row)  # "auto": a workspace over 4 MiB is committed
    env.reset(options={"task": row})
    env.step(EDITS)
    env.step(bash("head -c 5000000 /dev/urandom > data.bin"))
    snap = snapshot(env)
    image = snap.state.workspace.image_id
    later = play(env, LATER)
    env.close()
    assert client.images.get(image).labels["rllm.swe.snapshot"] == "1"  # outlived its env
    other = swe_env(row)
    try:
        restore(other, snap)
        assert play(other, LATER) == later  # another env, the same steps
        release(snap)
        release(snap)  # idempotent
        client.images.get(image)  # a container of it still runs: removed when that goes
    finally:
        other.close()
    with pytest.raises(docker.errors.ImageNotFound):
        client.images.get(image)
    with pytest.raises(ValueError, match="released"):
        restore(other, snap)
    assert own_containers(client, "rllm.swe=1") == before


def test_swe_forks_are_independent_containers(toolz_row):
    row, client = toolz_row
    before = own_containers(client, "rllm.swe=1")
    env = swe_env(row)
    forks = []
    try:
        env.reset(options={"task": row})
        env.step(bash("echo base > shared.txt"))
        forks = fork(env, 2)
        forks[0].step(bash("echo zero > shared.txt && rm README.rst"))
        shown = [made.step(bash("cat shared.txt; ls README.rst"))[0] for made in (*forks, env)]
        assert "zero" in shown[0] and "No such file" in shown[0]
        assert all("base" in text and "No such file" not in text for text in shown[1:])
        ids = {made.unwrapped.workspace.id for made in (*forks, env)}
        assert len(ids) == 3
    finally:
        for made in (*forks, env):
            made.close()
    assert own_containers(client, "rllm.swe=1") == before


# -- rllm/Web-v0: the page in Chromium -----------------------------------------------------------
@pytest.fixture(scope="module")
def outside():
    with outside_site() as origin:
        yield origin


@pytest.fixture(scope="module")
def web_env(outside):
    require_part(
        importlib.util.find_spec("playwright") is not None,
        "playwright is not installed (pip install 'rllm-envs[web]')",
    )
    from rllm_envs.web.browser import find_browser

    require_part(find_browser() is not None, "no Chromium found (apt-get install chromium)")
    env = gym.make("rllm/Web-v0", allowlist=[outside])
    yield env
    env.close()


WIZARD = {"family": "wizard", "seed": 1}


def wizard_at_step_two(env):
    """The sign-up wizard after its first page (name typed, Next clicked): its answers so far
    live in the page's JavaScript memory."""
    from rllm_envs.web.solver import step_action
    from rllm_envs.web.tasks import FAMILIES

    solution = FAMILIES["wizard"].instance(1).solution
    observation, _ = env.reset(options={"task": WIZARD})
    for step in solution[:2]:
        observation = env.step(step_action(step, observation))[0]
    assert "step 2 of 3" in observation
    return observation, solution[2:]


def test_web_restore_replays_the_page_and_forgets_later_typing(web_env):
    from rllm_envs.web.solver import find_ref, step_action

    observation, rest = wizard_at_step_two(web_env)
    snap = snapshot(web_env)
    seats = find_ref(observation, "spinbutton", "Seats")
    actions = ['scroll("up")', f'fill({seats}, "42")']
    later = play(web_env, actions)
    for step in rest:  # the rest of the solution, found on the page as a model would
        actions.append(step_action(step, later[-1][0]))
        later.append(web_env.step(actions[-1]))
    assert later[-1][1:3] == (1.0, True)  # the answers kept in page memory were all there
    assert '"42"' in later[1][0]
    restore(web_env, snap)
    again = play(web_env, actions)
    assert again == later
    assert '"42"' not in again[0][0]  # typed after the snapshot: gone


def test_web_forks_are_independent_pages_closed_with_their_envs(web_env):
    from rllm_envs.web.solver import find_ref

    observation, _ = wizard_at_step_two(web_env)
    seats = find_ref(observation, "spinbutton", "Seats")
    forks = fork(web_env, 2)
    pages = [made.unwrapped.resources.tab.page for made in forks]
    try:
        forks[0].step(f'fill({seats}, "7")')
        shown = [made.step('scroll("up")')[0] for made in (*forks, web_env)]
        assert '"7"' in shown[0] and '"7"' not in shown[1] and shown[1] == shown[2]
    finally:
        for made in forks:
            made.close()
    assert all(page.is_closed() for page in pages)


def test_web_restore_refuses_a_page_that_does_not_read_the_same(web_env):
    wizard_at_step_two(web_env)
    snap = snapshot(web_env)
    page = dataclasses.replace(snap.state.page, title="Another title")
    forged = dataclasses.replace(snap, state=dataclasses.replace(snap.state, page=page))
    with pytest.raises(SnapshotUnsupported, match="title differs"):
        restore(web_env, forged)
    assert "episode has ended" in web_env.step('scroll("up")')[0]
    restore(web_env, snap)  # the true snapshot still restores
    assert "step 2 of 3" in web_env.step('scroll("up")')[0]


def test_web_refuses_pages_outside_the_task_app(web_env, outside):
    open_ended = {"url": outside + "/", "goal": "Read the page."}
    probed = gym.make("rllm/Web-v0", tasks=[open_ended])
    try:  # before any episode (how a trainer asks whether an env supports snapshots)
        with pytest.raises(SnapshotUnsupported, match="open-ended"):
            snapshot(probed)
    finally:
        probed.close()
    web_env.reset(options={"task": open_ended})
    with pytest.raises(SnapshotUnsupported, match="open-ended"):
        snapshot(web_env)
    web_env.reset(options={"task": WIZARD})
    assert "Outside page" in web_env.step(f"goto({outside}/)")[0]
    web_env.step("back()")
    with pytest.raises(SnapshotUnsupported, match="outside the task app"):
        snapshot(web_env)
