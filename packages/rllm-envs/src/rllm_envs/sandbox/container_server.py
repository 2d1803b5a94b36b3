"""The trusted process inside each sandbox container: runs one request at a time for the host.

It is the container's main process, run by the container's root with only CAP_SETUID,
CAP_SETGID, CAP_KILL and CAP_CHOWN (no other capability, `no-new-privileges`). The untrusted
program never runs as root: each request forks a child that drops to the sandbox uid (losing
those capabilities), writes its files into /scratch, sets its resource limits and becomes the
program. Being another user, the program can neither signal, trace nor read this process, so it
cannot forge the reply. After every run it kills all of that uid's processes and a helper with
the sandbox uid empties /scratch, so nothing outlives a run.

Wire format on stdin/stdout (the container's attached streams): a 10-digit length, then that
many bytes of JSON, both ways. Standard library only: this runs on the image's python3.
"""

import base64
import json
import os
import resource
import select
import shutil
import signal
import sys
import threading
import time

SCRATCH = "/scratch"


def read_exact(fd, count):
    chunks = []
    while count:
        chunk = os.read(fd, count)
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        count -= len(chunk)
    return b"".join(chunks)


def fork():
    """os.fork, waiting a moment when the container's process limit is full: processes just
    killed count until the container's init has reaped them."""
    deadline = time.monotonic() + 3
    while True:
        try:
            return os.fork()
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def become_sandbox_user(uid):
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)


def start_program(request, stdin_fd, stdout_fd, stderr_fd):
    """In the forked child: drop privileges, set up, exec. Never returns."""
    try:
        os.setsid()
        for target, fd in ((0, stdin_fd), (1, stdout_fd), (2, stderr_fd)):
            os.dup2(fd, target)
        os.closerange(3, 256)
        with open("/proc/self/oom_score_adj", "w") as handle:
            handle.write("1000")  # on memory pressure the program dies, not this server
        become_sandbox_user(request["uid"])
        for relative, encoded in request["files"].items():
            path = os.path.normpath(os.path.join(SCRATCH, relative))
            if not path.startswith(SCRATCH + "/"):
                raise ValueError("file outside the scratch dir: " + relative)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as handle:
                handle.write(base64.b64decode(encoded))
        for name, value in request["rlimits"].items():
            resource.setrlimit(getattr(resource, name), (value, value))
        os.chdir(SCRATCH)
        os.execvpe(request["argv"][0], request["argv"], request["env"])
    except BaseException as error:
        os.write(2, f"sandbox: could not start the program: {error}\n".encode())
    os._exit(127)


def sandbox_pids(uid):
    """Live processes of `uid` (zombies are already dead, waiting for their parent to reap)."""
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat("/proc/" + name).st_uid != uid:
                    continue
                with open("/proc/" + name + "/stat") as handle:
                    state = handle.read().rpartition(")")[2].split()[0]
            except (OSError, IndexError):
                continue  # already gone
            if state not in ("Z", "X"):
                pids.append(int(name))
    return pids


def kill_all(uid):
    """SIGKILL every process of the sandbox uid, again until none is left (a fork bomb
    keeps making new ones while the first are killed). Needs CAP_KILL, not a fork: the
    bomb may have used up the container's process limit."""
    for _ in range(1000):
        pids = sandbox_pids(uid)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    raise RuntimeError("could not kill the sandbox's processes")


def clean_up(uid):
    """Kill every process of the sandbox uid, then empty /scratch as that uid."""
    kill_all(uid)
    helper = fork()
    if helper == 0:
        try:
            become_sandbox_user(uid)
            for root, dirs, _ in os.walk(SCRATCH):
                for name in dirs:
                    os.chmod(os.path.join(root, name), 0o700)
            for name in os.listdir(SCRATCH):
                path = os.path.join(SCRATCH, name)
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    os.unlink(path)
        finally:
            os._exit(0)
    os.waitpid(helper, 0)


def feed(fd, data):
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except OSError:
        pass  # the program closed its stdin or exited
    finally:
        os.close(fd)


def drain(fds, output, limit):
    """Read what is already in the pipes, without waiting for a leftover process: a program
    can write its last bytes and exit between the server's last select and its waitpid.
    True when that passes the output limit."""
    for fd in fds:
        os.set_blocking(fd, False)
        while True:
            try:
                data = os.read(fd, 65536)
            except BlockingIOError:
                break
            if not data:
                break
            room = limit - sum(len(chunk) for chunk in output.values())
            output[fd].extend(data[: max(room, 0)])
            if len(data) > room:
                return True
    return False


def run(request):
    started = time.monotonic()
    deadline = started + request["wall_seconds"]
    limit = request["max_output_bytes"]
    stdin_r, stdin_w = os.pipe()
    stdout_r, stdout_w = os.pipe()
    stderr_r, stderr_w = os.pipe()
    for fd in (stdin_r, stdout_w, stderr_w):  # so the program may reopen /dev/stdin and co.
        os.fchown(fd, request["uid"], request["uid"])
    child = fork()
    if child == 0:
        start_program(request, stdin_r, stdout_w, stderr_w)
    for fd in (stdin_r, stdout_w, stderr_w):
        os.close(fd)
    writer = threading.Thread(target=feed, args=(stdin_w, base64.b64decode(request["stdin"])))
    writer.daemon = True
    writer.start()
    output = {stdout_r: bytearray(), stderr_r: bytearray()}
    open_fds = [stdout_r, stderr_r]
    timed_out = truncated = False
    status = None
    while not truncated:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            timed_out = True
            break
        ready = select.select(open_fds, [], [], min(remaining, 0.05))[0] if open_fds else []
        for fd in ready:
            data = os.read(fd, 65536)
            if not data:
                open_fds.remove(fd)
                continue
            room = limit - len(output[stdout_r]) - len(output[stderr_r])
            output[fd].extend(data[: max(room, 0)])
            truncated = truncated or len(data) > room
        if status is None:
            pid, wait_status = os.waitpid(child, os.WNOHANG)
            status = wait_status if pid else None
        if not open_fds and status is None:
            time.sleep(0.001)
        # The program is done once it exited and its output is drained, or nothing but a
        # leftover process still holds the output open (the clean-up below kills it).
        if status is not None and (not open_fds or not ready):
            truncated = drain(open_fds, output, limit) or truncated
            break
    clean_up(request["uid"])
    if status is None or timed_out or truncated:
        if status is None:
            os.waitpid(child, 0)
        exit_code = -signal.SIGKILL
    elif os.WIFSIGNALED(status):
        exit_code = -os.WTERMSIG(status)
    else:
        exit_code = os.WEXITSTATUS(status)
    for fd in (stdout_r, stderr_r):
        os.close(fd)
    writer.join(1)
    return {
        "exit_code": exit_code,
        "timed_out": timed_out,
        "output_truncated": truncated,
        "stdout": base64.b64encode(bytes(output[stdout_r])).decode(),
        "stderr": base64.b64encode(bytes(output[stderr_r])).decode(),
        "wall_seconds": time.monotonic() - started,
    }


def serve():
    while True:
        try:
            request = json.loads(read_exact(0, int(read_exact(0, 10))))
        except EOFError:
            return  # the host hung up: the container is being removed
        try:
            reply = run(request)
        except Exception as error:  # reported to the host as an infrastructure failure
            reply = {"error": f"{type(error).__name__}: {error}"}
        body = json.dumps(reply).encode()
        sys.stdout.buffer.write(b"%010d" % len(body) + body)
        sys.stdout.buffer.flush()


if __name__ == "__main__":
    serve()
