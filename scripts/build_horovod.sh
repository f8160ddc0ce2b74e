#!/usr/bin/env bash
# Make Horovod importable (`import horovod.torch`) in a virtual environment, built against the
# torch installed there, with the Gloo and MPI controllers.
#
#   scripts/build_horovod.sh [VENV]          # default: $JT_VENV or <repo>/.venv
#
# Horovod 0.28.1 (the last release) does not build from PyPI against torch >= 2.1 (its CMake
# asks for C++14; torch's headers need C++17) nor with CMake 4 (old cmake_minimum_required).
# This script builds a wheel from the patched sdist once (about 4-8 minutes on 2 cores) and
# caches it outside the repository, keyed by Horovod version, torch version and Python tag:
#
#   ${JT_CACHE:-$HOME/.cache/jupyter_trainer}/wheels/horovod-0.28.1-torch<V>-<cpXY>/*.whl
#
# A later run with a cached wheel only installs it (seconds); a run where Horovod already
# imports, built for the same torch, does nothing.
set -euo pipefail

HOROVOD_VERSION=0.28.1
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${1:-${JT_VENV:-$ROOT/.venv}}
PY=$VENV/bin/python
. "$ROOT/scripts/cache_dir.sh"
export PIP_DISABLE_PIP_VERSION_CHECK=1
export PATH="$VENV/bin:$PATH"   # the pip-installed cmake, and horovodrun's python

log() { printf '[horovod] %s\n' "$*" >&2; }
die() { printf '[horovod] error: %s\n' "$*" >&2; exit 1; }

