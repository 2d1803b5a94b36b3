"""Runs inside the sandbox for function-style tests: loads solution.py, calls the entry point
with the arguments read from stdin (a Python literal list) and writes repr(result) to stdout.

Only the arguments of this one test are ever inside the sandbox; the expected value stays on
the host, which parses the printed repr as a literal and compares it there. The solution's own
prints go to stderr so they cannot mix with the result.
"""

import ast
import os
import sys


def main():
    entry_point = sys.argv[1]
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


main()
