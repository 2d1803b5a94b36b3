"""Runs inside the sandbox, one test per run (standard library only):

    python3 -S runner.py stdio                  solution.py is the program; stdin is the input
    python3 -S runner.py function ENTRY_POINT   calls ENTRY_POINT(*args), args read from stdin

Only the input of this one test is ever inside the sandbox; the expected value stays on the
host, which judges what comes out. A function's result is written to stdout as its repr (the
host parses it as a literal); the solution's own prints go to stderr so they cannot mix with it.

Python starts with -S, without `site`: that is about a third of a sandboxed Python's start-up
time, and all `site` would add is the installed packages of the host (bwrap) or the image
(docker), so solutions get the standard library alone on every backend. The two builtins of
`site` that solutions do call, exit() and quit(), are defined here.

A stdio solution is run with exec() on its source, not compile(): the first compile() call of
a process builds every AST node type (about a millisecond, near a tenth of a whole bwrap run), which
exec() on source text skips. exec() names the code "<string>", so an uncaught exception is
printed by the interpreter's own hook and renamed to solution.py (the `traceback` module
would cost more than the whole run).
"""

import builtins
import io
import sys

# These functions run after the solution's globals have replaced the runner's (see run_stdio),
# so whatever they use is bound as a default argument: a solution's global named `sys` or
# `type` cannot change them.


def leave(code=None, _sys=sys, _exit=SystemExit):
    """exit()/quit() as `site` defines them: close stdin, then raise SystemExit."""
    try:
        _sys.stdin.close()
    except Exception:
        pass
    raise _exit(code)


def report(error, _sys=sys, _buffer=io.StringIO, _exit=SystemExit):
    """Print `error` as an uncaught exception of solution.py would be, then exit 1."""
    # The solution's frames start below the runner's own (the frame that called exec()).
    trace = error.__traceback__.tb_next if error.__traceback__ else None
    error.__traceback__ = trace
    text = _buffer()
    stderr, _sys.stderr = _sys.stderr, text
    try:
        _sys.excepthook(error.__class__, error, trace)
    finally:
        _sys.stderr = stderr
    stderr.write(text.getvalue().replace('File "<string>"', 'File "solution.py"'))
    raise _exit(1)


def run_stdio():
    with open("solution.py", "rb") as handle:
        source = handle.read()
    sys.argv[:] = ["solution.py"]
    # The solution runs in the __main__ module itself, as if started directly: what it defines
    # is importable as __main__ (pickle, multiprocessing) and `__name__ == "__main__"` holds.
    fresh = {"__name__": "__main__", "__file__": "solution.py", "__builtins__": builtins}
    main = sys.modules["__main__"].__dict__
    failed = report
    main.clear()  # from here on this module's own names are gone: only locals are used
    main.update(fresh)
    try:
        exec(source, main)
    except Exception as error:
        failed(error)


def run_function(entry_point):
    import ast
    import os

    args = ast.literal_eval(sys.stdin.read())
    result_fd = os.dup(1)
    os.dup2(2, 1)
    with open("preamble.py") as handle:
        preamble = handle.read()
    with open("solution.py") as handle:
        source = handle.read()
    namespace = {"__name__": "solution"}
    # `ast` has built the AST types already, so compile() costs nothing extra here.
    exec(compile(preamble + "\n" + source, "solution.py", "exec"), namespace)
    result = namespace[entry_point](*args)
    sys.stdout.flush()
    os.write(result_fd, repr(result).encode("utf-8", "replace"))


if __name__ == "__main__":
    builtins.exit = builtins.quit = leave
    if sys.argv[1:2] == ["stdio"]:
        run_stdio()
    else:
        run_function(sys.argv[2])
