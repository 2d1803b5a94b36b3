"""``rllm-view``: the run's data as the page gets it, and the page itself in a real Chromium.

The run folder is an rllm-train one (``metrics.jsonl`` with a per-step reward) that saved its
sampled episodes (``episodes/step_N.jsonl``), whose tokens come from the tiny model's
tokenizer: at step 1 a two-turn episode with a tool call, at step 2 one ended by an env
failure and one by an engine error. Screenshots go to ``$RLLM_TEST_ARTIFACTS``
(else the test's temporary folder).
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from rllm_agents.episodes import episodes_text
from rllm_agents.types import Episode, Step, TerminationReason, TokenSequence, Trajectory
from rllm_agents.viewer.cli import main, token_decoder
from rllm_agents.viewer.runs import EpisodeQuery, RunError, episode_detail, load_run
from rllm_agents.viewer.server import Viewer, make_server, serve_in_background

from tests.cli_errors import assert_one_line_error, installed_command, run_command
from tests.parts import require_part


def _tool_episode(encode) -> Episode:
    prompt = encode("<|im_start|>user\nWhat is 17 * 3?<|im_end|>\n<|im_start|>assistant\n")
    call = encode('{"name": "calculator", "arguments": {"expression": "17*3"}}<|im_end|>')
    between = encode("\n<|im_start|>user\nTool result: 51<|im_end|>\n<|im_start|>assistant\n")
    answer = encode("The answer is 51.<|im_end|>")
    steps = [
        Step(
            observation="What is 17 * 3?",
            model_response='{"name": "calculator", "arguments": {"expression": "17*3"}}',
            action={"tool": "calculator", "arguments": {"expression": "17*3"}},
            reward=0.0,
            prompt_ids=prompt,
            response_ids=call,
        ),
        Step(
            observation="Tool result: 51",
            model_response="The answer is 51.",
            action="The answer is 51.",
            reward=1.0,
            done=True,
            prompt_ids=prompt + call + between,
            response_ids=answer,
        ),
    ]
    trajectory = Trajectory(
        name="solver",
        steps=steps,
        reward=1.0,
        prompt_ids=prompt,
        response_ids=call + between + answer,
        response_mask=[1] * len(call) + [0] * len(between) + [1] * len(answer),
    )
    return Episode(
        id="mul-17-3:0",
        task={"task_id": "mul-17-3"},
        termination_reason=TerminationReason.ENV_DONE,
        trajectories=[trajectory],
        is_correct=True,
        info={"task_key": "mul-17-3"},
    )


def _ended_early(task: str, **ending) -> Episode:
    step = Step(observation=f"Task {task}", model_response="...", action="...", reward=0.0)
    return Episode(
        id=f"{task}:0",
        task={"task_id": task},
        trajectories=[Trajectory(steps=[step], reward=0.0)],
        info={"task_key": task},
        **ending,
    )


@pytest.fixture(scope="module")
def tiny_decode():
    decode, why = token_decoder("tiny")
    assert decode is not None, why
    return decode


@pytest.fixture(scope="module")
def run_folder(tmp_path_factory) -> Path:
    from rllm_agents.models import load_tokenizer

    tokenizer = load_tokenizer("tiny")

    def encode(text: str) -> list[int]:
        return list(tokenizer.encode(text, add_special_tokens=False))

    episodes = [
        _tool_episode(encode),
        _ended_early(
            "add-2-2",
            termination_reason=TerminationReason.ENV_FAILURE,
            failure="sandbox_boot",
        ),
        _ended_early(
            "add-3-4", termination_reason=TerminationReason.ERROR, error="server went away"
        ),
    ]
    folder = tmp_path_factory.mktemp("view") / "run"
    (folder / "episodes").mkdir(parents=True)
    (folder / "episodes" / "step_0001.jsonl").write_text(episodes_text(episodes[:1]))
    (folder / "episodes" / "step_0002.jsonl").write_text(episodes_text(episodes[1:]))
    rows = [{"step": 0, "val/reward_mean": 0.2}] + [
        {"step": step, "reward_mean": 0.1 * step, "loss": 1.0 / step} for step in range(1, 6)
    ]
    (folder / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (folder / "config.yaml").write_text("model: {name: tiny}\nenv: {id: rllm/Math-v0}\n")
    return folder


def test_the_run_as_data(run_folder, tiny_decode):
    run = load_run(run_folder)
    assert (run.kind, run.model, run.env, len(run.episodes)) == ("train", "tiny", "rllm/Math-v0", 3)
    viewer = Viewer(run, None)
    outcomes = [row["outcome"] for row in viewer.episodes({})["episodes"]]
    assert outcomes == ["ok", "sandbox_boot", "error"]
    assert [row["task"] for row in viewer.episodes({"reward_min": "0.5"})["episodes"]] == [
        "mul-17-3"
    ]
    assert viewer.episodes({"outcome": "error", "task": "ADD"})["episodes"][0]["index"] == 2
    assert [row["task"] for row in viewer.episodes({"step": "2"})["episodes"]] == [
        "add-2-2",
        "add-3-4",
    ]
    with pytest.raises(RunError, match="reward_max"):
        EpisodeQuery.from_params({"reward_max": "lots"})
    with pytest.raises(RunError, match="step: expected a whole number"):
        EpisodeQuery.from_params({"step": "1.5"})
    overview = viewer.overview({})
    assert overview["steps"] == [1, 2]
    curve = overview["curve"]
    assert curve[0] == {"step": 0, "val/reward_mean": 0.2} and len(curve) == 6
    assert viewer.episode({"index": "1"})["step"] == 2
    # The trained tokens are the two replies; the tool result between them is context.
    [trajectory] = episode_detail(0, run.episodes[0], tiny_decode)["trajectories"]
    trained = "".join(s["text"] for s in trajectory["tokens"] if s["trained"])
    context = "".join(s["text"] for s in trajectory["tokens"] if not s["trained"])
    assert trained.startswith('{"name": "calculator"') and trained.endswith("51.<|im_end|>")
    assert "Tool result: 51" in context and "Tool result" not in trained


def test_a_step_file_or_the_episodes_folder_opens_the_whole_run(run_folder, tmp_path):
    step = load_run(run_folder / "episodes" / "step_0002.jsonl")
    assert (step.path, step.kind, step.steps) == (run_folder, "train", [2, 2])
    assert load_run(run_folder / "episodes").steps == [1, 2, 2]
    # A train run that saved no episodes still shows its curve.
    (tmp_path / "metrics.jsonl").write_text((run_folder / "metrics.jsonl").read_text())
    bare = load_run(tmp_path)
    assert (bare.episodes, len(bare.metrics)) == ([], 6)


def test_bad_paths_are_one_line(tmp_path, capsys):
    assert main([str(tmp_path / "none")]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main([str(tmp_path)]) == 2
    assert "not a run folder" in capsys.readouterr().err
    (tmp_path / "episodes.jsonl").write_text("{}\n{broken\n")
    assert main([str(tmp_path)]) == 2
    assert "episodes.jsonl:2: not a JSON record" in capsys.readouterr().err


@pytest.mark.parametrize("file", ["episodes.jsonl", "metrics.jsonl"])
def test_bytes_that_are_not_utf8_are_one_line_naming_the_line(tmp_path, capsys, file):
    (tmp_path / file).write_bytes(b'{"step": 1}\n{"step": "\xff\xfe"}\n{"step": 2}\n')
    with pytest.raises(RunError, match=rf"{file}:2: .*not UTF-8 \(byte 0xff at column 11\)"):
        load_run(tmp_path)
    code = main([str(tmp_path)])
    assert_one_line_error(code, capsys.readouterr().err, "rllm-view", f"{tmp_path / file}:2: ")


def test_the_installed_command_serves_the_run_and_stops_on_ctrl_c(run_folder, tmp_path):
    """The console script a user types: one line with the URL, the API answering, exit 0."""
    refused = run_command("rllm-view", str(tmp_path / "none"))
    assert_one_line_error(refused.returncode, refused.stderr, "rllm-view", "does not exist")
    server = subprocess.Popen(
        [installed_command("rllm-view"), str(run_folder), "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Ctrl-C as a terminal delivers it: a suite started in the background (nohup, `&`)
        # hands its children SIGINT ignored, and Python then never turns it into
        # KeyboardInterrupt.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        line = server.stdout.readline()
        url = line.rpartition(" at ")[2].strip()
        assert line.startswith("rllm-view: 3 episodes of") and url.startswith("http://"), line
        with urllib.request.urlopen(url + "api/run", timeout=30) as response:
            assert json.load(response)["steps"] == [1, 2]
        server.send_signal(signal.SIGINT)
        assert server.wait(timeout=30) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


@pytest.fixture()
def browser():
    require_part(
        importlib.util.find_spec("playwright") is not None,
        "playwright is not installed (pip install 'rllm-envs[web]')",
    )
    from playwright.sync_api import sync_playwright
    from rllm_envs.web.browser import find_browser

    executable = find_browser()
    require_part(executable is not None, "no Chromium found (apt-get install chromium)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=executable)
        try:
            yield launched
        finally:
            launched.close()


UNFILTERED_DELAY_S = 1.0


class SlowUnfilteredViewer(Viewer):
    """Answers an unfiltered list late, so a newer filtered answer overtakes it."""

    def episodes(self, params):
        if not any(params.values()):
            time.sleep(UNFILTERED_DELAY_S)
        return super().episodes(params)


def test_the_page_in_chromium_filters_and_opens_an_episode(
    run_folder, tiny_decode, browser, tmp_path
):
    artefacts = Path(os.environ.get("RLLM_TEST_ARTIFACTS") or tmp_path)
    artefacts.mkdir(parents=True, exist_ok=True)
    server = make_server(SlowUnfilteredViewer(load_run(run_folder), tiny_decode))
    serve_in_background(server)
    try:
        host, port = server.server_address[:2]
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(f"http://{host}:{port}/")
        page.wait_for_selector("#episodes tr")
        assert page.locator("#episodes tr").count() == 3
        assert page.locator("#reward-curve polyline").count() == 2  # train and validation
        page.screenshot(path=str(artefacts / "viewer-list.png"))

        page.select_option("#outcome", "sandbox_boot")
        page.wait_for_function("document.querySelectorAll('#episodes tr').length === 1")
        assert page.locator("#episodes tr td").nth(2).inner_text() == "add-2-2"
        page.select_option("#outcome", "")
        page.select_option("#step", "2")
        page.wait_for_function("document.querySelectorAll('#episodes tr').length === 2")
        assert page.locator("#episodes tr td").nth(1).inner_text() == "2"  # the step column
        page.select_option("#step", "")
        page.fill("#reward_min", "0.5")
        page.wait_for_function("document.querySelectorAll('#episodes tr').length === 1")
        # The unfiltered answer to clearing the step comes back after this one: it must
        # not replace the newer filtered list.
        page.wait_for_timeout(1500 * UNFILTERED_DELAY_S)
        assert page.locator("#episodes tr").count() == 1

        page.locator("#episodes tr").first.click()
        page.wait_for_selector("#episode-title")
        assert "mul-17-3" in page.inner_text("#episode-title")
        assert "step 1" in page.inner_text("#episode-title")
        assert page.locator(".turn").count() == 2
        assert "calculator" in page.locator(".turn .action").first.inner_text()
        trained = page.locator(".tokens .trained").all_inner_texts()
        assert any("The answer is 51." in text for text in trained)
        assert not any("Tool result" in text for text in trained)
        page.screenshot(path=str(artefacts / "viewer-episode.png"), full_page=True)
        assert " · correct · " in page.inner_text("#detail .label")
        # An episode that was never graded is not called correct.
        page.fill("#reward_min", "")
        page.wait_for_function("document.querySelectorAll('#episodes tr').length === 3")
        page.locator("#episodes tr", has_text="add-3-4").click()
        page.wait_for_function(
            "document.getElementById('episode-title')?.innerText.includes('add-3-4')"
        )
        assert "correctness unknown" in page.inner_text("#detail .label")
        assert errors == []
    finally:
        server.shutdown()
        server.server_close()


def _compacted_episode(encode) -> Episode:
    """Two sequences: the first prompt, a move and a summary the policy wrote; then a new
    prompt (the task and that summary) and one more move."""
    first = encode("<|im_start|>user\nCross the lake.<|im_end|>\n<|im_start|>assistant\n")
    move = encode("Down<|im_end|>")
    ask = encode("\n<|im_start|>user\nSummarise.<|im_end|>\n<|im_start|>assistant\n")
    summary = encode("Went down once.<|im_end|>")
    second = encode("<|im_start|>user\nCross the lake.\nSummary: Went down once.<|im_end|>\n")
    last = encode("Right<|im_end|>")
    sequences = [
        TokenSequence(
            first, move + ask + summary, [1] * len(move) + [0] * len(ask) + [1] * len(summary)
        ),
        TokenSequence(second, last, [1] * len(last)),
    ]
    steps = [
        Step(observation="Cross the lake.", model_response="Down", action="Down"),
        Step(observation="ok", model_response="Right", action="Right", reward=1.0, done=True),
    ]
    record = {
        "turn": 1, "policy": "summarize", "messages_before": 4, "messages_after": 2,
        "tokens_before": 700, "tokens_after": 40, "summary": "Went down once.",
        "summary_trained": True, "summary_tokens": len(summary),
    }  # fmt: skip
    trajectory = Trajectory(
        steps=steps, reward=1.0, sequences=sequences,
        info={"prefix_consistent": False, "token_segments": 2, "compactions": [record]},
    )  # fmt: skip
    return Episode(
        id="lake:0", task={"task_id": "lake"}, trajectories=[trajectory],
        termination_reason=TerminationReason.ENV_DONE, info={"task_key": "lake"},
    )  # fmt: skip


def test_a_compacted_episode_shows_its_sequences_and_compactions(tiny_decode, browser, tmp_path):
    from rllm_agents.models import load_tokenizer

    tokenizer = load_tokenizer("tiny")
    episode = _compacted_episode(
        lambda text: list(tokenizer.encode(text, add_special_tokens=False))
    )
    [trajectory] = episode_detail(0, episode, tiny_decode)["trajectories"]
    boundaries = [s["text"] for s in trajectory["tokens"] if s["boundary"]]
    assert boundaries[0] == "sequence 1 of 2" and "compacted" in boundaries[1]
    trained = "".join(s["text"] for s in trajectory["tokens"] if s["trained"])
    assert "Went down once." in trained and "Right" in trained and "Summarise" not in trained
    assert trajectory["compactions"][0]["policy"] == "summarize"
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "episodes.jsonl").write_text(episodes_text([episode]))
    server = make_server(Viewer(load_run(folder), tiny_decode))
    serve_in_background(server)
    try:
        host, port = server.server_address[:2]
        page = browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(f"http://{host}:{port}/")
        page.locator("#episodes tr").first.click()
        page.wait_for_selector(".compactions")
        listed = page.inner_text(".compactions")
        assert "Context compactions: 1" in listed and "before turn 2 · summarize" in listed
        assert "written by the policy: trained" in listed and "Went down once." in listed
        assert page.locator(".tokens .boundary").count() == 2
        assert errors == []
    finally:
        server.shutdown()
        server.server_close()
