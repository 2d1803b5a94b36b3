"""Run folders that lose nothing: one writer at a time, atomic rewrites, children that end.

Both CLIs (``rllm-eval`` and ``rllm-train``) write a run into an output folder and may be told
to continue it (``--resume``). What they share lives here:

- :func:`check_output` turns every problem with the folder (a file in its place, a path that
  cannot be created or written) into one :class:`RunFolderError` line, before anything slow.
- :class:`RunLock` is an exclusive ``fcntl.flock`` on ``OUTPUT/.lock``, held for the run's
  life. The kernel drops it when the holder exits in any way (``kill -9`` included), so a lock
  left by a dead process never blocks anyone; the file records pid, host and start time only
  so that a refusal can name the holder.
- :func:`write_atomic` replaces a file through a temporary one and a rename, so a kill at any
  instant leaves the old content or the new, never a half-written one.
- :func:`owned_temp_name` / :func:`temp_owner` name temporary files after their owner, so a
  cleanup removes only its own (or those of processes that are gone).
- :func:`terminate_on_signals` makes SIGTERM (and SIGHUP) unwind the program like Ctrl-C, so
  ``finally`` blocks and ``atexit`` run and stop the children; :func:`die_with_parent` makes a
  child get SIGKILL when its parent is killed outright.
- :func:`fault_point` is the test-only hook the fault-injection suite kills runs with.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import json
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

LOCK_FILE = ".lock"
# Set by tests only: "phase" or "phase@step" SIGKILLs the process at that fault_point.
KILL_AT_VARIABLE = "RLLM_TEST_KILL_AT"
PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


class RunFolderError(Exception):
    """A run folder that cannot be used; the message is one line for the user."""


# ---- checks --------------------------------------------------------------------------------


def check_output(path: Path) -> Path:
    """Create `path` (and its parents) and check that files can be written in it.

    Everything that can go wrong (a file where the folder should be, a read-only or virtual
    file system such as /proc, no permission) becomes one RunFolderError line.
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise RunFolderError(f"--output {path} is an existing file, not a folder")
    try:
        path.mkdir(parents=True, exist_ok=True)
        # mkdir may succeed where files cannot be written (some virtual file systems).
        with tempfile.NamedTemporaryFile(dir=path, prefix=f".probe-{os.getpid()}-"):
            pass
    except OSError as error:
        reason = error.strerror or type(error).__name__
        raise RunFolderError(f"--output {path} cannot be written: {reason}") from None
    return path


# Files only one tool's runs hold, by the command that writes them (summary.json, which both
# write, tells nothing). A folder holding another tool's run is not written into, whatever the
# mode: an --overwrite there would leave a folder half one run and half the other.
RUN_SIGNATURES: dict[str, tuple[str, ...]] = {
    "rllm-train": ("metrics.jsonl", "config.yaml", "checkpoints"),
    "rllm-eval": ("episodes.jsonl",),
}


def holds_run(path: Path, markers: tuple[str, ...]) -> bool:
    """Whether `path` holds (part of) a run: any of the files a run writes exists there."""
    return any((Path(path) / marker).exists() for marker in markers)


def check_not_foreign(path: Path, tool: str) -> None:
    """Refuse a folder that holds a run another tool (a key of RUN_SIGNATURES) wrote."""
    for other, signature in RUN_SIGNATURES.items():
        found = [name for name in signature if (Path(path) / name).exists()]
        if other != tool and found:
            raise RunFolderError(
                f"--output {path} holds an {other} run ({', '.join(found)}); {tool} does not "
                "write into another tool's run: choose another --output"
            )


def check_run_mode(
    path: Path,
    markers: tuple[str, ...],
    *,
    resume: bool,
    overwrite: bool | None = None,
    tool: str | None = None,
) -> None:
    """Refuse another tool's run folder (`tool`: the command asking, a key of
    RUN_SIGNATURES), to start over an earlier run (unless `overwrite`) or to resume a missing
    one.

    ``overwrite=None``: the CLI has no --overwrite (the refusal does not offer it)."""
    if tool is not None:
        check_not_foreign(path, tool)
    present = holds_run(path, markers)
    if resume and not present:
        raise RunFolderError(f"--resume: {path} holds no run to continue (nothing of {markers})")
    if present and not resume and not overwrite:
        raise RunFolderError(
            f"--output {path} already holds a run; pass --resume to continue it"
            + (" or --overwrite to replace it" if overwrite is not None else "")
            + " or choose another --output"
        )


# ---- the lock ------------------------------------------------------------------------------


@dataclass(frozen=True)
class LockHolder:
    pid: int
    host: str
    started: float

    def describe(self) -> str:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(self.started))
        return f"pid {self.pid} on {self.host}, since {when}"


