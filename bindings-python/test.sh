#!/usr/bin/env bash
# Builds and tests the Python package from a fresh machine: makes a venv
# (bindings-python/.venv, or $SEGCACHE_VENV), installs maturin, pytest, hypothesis and mypy,
# builds the wheel once with `pip wheel ./bindings-python` (the maturin
# build backend compiles the Rust extension in release mode, stripped),
# installs it and runs the pytest suite against the installed package.
# Then checks that the free-threaded variant of the code compiles (its
# tests: cpython314.sh), and, if pyenv has them, runs the same suite on
# the oldest and newest CPython the package claims (3.10 and 3.13) with
# the same abi3 wheel.
# Needs python3 (>= 3.10) and cargo; installs Debian's python3-venv as root
# if the venv module is missing.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
venv="${SEGCACHE_VENV:-$here/.venv}"

if ! command -v python3 >/dev/null; then
    echo "python3 not found: install Python 3.10 or newer" >&2
    exit 1
fi

make_venv() { # python, dir
    if [ ! -x "$2/bin/python" ]; then
        if ! "$1" -m venv "$2" 2>/dev/null; then
            rm -rf "$2"
            if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
                apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null
                "$1" -m venv "$2"
            else
                echo "$1 -m venv failed: install the venv module (Debian: python3-venv)" >&2
                exit 1
            fi
        fi
    fi
}

make_venv python3 "$venv"
py="$venv/bin/python"
"$py" -m pip install -q --disable-pip-version-check "maturin>=1.9.4,<2" "pytest>=7" "hypothesis>=6" "mypy>=1.8"

echo "-- pip wheel ./bindings-python"
# From the workspace root, as a user would; a stale .so left by
# `maturin develop` must not shadow the fresh build.
rm -f "$here"/python/segcache/*.so
wheels="$(mktemp -d)"
trap 'rm -rf "$wheels"' EXIT
(cd "$root" && "$py" -m pip wheel -q --disable-pip-version-check --no-deps -w "$wheels" ./bindings-python)
wheel="$(ls "$wheels"/segcache-*.whl)"
"$py" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$wheel"

run_suite() { # python
    echo "-- pytest on $("$1" -c 'import sys; print(sys.version.split()[0])')"
    # Run from the tests folder so `import segcache` is the installed
    # package, not the source tree.
    (cd "$here/tests" && "$1" -m pytest -q -p no:cacheprovider .)
}
run_suite "$py"

# Free-threaded CPython builds a non-abi3 extension from source, where the
# cache takes its read lock on every call (`cfg(Py_GIL_DISABLED)`):
# `cpython314.sh` builds such an interpreter and runs the suite on it;
# here that code must at least compile and pass clippy.
echo "-- cargo clippy -p segcache-python --cfg Py_GIL_DISABLED"
(cd "$root" && cargo clippy -q -p segcache-python --all-targets -- -D warnings --cfg Py_GIL_DISABLED)

# The oldest and newest CPython the package claims, when pyenv has them.
pyenv_root="$(pyenv root 2>/dev/null || echo "$HOME/.pyenv")"
for minor in 3.10 3.13; do
    other="$(ls -d "$pyenv_root"/versions/"$minor".*/bin/python3 2>/dev/null | sort -V | tail -n 1 || true)"
    if [ -z "$other" ]; then
        echo "-- CPython $minor not found under $pyenv_root/versions: skipped" >&2
        continue
    fi
    other_venv="$venv-$minor"
    make_venv "$other" "$other_venv"
    "$other_venv/bin/python" -m pip install -q --disable-pip-version-check "pytest>=7" "hypothesis>=6" "maturin>=1.9.4,<2"
    "$other_venv/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$wheel"
    run_suite "$other_venv/bin/python"
done
