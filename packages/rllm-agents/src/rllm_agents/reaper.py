"""A watchdog that ends the processes a program started once the program is gone, ``kill -9``
included.

A child started by our own ``Popen`` gets a parent-death signal (run_folder.die_with_parent),
but a local Ray cluster's processes are started by Ray, some of them (its dashboard and
runtime-env agents) by the raylet, and they outlive a killed driver. :func:`watch` starts a
small separate process that holds the read end of a pipe whose write end only the program
holds (PEP 446: it is not inherited): when the program ends, in any way, the pipe reads
end-of-file and the watchdog SIGKILLs every process it was told about that still runs.
A process is named by its pid *and* its start time, so a pid reused since is never killed.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

# Runs in the watchdog: read lines until end-of-file, each either "pid:start" words or
# "folder <path>"; then kill what is left of those processes and remove those folders.
WATCHDOG = r"""
import os, shutil, signal, sys
watched, folders = [], []
for line in sys.stdin:
    if line.startswith("folder "):
        folders.append(line[len("folder "):].rstrip("\n"))
    else:
        watched.extend(word.split(":") for word in line.split())
for pid, start in watched:
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except OSError:
        continue
    if stat[stat.rindex(")") + 2:].split()[19] == start:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except OSError:
            pass
for folder in folders:
    shutil.rmtree(folder, ignore_errors=True)
"""


def _stat_fields(pid: int) -> list[str] | None:
    try:
        stat = (Path("/proc") / str(pid) / "stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) ": state, ppid, ...


def running(pid: int) -> bool:
    """Whether `pid` runs (a zombie has ended: only its entry waits for its parent)."""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] != "Z"


def descendants(root: int) -> list[tuple[int, str]]:
    """(pid, start time) of every live descendant of `root` (Linux; elsewhere none)."""
    if not sys.platform.startswith("linux"):
        return []
    table = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat_fields(int(entry.name))) is not None:
            table[int(entry.name)] = (int(fields[1]), fields[19])
    found: dict[int, str] = {}
    frontier = {root}
    while frontier:
        frontier = {pid for pid, (parent, _) in table.items() if parent in frontier} - set(found)
        found.update({pid: table[pid][1] for pid in frontier})
    return sorted(found.items())


def carrying(variable: str, value: str) -> list[int]:
    """Live processes whose environment holds ``variable=value`` (Linux; elsewhere none).

    An environment is inherited through fork, exec and setsid alike, so this finds what a
    program started even after it left the program's process group, session or parentage
    (a double fork re-parents to init). Only processes of our own user can be read."""
    if not sys.platform.startswith("linux"):
        return []
    entry_bytes = f"{variable}={value}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environment = (entry / "environ").read_bytes()
        except OSError:  # gone meanwhile, or another user's
            continue
        if entry_bytes in environment.split(b"\0") and running(int(entry.name)):
            found.append(int(entry.name))
    return found


@dataclass
class Watchdog:
    process: subprocess.Popen

    def add(self, processes: list[tuple[int, str]]) -> None:
        """Have the watchdog end these (pid, start time) pairs when this program ends."""
        if processes and self.process.stdin is not None:
            self.process.stdin.write(" ".join(f"{pid}:{start}" for pid, start in processes))
            self.process.stdin.write("\n")
            self.process.stdin.flush()

    def remove_folder(self, folder: str) -> None:
        """Have the watchdog remove `folder` (after the kills) when this program ends: a
        scratch folder its processes wrote, such as a Ray cluster's session folder."""
        if self.process.stdin is not None:
            self.process.stdin.write(f"folder {folder}\n")
            self.process.stdin.flush()

    def release(self) -> None:
        """End the watch now: what it was told about and still runs is killed (the owner
        is done with it), and the watchdog exits."""
        if self.process.stdin is not None and not self.process.stdin.closed:
            self.process.stdin.close()
        self.process.wait(timeout=10)


def watch(root: int) -> Watchdog | None:
    """A watchdog for the current descendants of `root` (this process, usually); None where
    /proc does not exist."""
    watchdog = start_watchdog()
    if watchdog is not None:
        watchdog.add([entry for entry in descendants(root) if entry[0] != watchdog.process.pid])
    return watchdog


def watch_new(root: int, before: set[int]) -> Watchdog | None:
    """A watchdog for the descendants of `root` not in `before` (the pids there were
    earlier), other than Python's multiprocessing resource tracker, which must live as long
    as the interpreter that started it."""
    watchdog = start_watchdog()
    if watchdog is not None:
        watchdog.add(
            [
                (pid, start)
                for pid, start in descendants(root)
                if pid not in before and pid != watchdog.process.pid and not _is_tracker(pid)
            ]
        )
    return watchdog


def _is_tracker(pid: int) -> bool:
    try:
        return b"resource_tracker" in (Path("/proc") / str(pid) / "cmdline").read_bytes()
    except OSError:
        return False


def start_watchdog() -> Watchdog | None:
    """A watchdog told about nothing yet; None where /proc does not exist."""
    if not sys.platform.startswith("linux"):
        return None
    process = subprocess.Popen(
        [sys.executable, "-c", WATCHDOG],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,  # Ctrl-C of the program's group must not end it first
    )
    return Watchdog(process)
