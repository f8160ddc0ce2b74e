#!/usr/bin/env bash
# Install what jupyter_trainer needs on a fresh Debian machine, and no more:
#
#   scripts/setup.sh quickstart   Node.js and npm (to build the lab extension the package
#                                 ships), a virtual environment with torch and the package
#                                 (editable, with the examples' scikit-learn)
#   scripts/setup.sh [tests]      all of that, plus the system packages the tests use (Open MPI,
#                                 Slurm, MariaDB, PostgreSQL, sshd, sshfs, Chromium), the test
#                                 extras and Horovod
#
# Idempotent: a repeat run only checks what is already there.
set -euo pipefail

MODE=${1:-tests}
case $MODE in
    quickstart | tests) ;;
    *) printf 'usage: %s [quickstart|tests]   (not %q)\n' "$0" "$MODE" >&2; exit 2 ;;
esac

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${JT_VENV:-$ROOT/.venv}
TORCH_VERSION=${JT_TORCH_VERSION:-2.13.0}
export PIP_DISABLE_PIP_VERSION_CHECK=1

log() { printf '[setup] %s\n' "$*" >&2; }

apt_packages=()
command -v node >/dev/null 2>&1 || apt_packages+=(nodejs)              # builds the lab extension
command -v npm >/dev/null 2>&1 || apt_packages+=(npm)
if [ "$MODE" = tests ]; then
command -v mpirun >/dev/null 2>&1 || apt_packages+=(openmpi-bin libopenmpi-dev)
command -v chromium >/dev/null 2>&1 || apt_packages+=(chromium)   # browser tests
command -v slurmctld >/dev/null 2>&1 || apt_packages+=(slurm-wlm)  # the Slurm target's tests
command -v mariadbd >/dev/null 2>&1 || apt_packages+=(mariadb-server)  # Slurm accounting tests
command -v slurmdbd >/dev/null 2>&1 || apt_packages+=(slurmdbd)        # (sacct through slurmdbd)
[ -x /usr/sbin/sshd ] || apt_packages+=(openssh-server)                # ssh target tests (real sshd)
command -v ssh >/dev/null 2>&1 || apt_packages+=(openssh-client)
command -v ip >/dev/null 2>&1 || apt_packages+=(iproute2)              # network-namespace hosts
command -v nft >/dev/null 2>&1 || apt_packages+=(nftables)             # a firewall inside one of them
command -v gcc >/dev/null 2>&1 || apt_packages+=(gcc)                  # the fake NVML driver library
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || apt_packages+=(postgresql)  # workspace index
command -v sshfs >/dev/null 2>&1 || apt_packages+=(sshfs)              # a network filesystem to refuse
fi
if [ ${#apt_packages[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        SUDO=sudo
    else
        SUDO=
    fi
    log "apt-get install ${apt_packages[*]}"
    # One setup at a time (two checkouts set up together would collide on apt's locks);
    # dpkg's own lock is waited for too, should something else hold it.
    $SUDO flock -w 1800 /var/lock/jupyter-trainer-setup.lock sh -c '
        apt-get update -qq &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -o DPkg::Lock::Timeout=600 "$@" >/dev/null
    ' apt-get "${apt_packages[@]}"
fi

if [ ! -x "$VENV/bin/python" ]; then
    log "creating $VENV"
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install -q -U pip
fi

# The lab extension's npm packages: installed once per package-lock.json and Node.js version,
# and kept outside the repository (JT_CACHE), so a fresh clone copies them in.
. "$ROOT/scripts/cache_dir.sh"
modules="$ROOT/labextension/node_modules"
modules_key="node$(node --version)-$(sha256sum "$ROOT/labextension/package-lock.json" | cut -c1-16)"
if [ "$(cat "$modules/.jt-key" 2>/dev/null)" != "$modules_key" ]; then
    cached="$CACHE/node_modules/$modules_key"
    if [ -f "$cached/.jt-key" ]; then
        log "lab extension packages from $cached"
        rm -rf "$modules"
        cp -a "$cached" "$modules"
    else
        log "npm ci in labextension/ (cached in $cached)"
        (cd "$ROOT/labextension" && npm ci --no-audit --no-fund --loglevel=error)
        echo "$modules_key" > "$modules/.jt-key"
        mkdir -p "$CACHE/node_modules"
        partial=$(mktemp -d "$cached.partial.XXXXXX")
        cp -a "$modules/." "$partial"
        mv -T "$partial" "$cached" 2>/dev/null || rm -rf "$partial"  # another setup got there first
    fi
fi

# Reinstall the project only when its metadata changed. The tests' install includes the
# quickstart's, so it satisfies both.
if [ "$MODE" = tests ]; then extras=examples,test,bench; else extras=examples; fi
stamp="$VENV/.jupyter_trainer-setup"
key="torch=$TORCH_VERSION $(sha256sum "$ROOT/pyproject.toml" | cut -c1-16)"
have=$(cat "$stamp" 2>/dev/null || true)
if [ "$have" != "$key [examples,test,bench]" ] && [ "$have" != "$key [$extras]" ]; then
    log "installing torch==$TORCH_VERSION"
    "$VENV/bin/pip" install -q "torch==$TORCH_VERSION"
    # Unlink the served build folder first, so that pip's copy of install.json does not land
    # in it through the link (the next build would then find that file twice).
    rm -rf "$VENV/share/jupyter/labextensions/jupyter-trainer-labextension" \
        "$ROOT/jupyter_trainer/frontends/labextension/install.json"
    log "installing jupyter_trainer[$extras] (editable)"
    "$VENV/bin/pip" install -q -e "$ROOT[$extras]"
    # Serve the lab extension from its build folder, so a rebuild needs no reinstall.
    rm -rf "$VENV/share/jupyter/labextensions/jupyter-trainer-labextension"
    ln -s "$ROOT/jupyter_trainer/frontends/labextension" "$VENV/share/jupyter/labextensions/jupyter-trainer-labextension"
    echo "$key [$extras]" > "$stamp"
fi

# Horovod, built against this torch (wheel cached outside the repo; JT_SKIP_HOROVOD=1 skips).
if [ "$MODE" = quickstart ]; then
    :
elif [ "${JT_SKIP_HOROVOD:-0}" = 1 ]; then
    log "skipping Horovod (JT_SKIP_HOROVOD=1): --launcher horovod and tests/launchers/test_horovod.py will fail"
else
    "$ROOT/scripts/build_horovod.sh" "$VENV"
fi
# A second torch, of another version, in a venv of its own (about 5 GB, the CUDA build with its
# libraries): one ssh node of the check's mixed-versions test runs it. Built once, outside the
# repository, keyed by version; the tests find it through $JT_OTHER_TORCH_PYTHON.
OTHER_TORCH=${JT_OTHER_TORCH:-2.14.1}
other="$CACHE/other-torch-$OTHER_TORCH"
if [ "$MODE" = tests ] && [ ! -f "$other/.jt-ready" ]; then
    log "torch==$OTHER_TORCH in a venv of its own at $other (for tests/targets/ssh/test_check_netns.py)"
    mkdir -p "$CACHE"
    partial=$(mktemp -d "$other.partial.XXXXXX")  # moved into place whole (only its python is used)
    chmod 755 "$partial"
    python3 -m venv "$partial"
    "$partial/bin/python" -m pip install -q "torch==$OTHER_TORCH"
    touch "$partial/.jt-ready"
    rm -rf "$other"
    mv -T "$partial" "$other" 2>/dev/null || rm -rf "$partial"  # another setup got there first
fi
log "ready: $VENV"
