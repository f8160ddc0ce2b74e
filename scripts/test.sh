#!/usr/bin/env bash
# Set up what the tests need (`scripts/setup.sh tests`), then run the whole test suite in parallel.
# Extra arguments go to pytest, e.g. `scripts/test.sh -k capture`.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$ROOT/scripts/setup.sh" tests
VENV=${JT_VENV:-$ROOT/.venv}
cd "$ROOT"
# A private temp root, so concurrent pytest sessions never remove each other's folders.
exec "$VENV/bin/python" -m pytest -n "${JT_TEST_WORKERS:-auto}" --basetemp "$(mktemp -d)" "$@"
