"""SIGTERM (and SIGHUP) unwind a CLI's run as Terminated, also through a blocking call that
swallows the handler's exception, as Ray's ``ray.get`` does (it ends with an exit of its own)."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from rllm_agents.run_folder import (
    SignalUnwinder,
    Terminated,
    as_received_signal,
    report_stop,
    terminate_on_signals,
)

pytestmark = pytest.mark.skipif(
    threading.current_thread() is not threading.main_thread(),
    reason="signal handlers are installed from the main thread only",
)


@pytest.fixture
def cli_handlers():
    kept = {number: signal.getsignal(number) for number in (signal.SIGTERM, signal.SIGHUP)}
    terminate_on_signals()
    yield
    for number, handler in kept.items():
        signal.signal(number, handler)


def swallowing_call(signum: int) -> None:
    """What ray.get does when the handler raises inside its wait: it ends with SystemExit(1)."""
    try:
        os.kill(os.getpid(), signum)
        time.sleep(5)  # the handler runs here
    except Terminated:
        raise SystemExit(1) from None


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_swallowed_signal_comes_back_as_itself(cli_handlers, signum, capsys):
    with pytest.raises(Terminated) as stopped:
        with as_received_signal():
            swallowing_call(signum)
    assert stopped.value.code == 128 + signum
    assert report_stop("rllm-train", stopped.value, resumable=True) == 128 + signum
    name = signal.Signals(signum).name
    assert capsys.readouterr().err == f"rllm-train: terminated by {name}; continue with --resume\n"


def test_an_exit_with_no_signal_behind_it_is_left_alone(cli_handlers):
    assert isinstance(signal.getsignal(signal.SIGTERM), SignalUnwinder)
    with pytest.raises(SystemExit) as exited:
        with as_received_signal():
            raise SystemExit(3)
    assert not isinstance(exited.value, Terminated) and exited.value.code == 3
    with pytest.raises(KeyboardInterrupt):  # Ctrl-C stays Ctrl-C
        with as_received_signal():
            raise KeyboardInterrupt
