"""Finding and ending the Chromium processes a browser host started (Linux ``/proc``).

Every browser is launched with a marker switch naming its host (Chromium ignores unknown
switches). Playwright starts Chromium as the leader of its own process group, so the marker
finds the leader and the group holds its helpers (zygotes, renderers, GPU and network
processes): killing the group leaves nothing behind, whatever happened to Playwright.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

PROC = Path("/proc")
MARKER_SWITCH = "--rllm-web-host"


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


def named(prefixes: tuple[str, ...] = ("chromium", "chrome")) -> set[int]:
    """Live processes whose command name starts with one of `prefixes` (Chromium's, by
    default: what a leak would leave behind)."""
    found = set()
    for pid in _pids():
        stat = _stat(pid)
        if stat and stat[0].startswith(prefixes):
            found.add(pid)
    return found


def marked_leaders(marker_prefix: str) -> list[int]:
    """Pids of live browser processes whose command line carries a marker with this prefix."""
    return [
        pid
        for pid in _pids()
        if any(arg.startswith(marker_prefix) for arg in _cmdline(pid)) and _group(pid) is not None
    ]


def leader_command_line(marker_prefix: str) -> list[str]:
    """The command line of the marked browser's leader (its main process); [] when none."""
    for pid in marked_leaders(marker_prefix):
        if _group(pid) == pid:
            return _cmdline(pid)
    return []


def group_members(group: int) -> list[int]:
    return [pid for pid in _pids() if _group(pid) == group]


def browser_processes(marker_prefix: str) -> list[int]:
    """Every live process of the marked browsers: the leaders and their process groups."""
    found: set[int] = set()
    for leader in marked_leaders(marker_prefix):
        found.add(leader)
        group = _group(leader)
        if group == leader:
            found.update(group_members(group))
    return sorted(found)


def kill_browsers(marker_prefix: str) -> int:
    """SIGKILL the marked browsers' process groups; never our own group. Returns the count."""
    own_group = os.getpgrp()
    killed = 0
    for leader in marked_leaders(marker_prefix):
        group = _group(leader)
        try:
            if group == leader and group != own_group:
                os.killpg(group, signal.SIGKILL)
            else:
                os.kill(leader, signal.SIGKILL)
            killed += 1
        except ProcessLookupError:
            pass
    return killed
