"""Every code block of docs/coming-from-rllm.md runs: rLLM's documented examples as written,
with only the model server's address and the model names swapped for the tiny model and a
loopback server (the SUBSTITUTIONS below, each checked to be on the page)."""

from __future__ import annotations

import collections
import contextlib
import io
import json
import os
import re
import shlex
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from rllm_agents.testing.fault_server import FaultServer

PAGE = Path(__file__).resolve().parent.parent / "docs" / "coming-from-rllm.md"
BLOCK = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)
FILE_MARK = "# file: "
GOLD = ("Josh decides to try flipping a house", "70000")  # gsm8k test row 0


def page_blocks() -> list[tuple[str, str]]:
    return [(lang, code) for lang, code in BLOCK.findall(PAGE.read_text(encoding="utf-8"))]


class SelfCorrectingServer:
    """Loopback answers: the first gsm8k test question is answered right every other time it
    is asked, every other question wrong, so pass@k is known exactly."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.asked: collections.Counter[str] = collections.Counter()
        self.lock = threading.Lock()

    def __call__(self, body: dict) -> str:
        prompt = body.get("prompt") or json.dumps(body.get("messages"))
        text = self.tokenizer.decode(prompt) if isinstance(prompt, list) else str(prompt)
        if GOLD[0] not in text:
            return "I think it is \\boxed{1}."
        with self.lock:
            self.asked[GOLD[0]] += 1
            right = self.asked[GOLD[0]] % 2 == 1
        return f"So the profit is \\boxed{{{GOLD[1] if right else 5}}}."


@pytest.fixture
def tiny_path() -> str:
    from rllm_agents.models import resolve_model

    return str(resolve_model("tiny"))


def substitutions(base_url: str, tiny_path: str) -> list[tuple[str, str]]:
    return [
        ("http://localhost:30000/v1", base_url),
        (
            'AutoTokenizer.from_pretrained("Qwen/Qwen3-4B")',
            f"AutoTokenizer.from_pretrained({tiny_path!r})",
        ),
        ('"model": "Qwen/Qwen3-4B"', '"model": "canned"'),
        # four tasks (x 8 samples) keep the loopback run short
        (
            'test_dataset = DatasetRegistry.load_dataset("gsm8k", "test")',
            'test_dataset = DatasetRegistry.load_dataset("gsm8k", "test").take(4)',
        ),
        ("--model smollm2", "--model tiny"),
        (
            "model.name=smollm2",
            f"model.name={tiny_path} trainer.val_tasks=4 rollout.tasks_per_step=2 rollout.n=2",
        ),
    ]


def test_every_block_of_the_page_runs(tmp_path, tiny_path, monkeypatch):
    from transformers import AutoTokenizer

    answers = SelfCorrectingServer(AutoTokenizer.from_pretrained(tiny_path))
    page = PAGE.read_text(encoding="utf-8")
    with FaultServer(completion=answers) as server:
        swaps = substitutions(server.base_url, tiny_path)
        for old, _ in swaps:
            assert old in page, f"the page no longer holds {old!r}: update the test"
        blocks = []
        for lang, code in page_blocks():
            for old, new in swaps:
                code = code.replace(old, new)
            blocks.append((lang, code))
        monkeypatch.chdir(tmp_path)
        monkeypatch.syspath_prepend(str(tmp_path))
        env = {
            **os.environ,
            "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        }
        printed: list[str] = []
        commands: list[str] = []
        for lang, code in blocks:
            if lang == "python" and code.startswith(FILE_MARK):
                name = code.splitlines()[0][len(FILE_MARK) :].strip()
                (tmp_path / name).write_text(code, encoding="utf-8")
            elif lang == "python":
                out = io.StringIO()
                with contextlib.redirect_stdout(out):
                    exec(compile(code, "<coming-from-rllm>", "exec"), {"__name__": "__snippet__"})
                printed.append(out.getvalue())
            else:
                assert lang == "bash", lang
                commands += [line for line in code.splitlines() if line.strip()]
        for command in commands:
            argv = shlex.split(command)
            argv[0] = {"python": sys.executable}.get(argv[0], argv[0])
            done = subprocess.run(
                argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400
            )
            assert done.returncode == 0, f"{command}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
            if argv[0] == "rllm-train":
                assert "held-out validation reward" in done.stdout, done.stdout
    engine_out, registry_out = printed
    scores = eval(engine_out.strip().splitlines()[-1])  # the dict print(scores) wrote
    assert scores["tasks"] == 4 and scores["samples_per_task"] == 8
    assert scores["pass@8"] == pytest.approx(0.25)  # the one task answered right, sometimes
    assert 0 < scores["pass@1"] < scores["pass@8"]
    assert "gsm8k" in registry_out and "['test', 'train']" in registry_out
    run = tmp_path / "runs" / "math"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["step"] == 0 and "val/reward_mean" in rows[0]
    assert "val/reward_mean" in rows[-1] and rows[-1]["step"] == 2
    assert (run / "data" / "train.jsonl").is_file() and (run / "reward_curve.png").is_file()
