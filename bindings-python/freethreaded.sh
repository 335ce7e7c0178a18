#!/usr/bin/env bash
# Runs the Python suite on a free-threaded CPython (3.14t), with the GIL
# off. No such interpreter is installed here and python.org is not
# reachable, so this builds one: CPython's release source as Debian's
# archive serves it (the `.orig.tar.xz` of its python3.14 package, checked
# against the SHA-256 below, the one Debian's .dsc for 3.14.7-1 lists),
# configured with --disable-gil (~3 minutes on 2 cores), kept under
# target/ for the next run. Then: a venv, the wheel built from source by
# pip for that interpreter (a cp314t extension, not the abi3 wheel), and
# the whole pytest suite, which checks among the rest that importing
# segcache leaves the GIL off (test_threads.py).
#
# Needs cargo, curl, a C compiler and CPython's build dependencies (zlib,
# libffi, OpenSSL headers: pip needs ssl; installed as root on Debian when
# missing). Set SEGCACHE_CPYTHON_SOURCE to
# a local copy of the tarball to build without downloading.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"

version=3.14.7
sha256=3b48dac8fb59f62eaa67ac83c1eb12bda1b7a08406dd286e252c11a66be27f81
url="http://deb.debian.org/debian/pool/main/p/python3.14/python3.14_${version}.orig.tar.xz"
work="$root/target/cpython-${version}t"
prefix="$work/install"
python="$prefix/bin/python3.14t"

if [ ! -x "$python" ]; then
    # CPython's build needs these headers for zlib, ctypes and ssl (pip).
    missing=()
    for pkg in curl xz-utils zlib1g-dev libffi-dev libssl-dev; do
        dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
    done
    if [ "${#missing[@]}" -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
    mkdir -p "$work"
    tarball="${SEGCACHE_CPYTHON_SOURCE:-$work/source.tar.xz}"
    if [ ! -f "$tarball" ]; then
        echo "-- downloading CPython $version's source from Debian's archive"
        curl -sSf --retry 3 --max-time 300 -o "$tarball.part" "$url"
        mv "$tarball.part" "$tarball"
    fi
    if ! echo "$sha256  $tarball" | sha256sum -c --quiet -; then
        echo "CPython source $tarball does not match its SHA-256 ($sha256)" >&2
        exit 1
    fi
    echo "-- building CPython ${version}t (--disable-gil) into $prefix"
    rm -rf "$work/build"
    mkdir -p "$work/build"
    tar -xJf "$tarball" -C "$work/build" --strip-components=1
    (
        cd "$work/build"
        ./configure -q --disable-gil --disable-test-modules --prefix="$prefix" >"$work/configure.log" 2>&1 ||
            { tail -n 40 "$work/configure.log" >&2; exit 1; }
        make -s -j"$(nproc)" >"$work/make.log" 2>&1 || { tail -n 40 "$work/make.log" >&2; exit 1; }
        make -s install >"$work/install.log" 2>&1 || { tail -n 40 "$work/install.log" >&2; exit 1; }
    )
    rm -rf "$work/build"
fi
"$python" -c 'import ssl, sys, sysconfig
assert sysconfig.get_config_var("Py_GIL_DISABLED") == 1, "not a free-threaded build"
assert not sys._is_gil_enabled(), "the GIL is on"'

venv="$work/venv"
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
py="$venv/bin/python"
"$py" -m pip install -q --disable-pip-version-check "maturin>=1.9.4,<2" "pytest>=7" "hypothesis>=6" "mypy>=1.8"

echo "-- pip wheel ./bindings-python on $("$py" -c 'import sys; print(sys.version.split()[0])') (free-threaded)"
rm -f "$here"/python/segcache/*.so
wheels="$(mktemp -d)"
trap 'rm -rf "$wheels"' EXIT
(cd "$root" && "$py" -m pip wheel -q --disable-pip-version-check --no-deps -w "$wheels" ./bindings-python)
wheel="$(ls "$wheels"/segcache-*.whl)"
case "$wheel" in
*-cp314-cp314t-*) ;;
*)
    echo "expected a cp314t wheel, got $(basename "$wheel")" >&2
    exit 1
    ;;
esac
"$py" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$wheel"

echo "-- pytest on CPython ${version}t, GIL off"
# From the tests folder, so `import segcache` is the installed package.
(cd "$here/tests" && env -u PYTHON_GIL "$py" -m pytest -q -p no:cacheprovider .)
