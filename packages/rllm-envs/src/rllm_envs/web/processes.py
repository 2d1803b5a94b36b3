"""Finding and ending the Chromium processes a browser host started (Linux ``/proc``).

Every browser is launched with a marker switch naming its host (Chromium ignores unknown
switches), through the reaper (``reaper_program.py``), which Playwright starts as the leader of
a process group of its own; the browser's main process and all its helpers (zygotes,
renderers, GPU and network processes) share that group. Killing every member of the group but
the reaper leaves nothing running, whatever happened to Playwright, and the reaper, still
alive, reaps them all: nothing is left as a zombie either. (Launched without the reaper, the
browser's main process leads the group itself and the same kill takes the whole group.)
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

PROC = Path("/proc")
MARKER_SWITCH = "--rllm-web-host"
REAPER_MARK = "rllm-web-reaper"  # in the reaper's command line, never in the browser's
# A group kill races with forks in flight (a zygote starting a renderer): a few rounds see
# those children too. Each round lists /proc once.
KILL_ROUNDS = 20


def host_marker(pid: int, serial: str) -> str:
    return f"{MARKER_SWITCH}={pid}-{serial}"


def _pids() -> list[int]:
    try:
        return [int(entry.name) for entry in PROC.iterdir() if entry.name.isdigit()]
    except OSError:
        return []


def _cmdline(pid: int) -> list[str]:
    try:
        return (PROC / str(pid) / "cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


def _stat(pid: int) -> tuple[str, list[str]] | None:
    """The command name and the fields after it of a live (not zombie) process."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name may hold spaces and parentheses: fields follow the last ")".
    name = stat[stat.find("(") + 1 : stat.rfind(")")]
    fields = stat.rsplit(")", 1)[-1].split()
    return (name, fields) if len(fields) > 2 and fields[0] != "Z" else None


def _group(pid: int) -> int | None:
    stat = _stat(pid)
    return int(stat[1][2]) if stat else None


def _is_reaper(pid: int) -> bool:
    return REAPER_MARK in _cmdline(pid)


def named(prefixes: tuple[str, ...] = ("chromium", "chrome")) -> set[int]:
    """Live processes whose command name starts with one of `prefixes` (Chromium's, by
    default: what a leak would leave behind)."""
    found = set()
    for pid in _pids():
        stat = _stat(pid)
        if stat and stat[0].startswith(prefixes):
            found.add(pid)
    return found


def browser_mains(marker_prefix: str) -> list[int]:
    """Pids of the live browser main processes whose command line carries a marker with this
    prefix (the reaper's carries it too, as the browser's arguments: it is left out)."""
    return [
        pid
        for pid in _pids()
        if any(arg.startswith(marker_prefix) for arg in _cmdline(pid))
        and not _is_reaper(pid)
        and _group(pid) is not None
    ]


def reapers(marker_prefix: str) -> list[int]:
    """Pids of the live reapers of the marked browsers (each exits once its browser's
    processes are all gone and reaped)."""
    return [
        pid
        for pid in _pids()
        if _is_reaper(pid)
        and any(arg.startswith(marker_prefix) for arg in _cmdline(pid))
        and _group(pid) is not None
    ]


def main_command_line(marker_prefix: str) -> list[str]:
    """The command line of the marked browser's main process; [] when none runs."""
    for pid in browser_mains(marker_prefix):
        return _cmdline(pid)
    return []


def group_members(group: int) -> list[int]:
    return [pid for pid in _pids() if _group(pid) == group]


def _browser_members(group: int) -> list[int]:
    return [pid for pid in group_members(group) if not _is_reaper(pid)]


def browser_processes(marker_prefix: str) -> list[int]:
    """Every live process of the marked browsers: the main processes and their process
    groups, less the reapers."""
    found: set[int] = set()
    own_group = os.getpgrp()
    for main in browser_mains(marker_prefix):
        found.add(main)
        group = _group(main)
        if group is not None and group != own_group:
            found.update(_browser_members(group))
    return sorted(found)


def _kill(pid: int, group: int | None) -> None:
    """SIGKILL `pid` if it still is in `group` (checked through a pidfd: no reused pid)."""
    try:
        pidfd = os.pidfd_open(pid)
    except (ProcessLookupError, OSError):
        return
    try:
        if group is None or _group(pid) == group:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
    except ProcessLookupError:
        pass
    finally:
        os.close(pidfd)


def kill_browsers(marker_prefix: str) -> int:
    """SIGKILL the marked browsers: every process of their groups but the reaper (never our
    own group: then only the main process). Returns how many browsers were killed."""
    own_group = os.getpgrp()
    mains = browser_mains(marker_prefix)
    for main in mains:
        group = _group(main)
        if group is None or group == own_group:
            _kill(main, None)
            continue
        for _ in range(KILL_ROUNDS):
            members = _browser_members(group)
            if not members:
                break
            for pid in members:
                _kill(pid, group)
    return len(mains)