[ -x "$PY" ] || die "no Python at $PY; create the environment first (scripts/setup.sh)"
torch_version=$("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null) \
    || die "torch is not installed in $VENV; Horovod is built against it, so install torch first"
py_tag=$("$PY" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
key="horovod-$HOROVOD_VERSION-torch$torch_version-$py_tag"
wheel_dir="$CACHE/wheels/$key"
stamp="$VENV/.jupyter_trainer-horovod"

installed_ok() {
    [ "$(cat "$stamp" 2>/dev/null)" = "$key" ] || return 1
    "$PY" - <<'EOF' >/dev/null 2>&1
import horovod, horovod.torch as hvd
assert horovod.__version__ == "0.28.1"
assert hvd.gloo_built() and hvd.mpi_built()
EOF
}

if installed_ok; then
    log "Horovod $HOROVOD_VERSION already installed for torch $torch_version in $VENV"
    exit 0
fi

# One build at a time per cache key: a second caller waits, then installs the cached wheel.
mkdir -p "$wheel_dir"
exec 9>"$wheel_dir/.lock"
flock 9

first_wheel() {  # the first horovod wheel in folder $1, or nothing
    local f
    for f in "$1"/horovod-"$HOROVOD_VERSION"-*.whl; do
        [ -f "$f" ] && { echo "$f"; return 0; }
    done
    return 0
}
cached_wheel() { first_wheel "$wheel_dir"; }

need_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
        die "need root to run: $*"; fi
}

build_wheel() {
    local apt_packages=()
    command -v mpicxx >/dev/null 2>&1 && command -v mpirun >/dev/null 2>&1 \
        || apt_packages+=(openmpi-bin libopenmpi-dev)
    command -v g++ >/dev/null 2>&1 || apt_packages+=(g++)
    command -v make >/dev/null 2>&1 || apt_packages+=(make)
    if [ ${#apt_packages[@]} -gt 0 ]; then
        log "apt-get install ${apt_packages[*]}"
        need_root apt-get update -qq
        need_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${apt_packages[@]}" >/dev/null
    fi
    "$PY" -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' \
        || die "Python.h is missing for $PY (install the Python development headers, e.g. python3-dev)"

    log "installing build dependencies"
    "$VENV/bin/pip" install -q cmake numpy wheel setuptools packaging psutil pyyaml cloudpickle cffi \
        || die "pip could not install the build dependencies"

    local tmp
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/jt-horovod-build.XXXXXX")
    # shellcheck disable=SC2064
    trap "rm -rf '$tmp'" EXIT
    log "downloading the horovod==$HOROVOD_VERSION sdist"
    "$VENV/bin/pip" download -q --no-deps --no-binary :all: "horovod==$HOROVOD_VERSION" -d "$tmp/sdist" \
        || die "could not download the horovod==$HOROVOD_VERSION sdist from PyPI"
    tar xzf "$tmp/sdist/horovod-$HOROVOD_VERSION.tar.gz" -C "$tmp"
    local src="$tmp/horovod-$HOROVOD_VERSION"
    sed -i 's/set(CMAKE_CXX_STANDARD 14)/set(CMAKE_CXX_STANDARD 17)/' \
        "$src/CMakeLists.txt" "$src/horovod/torch/CMakeLists.txt"
    grep -q 'set(CMAKE_CXX_STANDARD 17)' "$src/CMakeLists.txt" \
        && grep -q 'set(CMAKE_CXX_STANDARD 17)' "$src/horovod/torch/CMakeLists.txt" \
        || die "patching the sdist to C++17 failed (its CMakeLists.txt changed?)"

    log "building the wheel against torch $torch_version (several minutes; log: $tmp/build.log)"
    local started=$SECONDS
    if ! env CMAKE_POLICY_VERSION_MINIMUM=3.5 HOROVOD_WITH_PYTORCH=1 HOROVOD_WITHOUT_TENSORFLOW=1 \
            HOROVOD_WITHOUT_MXNET=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITH_MPI=1 MAKEFLAGS=${MAKEFLAGS:--j2} \
            "$VENV/bin/pip" wheel -v --no-build-isolation --no-deps "$src" -w "$tmp/dist" \
            >"$tmp/build.log" 2>&1; then
        local kept="$CACHE/wheels/$key.build.log"
        cp "$tmp/build.log" "$kept"
        grep -E -m 20 'error|Error|ERROR' "$tmp/build.log" >&2 || true
        tail -n 30 "$tmp/build.log" >&2
        die "building Horovod $HOROVOD_VERSION against torch $torch_version failed; full log: $kept"
    fi
    local built
    built=$(first_wheel "$tmp/dist")
    [ -n "$built" ] || die "pip wheel succeeded but left no horovod wheel in $tmp/dist"
    cp "$built" "$wheel_dir/.$(basename "$built").part"
    mv "$wheel_dir/.$(basename "$built").part" "$wheel_dir/$(basename "$built")"
    rm -f "$CACHE/wheels/$key.build.log"
    log "built $(basename "$built") in $((SECONDS - started)) s; cached in $wheel_dir"
    rm -rf "$tmp"
    trap - EXIT
}

wheel=$(cached_wheel)
if [ -z "$wheel" ]; then
    build_wheel
    wheel=$(cached_wheel)
else
    log "using the cached wheel $wheel"
fi

log "installing $(basename "$wheel") into $VENV"
"$VENV/bin/pip" install -q --force-reinstall --no-deps "$wheel" \
    && "$VENV/bin/pip" install -q cloudpickle psutil pyyaml packaging cffi \
    || die "pip could not install $wheel"

check=$("$PY" - <<'EOF' 2>&1
import horovod, horovod.torch as hvd
missing = [name for name, ok in (("gloo", hvd.gloo_built()), ("mpi", hvd.mpi_built())) if not ok]
if missing:
    raise SystemExit(f"Horovod {horovod.__version__} was built without: {', '.join(missing)}")
print(f"Horovod {horovod.__version__} (gloo, mpi)")
EOF
) || die "the installed Horovod does not work: $check
  (delete $wheel_dir to rebuild it)"
echo "$key" > "$stamp"
log "ready: $check for torch $torch_version in $VENV"
