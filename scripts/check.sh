#!/usr/bin/env bash
# The static checks the tests start with: ruff's lint and format and mypy's type check (all
# configured in pyproject.toml), then the lab extension's type check (tsc) and lint (biome).
# Each failure says the command that fixes or shows it.
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
# mypy's cache lives outside the repository, keyed by mypy's version, so a fresh clone checks
# in seconds what a cold cache takes minutes for; $MYPY_CACHE_DIR overrides it.
. "$ROOT/scripts/cache_dir.sh"
export MYPY_CACHE_DIR=${MYPY_CACHE_DIR:-$CACHE/mypy-$("$VENV/bin/mypy" --version | cut -d' ' -f2)}
"$VENV/bin/mypy" || {
    echo "mypy found the type errors above: see them again with $VENV/bin/mypy" >&2
    exit 1
}

# The lab extension: TypeScript in strict mode over every source and test file (src/version.ts
# written from package.json first), and biome's lint (labextension/biome.jsonc), both from the
# packages setup.sh installs into labextension/node_modules.
LAB="$ROOT/labextension"
for tool in tsc biome; do
    [ -x "$LAB/node_modules/.bin/$tool" ] || {
        echo "labextension/node_modules/.bin/$tool is missing: run bash scripts/setup.sh" >&2
        exit 1
    }
done
(cd "$LAB" && node scripts/write-version.mjs && node_modules/.bin/tsc -p tsconfig.check.json) || {
    echo "tsc found the type errors above: see them with (cd labextension && node_modules/.bin/tsc -p tsconfig.check.json)" >&2
    exit 1
}
(cd "$LAB" && node_modules/.bin/biome lint --error-on-warnings .) || {
    echo "biome found the problems above: fix them, or run (cd labextension && node_modules/.bin/biome lint --write .)" >&2
    exit 1
}
