#!/usr/bin/env bash
# Tests the C bindings end to end, from a fresh machine: builds
# libsegcache.{so,a}, installs it into a temporary prefix, builds and runs
# the C tests against it through pkg-config (statically and dynamically
# linked), checks the installed artifacts (SONAME; only segcache_* symbols
# global in the .a and .so), builds and runs examples/c/hello.c through
# pkg-config (shared, relying on the .pc's rpath, and segcache-static) and
# through the CMake package, and runs the tests under valgrind when
# valgrind is available. Missing tools (cc, make, pkg-config,
# valgrind, cmake) are installed from Debian's packages when running as root.
# Ends with one line "bindings-c: N passed, N failed" summing every run.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
cd "$root"

need=()
command -v cc >/dev/null || need+=(gcc libc6-dev)
command -v make >/dev/null || need+=(make)
command -v pkg-config >/dev/null || need+=(pkg-config)
command -v readelf >/dev/null || need+=(binutils)
command -v valgrind >/dev/null || need+=(valgrind)
command -v cmake >/dev/null || need+=(cmake)
if [ ${#need[@]} -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "== installing ${need[*]} =="
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}") \
        >/dev/null || echo "apt-get could not install ${need[*]}" >&2
fi
for tool in cc make pkg-config readelf nm cmake; do
    command -v "$tool" >/dev/null || { echo "bindings-c: $tool is required" >&2; exit 1; }
done

prefix="$(mktemp -d)"
log="$(mktemp)"
trap 'rm -rf "$prefix" "$log"' EXIT

echo "== bindings-c: build and install into $prefix =="
make --no-print-directory -C bindings-c install PREFIX="$prefix" >/dev/null

echo "== bindings-c: C tests (static and dynamic) =="
make --no-print-directory -C bindings-c check PREFIX="$prefix" | tee "$log"

# One line per check into the log: "1 passed, 0 failed" or the reverse.
verdict() { # $1: 0 if the check passed; $2: what failed
    if [ "$1" = 0 ]; then echo "1 passed, 0 failed" >>"$log"; else
        echo "FAILED: $2" >&2; echo "0 passed, 1 failed" >>"$log"; fi
}
# Runs a hello binary; it must print the greeting.
hello_ok() {
    local out
    out="$("$@" 2>&1)"
    echo "  $*: $out"
    [ "$out" = "greeting = hello, world" ]
}

echo "== bindings-c: installed artifacts =="
lib="$prefix/lib"
soname=$(readelf -d "$lib/libsegcache.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
echo "  SONAME $soname"
[[ "$soname" =~ ^libsegcache\.so\.[0-9]+(\.[0-9]+)?$ ]] && [ -e "$lib/$soname" ]
verdict $? "libsegcache.so has no SONAME, or no file of that name is installed"
# Every global the libraries define is part of the API. (nm's plugins are
# off: binutils' LLVM plugin aborts on some archives.)
others=$(nm -g --defined-only "$lib/libsegcache.a" 2>&1 | awk 'NF == 3 && $3 !~ /^segcache_/')
exported=$(nm -g --defined-only "$lib/libsegcache.a" | awk 'NF == 3 && $3 ~ /^segcache_/' | wc -l)
echo "  libsegcache.a: $exported segcache_* globals, $(echo -n "$others" | grep -c .) others"
[ -z "$others" ] && [ "$exported" -gt 20 ]
verdict $? "libsegcache.a defines globals outside the API: $(echo "$others" | head -n 5)"
others=$(nm -D --defined-only "$lib/libsegcache.so" | awk 'NF == 3 && $3 !~ /^segcache_/')
[ -z "$others" ]
verdict $? "libsegcache.so exports symbols outside the API: $(echo "$others" | head -n 5)"

echo "== bindings-c: examples/c/hello (pkg-config, shared and static) =="
make --no-print-directory -C examples/c -B PREFIX="$prefix" hello >/dev/null
# No LD_LIBRARY_PATH: segcache.pc's rpath must find the library.
hello_ok env -u LD_LIBRARY_PATH examples/c/hello
verdict $? "examples/c/hello (shared)"
make --no-print-directory -C examples/c -B PREFIX="$prefix" STATIC=1 hello >/dev/null
! readelf -d examples/c/hello | grep -q 'NEEDED.*libsegcache' && hello_ok examples/c/hello
verdict $? "examples/c/hello (segcache-static) needs libsegcache.so or fails"
rm -f examples/c/hello

echo "== bindings-c: examples/c with CMake (find_package(segcache)) =="
cm="$prefix/cmake-build"
if cmake -S examples/c -B "$cm" -DCMAKE_PREFIX_PATH="$prefix" >"$prefix/cmake.log" 2>&1 &&
    cmake --build "$cm" >>"$prefix/cmake.log" 2>&1; then
    hello_ok "$cm/hello"
    verdict $? "CMake-built hello (segcache::segcache)"
    ! readelf -d "$cm/hello-static" | grep -q 'NEEDED.*libsegcache' && hello_ok "$cm/hello-static"
    verdict $? "CMake-built hello-static (segcache::segcache_static) needs the .so or fails"
else
    cat "$prefix/cmake.log" >&2
    verdict 1 "cmake could not configure or build examples/c"
fi

if command -v valgrind >/dev/null; then
    echo "== bindings-c: valgrind =="
    make --no-print-directory -C bindings-c valgrind-check PREFIX="$prefix" | tee -a "$log"
else
    echo "== bindings-c: valgrind not available, skipped =="
fi

# Sum the runs' closing lines into one.
awk '/^[0-9]+ passed, [0-9]+ failed$/ { p += $1; f += $3 }
     END { printf "bindings-c: %d passed, %d failed\n", p, f; exit (f > 0) }' "$log"
