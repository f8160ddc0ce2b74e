#!/usr/bin/env bash
# Set up everything (see scripts/setup.sh), then run the whole test suite in parallel.
# Extra arguments go to pytest, e.g. `scripts/test.sh -k capture`.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$ROOT/scripts/setup.sh"
VENV=${JT_VENV:-$ROOT/.venv}
cd "$ROOT"
# A private temp root, so concurrent pytest sessions never remove each other's folders.
exec "$VENV/bin/python" -m pytest -n "${JT_TEST_WORKERS:-auto}" --basetemp "$(mktemp -d)" "$@"
