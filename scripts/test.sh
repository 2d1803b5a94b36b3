#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh), starts the system services the tests use, and runs
# the whole test suite plus a strict build of the docs. Extra arguments go to pytest.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"

bash scripts/setup.sh
# shellcheck disable=SC1091
source .venv/bin/activate
bash scripts/services.sh

status=0
python -m pytest "$@" || status=$?
# pytest exits 5 when it collected no tests: a valid outcome for a filtered run, not a failure.
if [ "$status" -eq 5 ]; then status=0; fi
if [ "$status" -ne 0 ]; then exit "$status"; fi

NO_MKDOCS_2_WARNING=1 mkdocs build --strict --quiet --site-dir "$(mktemp -d)"
echo "test: all passed"
