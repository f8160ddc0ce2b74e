#!/usr/bin/env bash
# Set up what the tests need (`scripts/setup.sh tests`), then run the whole test suite in parallel.
# Extra arguments go to pytest, e.g. `scripts/test.sh -k capture`.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$ROOT/scripts/setup.sh" tests
VENV=${JT_VENV:-$ROOT/.venv}
. "$ROOT/scripts/cache_dir.sh"
export JT_OTHER_TORCH_PYTHON=${JT_OTHER_TORCH_PYTHON:-$CACHE/other-torch-${JT_OTHER_TORCH:-2.14.1}/bin/python}
cd "$ROOT"
bash "$ROOT/scripts/check.sh"
# Compile the package and the tests to bytecode once: every test starts many Python processes
# (supervisors, ranks, the CLI), and under PYTHONDONTWRITEBYTECODE=1 each of them would
# otherwise compile every module it imports from source.
"$VENV/bin/python" -m compileall -q -j 0 jupyter_trainer tests bench > /dev/null
# A private temp root, so concurrent pytest sessions never remove each other's folders;
# removed when the session ends (it holds a few GB of run stores and clusters' state).
BASETEMP=$(mktemp -d)
trap 'rm -rf "$BASETEMP"' EXIT
# One worker more than there are cores: with one per core, the cores sit idle for a quarter of
# the session while tests wait on something else (a Slurm time limit, a server starting, a
# grace period), and a third worker fills most of that (docs/benchmarks.md, "The test suite").
# loadgroup: the tests of one xdist_group (those on the Ray cluster) run on one worker, which
# then starts one cluster for them instead of one per worker.
WORKERS=${JT_TEST_WORKERS:-$(($(nproc) + 1))}
"$VENV/bin/python" -m pytest -n "$WORKERS" --dist loadgroup --durations=25 --basetemp "$BASETEMP" "$@"
