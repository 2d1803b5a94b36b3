"""Runs inside an SWE container: makes the workspace roots hold exactly a snapshot's archive.

    python3 -I -S workspace_sync.py ROOT...   < archive.tar

The archive (GNU tar, POSIX format, made by ``rllm_envs.swe.snapshots``) holds the contents of
each ROOT, named relative to /. Only what differs is touched: a file whose bytes, mode and
modification time already match is kept, a differing one rewritten, what the archive does not
hold removed, what it holds and the roots lack created. On the container's overlay file system
deleting and rewriting an image's files is the slow part (each deletion writes a whiteout), so
a workspace that changed a little is restored by a little work. Runs as the sandbox user (it can
change only what the agent could); prints a JSON summary. Standard library only.
"""

import json
import os
import shutil
import stat
import sys
import tarfile
from decimal import Decimal


def present_paths(roots):
    """Every path under the roots (not the roots themselves) and its lstat."""
    found = {}
    for root in roots:
        if not os.path.isdir(root):
            continue
        for folder, dirs, files in os.walk(root):
            for name in dirs + files:
                path = os.path.join(folder, name)
                try:
                    found[path] = os.lstat(path)
                except FileNotFoundError:
                    pass
    return found


def remove(path):
    try:
        if stat.S_ISDIR(os.lstat(path).st_mode):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    except FileNotFoundError:
        pass  # already gone with its folder


def mtime_ns(member):
    # Exact from the POSIX header's decimal string (a float loses the nanoseconds).
    text = member.pax_headers.get("mtime")
    return int(Decimal(text) * 1_000_000_000) if text else int(member.mtime) * 1_000_000_000


def same_file(path, status, data):
    if status is None or not stat.S_ISREG(status.st_mode) or status.st_size != len(data):
        return False
    with open(path, "rb") as handle:
        return handle.read() == data


def sync(roots, archive):
    present = present_paths(roots)
    held = set()
    folders = []
    counts = {"kept": 0, "written": 0, "removed": 0}
    for member in archive:
        path = "/" + member.name.rstrip("/")
        held.add(path)
        status = present.get(path)
        if member.isdir():
            if status is not None and not stat.S_ISDIR(status.st_mode):
                remove(path)
                status = None
            if status is None:
                os.mkdir(path, 0o700)  # its own mode once its contents are in
                counts["written"] += 1
            elif status.st_mode & 0o700 != 0o700:
                os.chmod(path, stat.S_IMODE(status.st_mode) | 0o700)  # to change its contents
            folders.append(member)
            continue
        if member.isreg():
            data = archive.extractfile(member).read()
            if same_file(path, status, data):
                counts["kept"] += 1
            else:
                if status is not None:
                    remove(path)
                with open(path, "wb") as handle:
                    handle.write(data)
                counts["written"] += 1
                status = None
            if status is None or stat.S_IMODE(status.st_mode) != member.mode:
                os.chmod(path, member.mode)
            if status is None or status.st_mtime_ns != mtime_ns(member):
                os.utime(path, ns=(mtime_ns(member), mtime_ns(member)))
            continue
        if member.issym():
            if status is not None and stat.S_ISLNK(status.st_mode):
                if os.readlink(path) == member.linkname:
                    counts["kept"] += 1
                    continue
            if status is not None:
                remove(path)
            os.symlink(member.linkname, path)
        elif member.islnk():
            if status is not None:
                remove(path)
            os.link("/" + member.linkname, path)
        elif member.isfifo():
            if status is not None:
                remove(path)
            os.mkfifo(path, member.mode)
        else:
            continue  # devices and the like: the sandbox user can make none
        counts["written"] += 1
    # What the archive does not hold, deepest first (a removed folder takes its contents).
    for path in sorted(set(present) - held, key=lambda p: p.count("/"), reverse=True):
        remove(path)
        counts["removed"] += 1
    # Folders' modes and times last: writing into a folder changes its time.
    for member in sorted(folders, key=lambda m: m.name.count("/"), reverse=True):
        path = "/" + member.name.rstrip("/")
        os.chmod(path, member.mode)
        os.utime(path, ns=(mtime_ns(member), mtime_ns(member)))
    return counts


def main():
    roots = [os.path.normpath(root) for root in sys.argv[1:]]
    with tarfile.open(fileobj=sys.stdin.buffer, mode="r|") as archive:
        counts = sync(roots, archive)
    sys.stdout.write(json.dumps(counts))


if __name__ == "__main__":
    main()
