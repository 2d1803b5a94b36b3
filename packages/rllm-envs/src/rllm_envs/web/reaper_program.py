"""The Web env's browser reaper: runs Chromium as its child and reaps every process of it.

    python3 -I -S reaper_program.py rllm-web-reaper BROWSER ARGS...

Chromium is a tree: the main process starts zygotes, the zygotes fork renderers, and the crash
handler double-forks away from the tree at once. Whenever a parent dies before its children -
the tree is killed, or helpers outlive the main process at shutdown - the orphans are handed to
the nearest ancestor that is a "child subreaper", else to PID 1, and each stays a zombie until
that process reaps it. A container whose PID 1 is the training script never does: every browser
restart would leave its zombies behind.

Playwright launches this program in place of the browser (see ``browser.reaper_launcher``). It
marks itself a child subreaper, starts the browser with the same arguments and descriptors, in
the same process group (so Playwright's own group kill still takes everything), and reaps all
that ends below it: the main process, and every orphan the kernel hands it. Once the main
process has exited, what is left gets a moment to exit on its own, is killed, and is reaped;
then this program exits with the browser's status, which is what Playwright waits for.

The host kills a browser by its process group, sparing this program (it carries the
``rllm-web-reaper`` mark in its command line): see ``rllm_envs.web.processes``.
Standard library only.
"""

import ctypes
import os
import signal
import sys
import time

PR_SET_CHILD_SUBREAPER = 36
# How long helpers may outlive the main process before they are killed: enough for a clean
# exit (they notice the main process is gone within milliseconds), short enough not to delay
# Playwright, which waits for this program's exit to report the browser closed.
LINGER_SECONDS = 0.5


def become_subreaper() -> bool:
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0


def children() -> list[int]:
    """Our children, living or zombie (the ppid field of every /proc/PID/stat)."""
    own, found = os.getpid(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as handle:
                fields = handle.read().rsplit(")", 1)[-1].split()
        except OSError:
            continue  # exited meanwhile
        if int(fields[1]) == own:
            found.append(int(entry))
    return found


def reap_until_gone(main: int) -> int:
    """Reap everything below us until nothing is left; return the main process's wait status."""
    # Until the main process exits, reap whatever exits (the orphans handed to us included).
    while True:
        pid, status = os.wait()
        if pid == main:
            break
    # The rest gets a moment to exit on its own ...
    deadline = time.monotonic() + LINGER_SECONDS
    while time.monotonic() < deadline:
        try:
            if not os.waitpid(-1, os.WNOHANG)[0]:
                time.sleep(0.01)
        except ChildProcessError:
            return status
    # ... then is killed. Our children's pids cannot be reused before we reap them, so the kill
    # hits no stranger; their own children come to us in turn and go in the next round.
    while True:
        for child in children():
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.wait()
        except ChildProcessError:
            return status


def main() -> None:
    mark, browser, *arguments = sys.argv[1:]
    del mark  # only there to be seen in our command line
    become_subreaper()  # without it (very old kernels) we are a plain launcher: still correct
    main_pid = os.posix_spawn(browser, [browser, *arguments], os.environ)
    # The browser holds Playwright's pipes now; ours would keep them open after it died.
    os.closerange(3, 1024)

    def stop_browser(signum, _frame):
        try:
            os.kill(main_pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, stop_browser)
    code = os.waitstatus_to_exitcode(reap_until_gone(main_pid))
    os._exit(code if code >= 0 else 128 - code)


if __name__ == "__main__":
    main()
