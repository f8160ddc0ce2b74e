#!/usr/bin/env bash
# Set up what the quickstart needs (`scripts/setup.sh quickstart`), then execute notebooks/quickstart.ipynb headless
# with papermill and print where the executed notebook is. Extra arguments go to papermill,
# e.g. `scripts/quickstart.sh -p epochs 20`.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bash "$ROOT/scripts/setup.sh" quickstart
VENV=${JT_VENV:-$ROOT/.venv}
OUT_DIR=${JT_OUT_DIR:-$ROOT/out}
mkdir -p "$OUT_DIR"
out="$OUT_DIR/quickstart.ipynb"
cd "$ROOT/notebooks"
"$VENV/bin/papermill" --kernel python3 --cwd "$ROOT/notebooks" quickstart.ipynb "$out" "$@"
echo "executed notebook: $out"
