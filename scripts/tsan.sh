#!/usr/bin/env bash
# Runs the code that shares memory between threads under ThreadSanitizer
# (nightly, -Zsanitizer=thread with a sanitized std), which reports every
# data race and lock-order inversion it sees happen:
#   - the core's threaded unit tests (storage thread, ShardedCache, the
#     single-flight table, Batch) and its storage, semantics and walk
#     integration tests;
#   - every server integration test, with the server binary sanitized too
#     (workers, the storage thread, the admin thread), except the four
#     that measure the server's RSS (memory_bound's three attacks and
#     metadump's stalled dump): the sanitizer's shadow memory and
#     allocator make those numbers meaningless;
#   - `segcache-bench concurrent` on a small key space: two threads on a
#     ShardedCache and on Pelikan's crate, and the storage thread with
#     blocking, pipelined and `Batch` clients;
#   - the C library's multi-threaded test (`bindings-c/tests/test_threads.c`,
#     compiled with gcc's -fsanitize=thread, linked with Rust's TSan
#     runtime so both sides share one), after a racy canary program that
#     must be reported (so a silent run means something).
# Miri (scripts/miri.sh) checks unsafe code for undefined behaviour but
# skips the threaded tests (too slow interpreted); this covers them.
# Reports are written under $OUT (default target/tsan-reports); the script
# fails if any test fails or any report was written. About 11 minutes on
# two cores. Needs the nightly toolchain's rust-src component and a C
# compiler.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
rustup +nightly component add rust-src >/dev/null
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target/tsan}"
OUT="${OUT:-$root/target/tsan-reports}"
rm -rf "$OUT"
mkdir -p "$OUT"
target=x86_64-unknown-linux-gnu
export RUSTFLAGS="-Zsanitizer=thread"
export RUSTDOCFLAGS="-Zsanitizer=thread"
# Child processes (the server under test) inherit this and report to
# their own file there.
export TSAN_OPTIONS="log_path=$OUT/report"
tsan_cargo() {
    cargo +nightly "$1" -Zbuild-std --target "$target" "${@:2}"
}

echo "== core: threaded unit tests"
tsan_cargo test -p seg-cache --lib -- storage sharded flight batch
echo "== core: storage, semantics and walk tests"
tsan_cargo test -p seg-cache --test storage --test semantics --test walk

echo "== server: integration tests (server sanitized too)"
tsan_cargo test -p segcache-server --tests -- \
    --skip attacks_keep_rss_under_the_bound \
    --skip a_dump_nobody_reads_holds_about_the_output_limit

echo "== segcache-bench concurrent, small"
tsan_cargo build --release -p segcache-bench
"$CARGO_TARGET_DIR/$target/release/segcache-bench" concurrent --keys 20000 --ops 200000 \
    --rounds 1 --batches 1,16,256 --only '`&mut`,ShardedCache,Pelikan,storage'

echo "== C library: threads sharing one handle"
tsan_cargo build --release -p segcache-c
runtime="$(rustc +nightly --print sysroot)/lib/rustlib/$target/lib/librustc-nightly_rt.tsan.a"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
link() { # object, output
    cc "$1" "${@:3}" -Wl,--whole-archive "$runtime" -Wl,--no-whole-archive \
        -lpthread -ldl -lm -lstdc++ -o "$2"
}
cat >"$work/canary.c" <<'EOF'
#include <pthread.h>
static int shared;
static void *bump(void *arg) { for (int i = 0; i < 1000; i++) shared++; return arg; }
int main(void) {
    pthread_t t;
    pthread_create(&t, 0, bump, 0);
    bump(0);
    pthread_join(t, 0);
    return 0;
}
EOF
cc -fsanitize=thread -O1 -g -c "$work/canary.c" -o "$work/canary.o"
link "$work/canary.o" "$work/canary"
TSAN_OPTIONS="log_path=$work/canary-report exitcode=0" "$work/canary"
if ! grep -qs 'data race' "$work"/canary-report.*; then
    echo "tsan.sh: the racy canary was not reported; the C sanitizer setup is broken" >&2
    exit 1
fi
cc -fsanitize=thread -O1 -g -Ibindings-c/include -c bindings-c/tests/test_threads.c \
    -o "$work/test_threads.o"
link "$work/test_threads.o" "$work/test_threads" "$CARGO_TARGET_DIR/$target/release/libsegcache.a"
"$work/test_threads"

if compgen -G "$OUT/report.*" >/dev/null; then
    echo "tsan.sh: ThreadSanitizer reports in $OUT:" >&2
    grep -h 'WARNING: ThreadSanitizer' "$OUT"/report.* | sort | uniq -c >&2
    exit 1
fi
echo "tsan.sh: no ThreadSanitizer report"
