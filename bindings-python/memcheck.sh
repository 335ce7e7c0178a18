#!/usr/bin/env bash
# Runs the Python package's whole pytest suite under valgrind's memcheck,
# on CPython's debug build (Debian's python3.11-dbg: its own assertions on
# reference counts and object state are on) with the extension built in
# the dev profile (its debug_assert!s on), CPython's allocator replaced by
# malloc (PYTHONMALLOC=malloc) so every object is checked, and origins
# tracked. The binding's unsafe code (the refilled bytes objects, the
# objects' memory read directly, the fast-call entry points) runs under
# it as the suite drives it, threads included.
#
# memcheck/check.py then fails on any error but the one kind CPython 3.11
# makes by itself (a zero int's unused digit, see there), after checking
# that a use after free in a canary process is caught.
#
# Arguments go to pytest (e.g. `-k cas` for a part of the suite).
# About 15 minutes on one core. Needs valgrind and cargo; as root it
# installs python3.11-dbg and valgrind from Debian's packages when
# missing. Work files go to target/memcheck (or $MEMCHECK_DIR).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"
work="${MEMCHECK_DIR:-$root/target/memcheck}"
py=python3.11-dbg
need=()
command -v "$py" >/dev/null || need+=(python3.11-dbg python3.11-venv)
command -v valgrind >/dev/null || need+=(valgrind)
if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
    else
        echo "memcheck.sh: needs ${need[*]} (Debian packages)" >&2
        exit 1
    fi
fi

rm -rf "$work/logs" "$work/canary" "$work/wheel"
mkdir -p "$work/logs" "$work/canary" "$work/wheel"
venv="$work/venv"
[ -x "$venv/bin/python" ] || "$py" -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check "maturin>=1.9.4,<2" "pytest>=7" "hypothesis>=6"

echo "-- the extension in the dev profile (debug assertions on)"
rm -f "$here"/python/segcache/*.so
"$venv/bin/maturin" build -q -m "$here/Cargo.toml" --profile dev -i "$venv/bin/python" -o "$work/wheel"
"$venv/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$work"/wheel/segcache-*.whl

vg=(valgrind -q --track-origins=yes --num-callers=30)
export PYTHONMALLOC=malloc

echo "-- canary: a use after free must be reported"
"${vg[@]}" --log-file="$work/canary/vg.%p.log" "$venv/bin/python" -c '
import ctypes
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
p = libc.malloc(64)
libc.free(p)
ctypes.string_at(p, 8)
'
if python3 "$here/memcheck/check.py" "$work/canary" >/dev/null; then
    echo "memcheck.sh: the canary's use after free was not reported" >&2
    exit 1
fi

echo "-- pytest under memcheck, $("$venv/bin/python" -c 'import sys; print(sys.version.split()[0], "debug" if hasattr(sys, "gettotalrefcount") else "release")')"
# From the tests folder, so `import segcache` is the installed package.
# test_model.py's state machines run 3 examples each here (under
# valgrind one takes minutes; the suite's own run does 40 and 60).
# SEGCACHE_EXPECT_DEV_BUILD: the packaging test expects this dev build.
(cd "$here/tests" && SEGCACHE_MODEL_EXAMPLES=3 SEGCACHE_EXPECT_DEV_BUILD=1 "${vg[@]}" --log-file="$work/logs/vg.%p.log" \
    "$venv/bin/python" -X dev -m pytest -q -p no:cacheprovider . "$@")
python3 "$here/memcheck/check.py" "$work/logs"
