#!/usr/bin/env bash
# Runs the Python suite on CPython 3.14, the newest release, twice: with
# the GIL (the abi3 wheel every CPython 3.10+ installs) and free-threaded
# (3.14t, the GIL off: a cp314t extension built from source). Neither is
# installed here and python.org is not reachable, so this builds them:
# CPython's release source as Debian's archive serves it (the
# `.orig.tar.xz` of its python3.14 package, checked against the SHA-256
# below, the one Debian's .dsc for 3.14.7-1 lists), configured without and
# with --disable-gil (~3 minutes each on 2 cores), kept under target/ for
# the next run. For each: a venv, the wheel pip builds from
# ./bindings-python with that interpreter, and the whole pytest suite
# (which checks, on 3.14t, that importing segcache leaves the GIL off:
# test_threads.py).
#
# Needs cargo, curl, a C compiler and CPython's build dependencies (zlib,
# libffi, OpenSSL headers: pip needs ssl; installed as root on Debian when
# missing). Set SEGCACHE_CPYTHON_SOURCE to a local copy of the tarball to
# build without downloading; pass `gil` or `free-threaded` to run one.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(dirname "$here")"

version=3.14.7
sha256=3b48dac8fb59f62eaa67ac83c1eb12bda1b7a08406dd286e252c11a66be27f81
url="http://deb.debian.org/debian/pool/main/p/python3.14/python3.14_${version}.orig.tar.xz"
work="$root/target/cpython-${version}"
tarball="${SEGCACHE_CPYTHON_SOURCE:-$work/source.tar.xz}"
if [ "$#" -gt 0 ]; then variants=("$@"); else variants=(gil free-threaded); fi

source_tarball() {
    # CPython's build needs these headers for zlib, ctypes and ssl (pip).
    local missing=() pkg
    for pkg in curl xz-utils zlib1g-dev libffi-dev libssl-dev; do
        dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
    done
    if [ "${#missing[@]}" -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
        apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
    mkdir -p "$work"
    if [ ! -f "$tarball" ]; then
        echo "-- downloading CPython $version's source from Debian's archive"
        curl -sSf --retry 3 --max-time 300 -o "$tarball.part" "$url"
        mv "$tarball.part" "$tarball"
    fi
    if ! echo "$sha256  $tarball" | sha256sum -c --quiet -; then
        echo "CPython source $tarball does not match its SHA-256 ($sha256)" >&2
        exit 1
    fi
}

build_cpython() { # variant, prefix, configure flags...
    local variant="$1" prefix="$2" build="$work/build-$1"
    shift 2
    source_tarball
    echo "-- building CPython $version ($variant) into $prefix"
    rm -rf "$build"
    mkdir -p "$build"
    tar -xJf "$tarball" -C "$build" --strip-components=1
    (
        cd "$build"
        ./configure -q --disable-test-modules --prefix="$prefix" "$@" >"$work/$variant-configure.log" 2>&1 ||
            { tail -n 40 "$work/$variant-configure.log" >&2; exit 1; }
        make -s -j"$(nproc)" >"$work/$variant-make.log" 2>&1 || { tail -n 40 "$work/$variant-make.log" >&2; exit 1; }
        make -s install >"$work/$variant-install.log" 2>&1 || { tail -n 40 "$work/$variant-install.log" >&2; exit 1; }
    )
    rm -rf "$build"
}

run_variant() { # variant
    local variant="$1" prefix python flags=() tag gil
    prefix="$work/$variant"
    case "$variant" in
    gil) python="$prefix/bin/python3.14" tag="cp310-abi3" gil=1 ;;
    free-threaded) python="$prefix/bin/python3.14t" tag="cp314-cp314t" gil=0 flags=(--disable-gil) ;;
    *)
        echo "unknown variant $variant: gil or free-threaded" >&2
        exit 2
        ;;
    esac
    [ -x "$python" ] || build_cpython "$variant" "$prefix" "${flags[@]}"
    "$python" -c "import ssl, sys, sysconfig
assert (sysconfig.get_config_var('Py_GIL_DISABLED') or 0) == 1 - $gil, 'wrong variant'
assert getattr(sys, '_is_gil_enabled', lambda: True)() == bool($gil), 'GIL state'"

    local venv="$work/$variant-venv"
    [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
    local py="$venv/bin/python"
    "$py" -m pip install -q --disable-pip-version-check "maturin>=1.9.4,<2" "pytest>=7" "hypothesis>=6" "mypy>=1.8"

    echo "-- pip wheel ./bindings-python on CPython $version ($variant)"
    rm -f "$here"/python/segcache/*.so
    local wheels
    wheels="$(mktemp -d)"
    (cd "$root" && "$py" -m pip wheel -q --disable-pip-version-check --no-deps -w "$wheels" ./bindings-python)
    local wheel
    wheel="$(ls "$wheels"/segcache-*.whl)"
    case "$wheel" in
    *-"$tag"-*) ;;
    *)
        echo "expected a $tag wheel, got $(basename "$wheel")" >&2
        exit 1
        ;;
    esac
    "$py" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps "$wheel"
    rm -rf "$wheels"

    echo "-- pytest on CPython $version ($variant)"
    # From the tests folder, so `import segcache` is the installed package.
    (cd "$here/tests" && env -u PYTHON_GIL "$py" -m pytest -q -p no:cacheprovider .)
}

for variant in "${variants[@]}"; do
    run_variant "$variant"
done
