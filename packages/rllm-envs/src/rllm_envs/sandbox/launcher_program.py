"""The bwrap backend's launcher: a small long-lived process, running as the sandbox's uid, that
starts bubblewrap for the host and sets the rlimits of what bubblewrap starts.

    python3 -I -S launcher_program.py SOCKET_FD

Why it exists: a run must start as the unprivileged uid (bubblewrap maps the uid that starts
it into the sandbox), and its rlimits must be set after bubblewrap has made the new user
namespace (RLIMIT_NPROC set before it would count every process of the uid on the host).
Doing either per run costs an exec (`setpriv`, `prlimit`), and a host running as root may
lack CAP_SYS_RESOURCE, so it cannot set another uid's limits itself. This process already has
the uid: it posix_spawn()s bubblewrap (no fork of a large trainer either), and prlimit()s the
namespace's first process while bubblewrap holds it at `--block-fd`.

Requests come over a SOCK_SEQPACKET socket, one JSON message each, with file descriptors
attached; each gets one reply:

    {"op": "spawn", "argv": [...], "env": {...}, "fds": [0, 1, 2, 3, ...]}  + the fds to
        place at those numbers in the child  ->  {"pid": N} + a pidfd of the child
    {"op": "limit", "pid": N, "rlimits": {"RLIMIT_CPU": 10, ...}}  ->  {"ok": true}
    any failure  ->  {"error": "..."}

It exits when the host closes its end (or dies); the bubblewrap processes it started die with
it (`--die-with-parent`). Standard library only: it runs on the system python3.
"""

import fcntl
import json
import os
import resource
import signal
import socket
import sys

# Python ignores these; a program started by posix_spawn would inherit that (Popen restores
# them the same way).
_RESTORED_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ)


def reap(*_):
    """SIGCHLD handler: collect exited children at once (the host watches and signals them
    through pidfds, which never point at a reused pid, and learns of their exit from those)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def spawn(request, fds):
    targets = request["fds"]
    if len(targets) != len(fds):
        raise ValueError(f"{len(fds)} file descriptors for {len(targets)} targets")
    # Move the received fds above every target first, so placing one never overwrites another.
    floor = max(targets, default=2) + 1
    moved = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, floor) for fd in fds]
    # No reaping until the pidfd is open: a child that failed at once must not be collected,
    # and its pid possibly reused, in between.
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
    try:
        actions = [
            (os.POSIX_SPAWN_DUP2, fd, target) for fd, target in zip(moved, targets, strict=True)
        ]
        pid = os.posix_spawn(
            request["argv"][0],
            request["argv"],
            request["env"],
            file_actions=actions,
            setsid=True,
            setsigmask=(),
            setsigdef=_RESTORED_SIGNALS,
        )
        return {"pid": pid}, [os.pidfd_open(pid)]
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        for fd in moved:
            os.close(fd)


def limit(request, fds):
    for name, value in request["rlimits"].items():
        resource.prlimit(request["pid"], getattr(resource, name), (value, value))
    return {"ok": True}, []


OPERATIONS = {"spawn": spawn, "limit": limit}


def serve(channel):
    while True:
        message, fds, _, _ = socket.recv_fds(channel, 1 << 20, 64, socket.MSG_CMSG_CLOEXEC)
        if not message:
            return  # the host closed its end
        reply_fds = []
        try:
            request = json.loads(message)
            reply, reply_fds = OPERATIONS[request["op"]](request, fds)
        except Exception as error:  # reported to the host, which fails the run
            reply = {"error": f"{type(error).__name__}: {error}"}
        finally:
            for fd in fds:
                os.close(fd)
        try:
            socket.send_fds(channel, [json.dumps(reply).encode()], reply_fds)
        finally:
            for fd in reply_fds:
                os.close(fd)


if __name__ == "__main__":
    signal.signal(signal.SIGCHLD, reap)
    serve(socket.socket(fileno=int(sys.argv[1])))
