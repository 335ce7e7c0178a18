#!/usr/bin/env bash
# Tests the C bindings end to end, from a fresh machine: builds
# libsegcache.{so,a}, installs it into a temporary prefix, builds and runs
# the C tests against it through pkg-config (statically and dynamically
# linked), builds and runs examples/c/hello.c, and runs the tests under
# valgrind when valgrind is available. Missing tools (cc, make, pkg-config,
# valgrind) are installed from Debian's packages when running as root.
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
if [ ${#need[@]} -gt 0 ] && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "== installing ${need[*]} =="
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}") \
        >/dev/null || echo "apt-get could not install ${need[*]}" >&2
fi
for tool in cc make pkg-config readelf; do
    command -v "$tool" >/dev/null || { echo "bindings-c: $tool is required" >&2; exit 1; }
done

prefix="$(mktemp -d)"
log="$(mktemp)"
trap 'rm -rf "$prefix" "$log"' EXIT

echo "== bindings-c: build and install into $prefix =="
make --no-print-directory -C bindings-c install PREFIX="$prefix" >/dev/null

echo "== bindings-c: C tests (static and dynamic) =="
make --no-print-directory -C bindings-c check PREFIX="$prefix" | tee "$log"

echo "== bindings-c: examples/c/hello =="
make --no-print-directory -C examples/c -B PREFIX="$prefix" hello >/dev/null
out="$(examples/c/hello)"
rm -f examples/c/hello
echo "$out"
if [ "$out" != "greeting = hello, world" ]; then
    echo "examples/c/hello printed an unexpected line" >&2
    echo "0 passed, 1 failed" >>"$log"
else
    echo "1 passed, 0 failed" >>"$log"
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
