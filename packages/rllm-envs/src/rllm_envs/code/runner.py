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
"""

import builtins
import sys


def leave(code=None):
    """exit()/quit() as `site` defines them: close stdin, then raise SystemExit."""
    try:
        sys.stdin.close()
    except Exception:
        pass
    raise SystemExit(code)


def run_stdio():
    with open("solution.py", "rb") as handle:
        code = compile(handle.read(), "solution.py", "exec")
    sys.argv[:] = ["solution.py"]
    # The solution runs in the __main__ module itself, as if started directly: what it defines
    # is importable as __main__ (pickle, multiprocessing) and `__name__ == "__main__"` holds.
    fresh = {"__name__": "__main__", "__file__": "solution.py", "__builtins__": builtins}
    main = sys.modules["__main__"].__dict__
    main.clear()  # from here on this module's own names are gone: only locals are used
    main.update(fresh)
    exec(code, main)


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
