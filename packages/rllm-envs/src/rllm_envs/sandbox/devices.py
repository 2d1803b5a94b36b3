"""The bwrap sandbox's /dev: the few device nodes programs use, and the links to their own fds.

A full `--dev` costs about 7 ms a run (a devtmpfs, a devpts and a nested user namespace), so
only these nodes are given. Bound one by one from the host's /dev they cost two mount calls
each, ten a run, plus as many to undo when the run's mount namespace goes: half of bubblewrap's
mount work. Where the host is root and its temp dir allows device nodes, they are made once per
sandbox in a private folder (root's, mode 0755: the sandbox's uid cannot change it) that each
run binds as /dev in one go; elsewhere the per-node binds are used.
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field

_PREFIX = "rllm-sandbox-dev-"  # then the owner's pid
# name -> (major, minor) of the Linux character devices.
NODES = {"null": (1, 3), "zero": (1, 5), "full": (1, 7), "random": (1, 8), "urandom": (1, 9)}
LINKS = {
    "fd": "/proc/self/fd",
    "stdin": "/proc/self/fd/0",
    "stdout": "/proc/self/fd/1",
    "stderr": "/proc/self/fd/2",
}


def bwrap_args(folder: str | None) -> list[str]:
    """bubblewrap arguments giving the sandbox its /dev: `folder` (see make_folder) bound as a
    whole, or without one each node bound from the host's /dev."""
    if folder is not None:
        return ["--dev-bind", folder, "/dev"]
    nodes = [arg for name in NODES for arg in ("--dev-bind", f"/dev/{name}", f"/dev/{name}")]
    links = [arg for name, target in LINKS.items() for arg in ("--symlink", target, f"/dev/{name}")]
    return nodes + links


def make_folder() -> str | None:
    """A folder holding the nodes and links, or None where one cannot be made or used: only
    root may make device nodes, and a filesystem mounted `nodev` makes them unusable."""
    if os.geteuid() != 0:
        return None
    sweep_orphans()
    folder = tempfile.mkdtemp(prefix=f"{_PREFIX}{os.getpid()}-")
    try:
        if os.statvfs(folder).f_flag & os.ST_NODEV:
            raise OSError(f"{folder} is on a nodev filesystem")
        os.chmod(folder, 0o755)
        for name, (major, minor) in NODES.items():
            path = os.path.join(folder, name)
            os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(major, minor))
            os.chmod(path, 0o666)  # mknod applies the umask
        for name, target in LINKS.items():
            os.symlink(target, os.path.join(folder, name))
    except OSError:
        remove_folder(folder)
        return None
    return folder


def sweep_orphans() -> None:
    """Remove the folders of processes that died without removing theirs (killed hard)."""
    root = tempfile.gettempdir()
    for name in os.listdir(root):
        owner = name.removeprefix(_PREFIX).partition("-")[0]
        if not name.startswith(_PREFIX) or not owner.isdigit():
            continue
        try:
            os.kill(int(owner), 0)
        except ProcessLookupError:
            remove_folder(os.path.join(root, name))
        except PermissionError:
            continue  # alive, another user's


def remove_folder(folder: str | None) -> None:
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


@dataclass
class DeviceFolder:
    """A sandbox's device folder (see make_folder), made by each process that runs the sandbox:
    a forked child makes its own and leaves the parent's to the parent, which removes it when
    it closes the sandbox (or at garbage collection or exit)."""

    _path: str | None = field(default=None, init=False)
    _owner: int = field(default=0, init=False)
    _finalizer: Callable[[], None] | None = field(default=None, init=False, repr=False)

    def path(self) -> str | None:
        if self._owner != os.getpid():
            if self._finalizer is not None:
                self._finalizer.detach()  # the parent's
            self._path, self._owner = make_folder(), os.getpid()
            self._finalizer = weakref.finalize(self, remove_folder, self._path)
        return self._path

    def close(self) -> None:
        if self._finalizer is not None and self._owner == os.getpid():
            self._finalizer()
