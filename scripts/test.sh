#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh), with the system services the tests use, and runs
# the whole test suite plus a strict build of the docs. Extra arguments go to pytest.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

# The services start during the install, where it is a new one (scripts/setup.sh --services).
bash scripts/setup.sh --services
# shellcheck disable=SC1091
source .venv/bin/activate

# Two workers on two cores: most tests wait on a container, a browser or a child process, so
# a second test runs meanwhile. Groups keep a module's fixtures, and tests that share a
# costly server, on one worker (tests/scheduling.py). RLLM_TEST_WORKERS=0 runs in one process.
workers="${RLLM_TEST_WORKERS:-2}"
# Two processes computing with torch at once on two cores: OpenMP threads that spin while they
# wait burn the core the other process needs. Waiting passively, two 3-step trainings side by
# side took 101 s instead of 151 s; one alone, 60 s either way.
export OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}"
# The suite starts hundreds of Python processes. Where the environment forbids bytecode caches
# (PYTHONDONTWRITEBYTECODE), each would compile every module it imports again (the venv's
# packages install uncompiled, scripts/setup.sh); with the cache, each compiles once.
unset PYTHONDONTWRITEBYTECODE
spread=()
if [ "$workers" != "0" ]; then
    spread=(-n "$workers" --dist loadscope --no-loadscope-reorder)
fi
status=0
python -m pytest "${spread[@]}" "$@" || status=$?
# pytest exits 5 when it collected no tests: a valid outcome for a filtered run, not a failure.
if [ "$status" -eq 5 ]; then status=0; fi
if [ "$status" -ne 0 ]; then exit "$status"; fi

NO_MKDOCS_2_WARNING=1 mkdocs build --strict --quiet --site-dir "$(mktemp -d)"
echo "test: all passed"
