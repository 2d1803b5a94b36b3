"""Which processes are alive, read from /proc (a zombie counts as gone: it has exited)."""

from __future__ import annotations

import os
import time


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(") ", 1)[1][0] != "Z"
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False


def parent_of(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return int(stat.read().rsplit(") ", 1)[1].split()[1])
    except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
        return None


def cmdline_of(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return cmdline.read()
    except (FileNotFoundError, ProcessLookupError):
        return b""


def descendants(pid: int | None = None) -> set[int]:
    """Every living process below `pid` (this process by default)."""
    parents: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        parent = parent_of(int(entry))
        if parent is not None:
            parents.setdefault(parent, []).append(int(entry))
    found, frontier = set(), [pid if pid is not None else os.getpid()]
    while frontier:
        for child in parents.get(frontier.pop(), []):
            if child not in found and alive(child):
                found.add(child)
                frontier.append(child)
    return found


def working(pid: int) -> bool:
    """Whether `pid` is a working process rather than Python's multiprocessing resource
    tracker (which lives as long as the interpreter that started it, by design)."""
    command = cmdline_of(pid)
    return bool(command) and b"resource_tracker" not in command


def wait_gone(pids: set[int], timeout: float = 15.0) -> bool:
    """Whether all of `pids` have exited within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while any(alive(pid) for pid in pids):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True