def read_holder(path: Path) -> LockHolder | None:
    """Who wrote `path`'s lock file last (the holder, while its lock is held)."""
    try:
        record = json.loads((Path(path) / LOCK_FILE).read_text(encoding="utf-8"))
        return LockHolder(int(record["pid"]), str(record["host"]), float(record["started"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


@dataclass
class RunLock:
    """An exclusive lock on a run folder; use as a context manager or call release()."""

    folder: Path
    handle: object  # the open lock file: the lock lives exactly as long as it stays open

    @classmethod
    def acquire(cls, folder: Path) -> RunLock:
        folder = Path(folder)
        try:
            handle = open(folder / LOCK_FILE, "a+", encoding="utf-8")  # noqa: SIM115 - kept open
        except OSError as error:
            raise RunFolderError(
                f"--output {folder} cannot be locked: {error.strerror or error}"
            ) from None
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as error:
            handle.close()
            if error.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise RunFolderError(f"--output {folder} cannot be locked: {error}") from None
            holder = read_holder(folder)
            who = holder.describe() if holder else "another process"
            raise RunFolderError(
                f"--output {folder} is in use by another run ({who}); wait for it to end "
                "or choose another --output"
            ) from None
        # Only the holder writes the record, after it got the lock: it names who holds it.
        record = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time()}
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps(record) + "\n")
        handle.flush()
        return cls(folder, handle)

    def release(self) -> None:
        # Closing the file drops the flock; the file stays (removing it would let a third
        # process lock a fresh inode while a second still waits on the old one).
        if not self.handle.closed:
            self.handle.close()

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


@dataclass
class RunClaim:
    """A checked, locked run folder, and whether the claim made it (see claim_run_folder)."""

    folder: Path
    lock: RunLock
    created: bool

    def release(self, started: bool = True) -> None:
        """Drop the lock; a folder this claim made for a run that never started goes again,
        so a refused or mistyped command leaves nothing behind."""
        self.lock.release()
        if self.created and not started:
            with contextlib.suppress(OSError):
                if {path.name for path in self.folder.iterdir()} <= {LOCK_FILE}:
                    (self.folder / LOCK_FILE).unlink(missing_ok=True)
                    self.folder.rmdir()

    def __enter__(self) -> RunClaim:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


def claim_run_folder(
    path: Path,
    markers: tuple[str, ...],
    *,
    resume: bool,
    overwrite: bool | None = None,
    tool: str | None = None,
) -> RunClaim:
    """check_output, RunLock.acquire and check_run_mode in one: the folder is usable, this
    process is its only writer, and what it holds fits the mode. Cheap: call it before
    loading a model or starting a server."""
    path = Path(path)
    created = not path.exists()
    check_output(path)
    claim = RunClaim(path, RunLock.acquire(path), created)
    try:
        check_run_mode(path, markers, resume=resume, overwrite=overwrite, tool=tool)
    except BaseException:
        claim.release(started=False)
        raise
    remove_orphaned_temps(path)
    return claim


def remove_orphaned_temps(folder: Path) -> None:
    """Remove the temporary files write_atomic left in `folder` when its writer was killed
    between writing and renaming (only theirs: a live owner may still rename its own)."""
    for leftover in Path(folder).glob(".*.tmp-*"):
        if leftover.is_file() and mine_or_orphaned(leftover.name):
            leftover.unlink(missing_ok=True)


# ---- files ---------------------------------------------------------------------------------


def owned_temp_name(name: str) -> str:
    """A hidden temporary name for `name` that records its owner's pid."""
    return f".{name}.tmp-{os.getpid()}"


def temp_owner(temp_name: str) -> int | None:
    """The pid a name made by owned_temp_name records (None when it records none)."""
    _, _, pid = temp_name.rpartition(".tmp-")
    return int(pid) if pid.isdigit() else None


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, under another user
    return True


def mine_or_orphaned(temp_name: str) -> bool:
    """Whether a cleanup of this process may remove `temp_name`: its own, or one whose owner
    has died (a run killed while writing). Never a live process's: it may be renaming it."""
    owner = temp_owner(temp_name)
    return owner is not None and (owner == os.getpid() or not process_alive(owner))


def fsync_file(path: Path) -> None:
    with open(path, "rb") as handle:
        os.fsync(handle.fileno())


def fsync_folder(path: Path) -> None:
    """Make a rename in `path` durable (the folder's entry, not only the file's data)."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def write_atomic(path: Path, text: str, fault: str | None = None) -> None:
    """Replace `path` with `text`: a reader (or a later run) sees the old file or the new.

    ``fault`` names the fault_point between the temporary file and the rename (tests)."""
    path = Path(path)
    temporary = path.with_name(owned_temp_name(path.name))
    temporary.write_text(text, encoding="utf-8")
    fsync_file(temporary)
    if fault:
        fault_point(fault)
    os.replace(temporary, path)
    fsync_folder(path.parent)


def append_durable(path: Path, line: str) -> None:
    """Append one line and fsync it: once this returns, a kill cannot take the line back."""
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(line)
        handle.flush()
        os.fsync(handle.fileno())


# ---- processes -----------------------------------------------------------------------------


class Terminated(SystemExit):
    """A signal unwinding the program (terminate_on_signals); its exit status is 128 + the
    signal, as a shell reports a process the signal killed."""

    def __init__(self, signum: int) -> None:
        super().__init__(128 + signum)
        self.signal_name = signal.Signals(signum).name


@dataclass
class SignalUnwinder:
    """The handler terminate_on_signals installs. It raises :class:`Terminated` (SystemExit,
    not an abrupt exit: finally blocks, context managers and atexit run, and they are what
    stops model servers, Ray and containers), and keeps the signal it got: a blocking Ray
    call that is running when the handler raises turns the exception into an exit of its
    own, and :func:`as_received_signal` turns it back."""

    received: int | None = None

    def __call__(self, signum: int, _frame: object) -> None:
        self.received = signum
        raise Terminated(signum)


# Below this much free space, a failed write is taken for a full disk even where the writer
# lost the errno (torch.save reports a full disk as a RuntimeError of its stream).
NEARLY_FULL_BYTES = 1 << 20
DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


def exception_chain(error: BaseException) -> list[BaseException]:
    """`error` and the exceptions it was raised from or while handling, newest first."""
    chain: list[BaseException] = []
    while error is not None and error not in chain:
        chain.append(error)
        error = error.__cause__ or error.__context__
    return chain


def free_bytes(folder: Path) -> int | None:
    """Free space on the file system holding `folder` (its nearest existing parent)."""
    for path in (Path(folder), *Path(folder).parents):
        if path.exists():
            try:
                return shutil.disk_usage(path).free
            except OSError:
                return None
    return None


def describe_full_disk(error: BaseException, folder: Path) -> str | None:
    """One line for `error` if a full disk under `folder` caused it (an ENOSPC or EDQUOT
    anywhere in its chain, or a failure with next to no space left), else None."""
    free = free_bytes(folder)
    full = any(
        isinstance(link, OSError) and link.errno in DISK_FULL_ERRNOS
        for link in exception_chain(error)
    )
    if not (full or (free is not None and free < NEARLY_FULL_BYTES)):
        return None
    left = "" if free is None else f" ({_size(free)} free there)"
    return f"the disk is full: writing under {folder} failed{left}"


def _size(count: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if count < 1024 or unit == "GB":
            return f"{count:.0f} {unit}" if unit == "B" else f"{count:.1f} {unit}"
        count /= 1024
    return f"{count} B"


def report_full_disk(prog: str, error: BaseException, folder: Path | None) -> int | None:
    """For a CLI's last handler: one line on stderr and exit status 1 when a full disk under
    `folder` caused `error`; None (re-raise it) otherwise."""
    full_disk = describe_full_disk(error, folder) if folder else None
    if full_disk is None:
        return None
    print(f"{prog}: {full_disk}; free space, then continue with --resume", file=sys.stderr)
    return 1


def report_stop(prog: str, stop: BaseException, *, resumable: bool) -> int:
    """One line on stderr for a run stopped by Ctrl-C or a signal, saying how to go on; the
    exit status to return (130 for Ctrl-C, 128 + the signal otherwise)."""
    what = f"terminated by {stop.signal_name}" if isinstance(stop, Terminated) else "interrupted"
    print(f"{prog}: {what}" + ("; continue with --resume" * resumable), file=sys.stderr)
    return stop.code if isinstance(stop, Terminated) else 130


def terminate_on_signals(signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGHUP)) -> None:
    """Make `signals` unwind the program (exit status 128 + the signal) instead of killing it
    with its children left running. Only the main thread may install handlers; elsewhere
    (a CLI's main() called from a test's thread) this does nothing."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        return
    unwinder = SignalUnwinder()
    for number in signals:
        signal.signal(number, unwinder)


@contextlib.contextmanager
def as_received_signal() -> Iterator[None]:
    """Around a blocking Ray call (``ray.get`` of a whole training run): Ray catches the
    handler's Terminated inside its wait and ends the call with an exit of its own (status 1,
    or a KeyboardInterrupt); raised again here as the Terminated of the signal that came."""
    try:
        yield
    except Terminated:
        raise
    except (SystemExit, KeyboardInterrupt):
        handler = signal.getsignal(signal.SIGTERM)
        received = handler.received if isinstance(handler, SignalUnwinder) else None
        if received is None:
            raise
        raise Terminated(received) from None


def die_with_parent() -> None:
    """For Popen's preexec_fn: the child gets SIGKILL when the thread that started it ends
    (Linux's PR_SET_PDEATHSIG), so even ``kill -9`` of the parent leaves no child behind.
    Elsewhere (macOS) it does nothing: the parent's signal handlers are the only guard."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def fault_point(phase: str, step: int | None = None) -> None:
    """Test-only: SIGKILL this process here when $RLLM_TEST_KILL_AT names `phase` (and, with
    ``phase@N``, `step` is N). The kill is real: nothing after it runs, no handler."""
    wanted = os.environ.get(KILL_AT_VARIABLE)
    if not wanted:
        return
    name, _, at = wanted.partition("@")
    if name == phase and (not at or (step is not None and int(at) == step)):
        with contextlib.suppress(OSError):
            sys.stdout.flush()
            sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)
