#!/usr/bin/env bash
# Builds and tests the Python package from a fresh machine: makes a venv
# (bindings-python/.venv, or $SEGCACHE_VENV), installs maturin and pytest,
# runs `pip install ./bindings-python` (the maturin build backend compiles
# the Rust extension in release mode) and runs the pytest suite against the
# installed package. Needs python3 (>= 3.9) and cargo; installs Debian's
# python3-venv as root if the venv module is missing.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
venv="${SEGCACHE_VENV:-$here/.venv}"

if ! command -v python3 >/dev/null; then
    echo "python3 not found: install Python 3.9 or newer" >&2
    exit 1
fi
if [ ! -x "$venv/bin/python" ]; then
    if ! python3 -m venv "$venv" 2>/dev/null; then
        rm -rf "$venv"
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
            apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
            python3 -m venv "$venv"
        else
            echo "python3 -m venv failed: install the venv module (Debian: python3-venv)" >&2
            exit 1
        fi
    fi
fi
py="$venv/bin/python"
"$py" -m pip install -q --disable-pip-version-check "maturin>=1.9.4,<2" "pytest>=7"

echo "-- pip install ./bindings-python"
# From the workspace root, as a user would; a stale .so left by
# `maturin develop` must not shadow the fresh build.
rm -f "$here"/python/segcache/*.so
(cd "$root" && "$py" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps ./bindings-python)

echo "-- pytest"
# Run from the tests folder so `import segcache` is the installed package,
# not the source tree.
cd "$here/tests"
"$py" -m pytest -q -p no:cacheprovider .
