#!/usr/bin/env bash
# The static checks the tests start with: ruff's lint and format, and mypy (configured in
# pyproject.toml). Each failure says the command that fixes or shows it.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${JT_VENV:-$ROOT/.venv}
cd "$ROOT"
"$VENV/bin/ruff" check . || {
    echo "ruff found the problems above: fix them, or run $VENV/bin/ruff check --fix ." >&2
    exit 1
}
"$VENV/bin/ruff" format --check . || {
    echo "these files need formatting: run $VENV/bin/ruff format ." >&2
    exit 1
}
