"""Shared test fixtures (see tests/parts.py for tests that need real system parts)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def _isolated_dirs(tmp_path_factory, monkeypatch):
    # Never touch the user's caches or reach a hub from tests.
    monkeypatch.setenv("RLLM_DATASETS_DIR", str(tmp_path_factory.mktemp("datasets")))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
