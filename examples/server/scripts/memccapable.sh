#!/usr/bin/env bash
# Runs libmemcached's protocol conformance tool (memccapable / memcapable,
# Debian package libmemcached-tools) in ASCII mode against
# segcache-server on a free loopback port. Fails unless every ASCII test
# passes. Installs the package when missing (as root).
set -euo pipefail
. "$(dirname "$0")/common.sh"

need_pkg libmemcached-tools memccapable memcapable
TOOL="$(command -v memccapable || command -v memcapable)"
build_server
# Every shape of the server: one worker owning the cache (inline), two
# workers sharing the storage thread, and two workers sharing one sharded
# cache (--shared-cache).
for shape in "1" "2" "2 --shared-cache"; do
    # shellcheck disable=SC2086 # the shape is a worker count and flags
    start_server SRV --workers $shape
    trap 'stop_pid "$SRV_PID"' EXIT
    echo "segcache-server (--workers $shape) on 127.0.0.1:$SRV_PORT; running $TOOL -a"
    LOG="$(mktemp)"
    set +e
    timeout 120 "$TOOL" -a -h 127.0.0.1 -p "$SRV_PORT" 2>&1 | tee "$LOG"
    rc=${PIPESTATUS[0]}
    set -e
    stop_pid "$SRV_PID"
    trap - EXIT
    passed=$(grep -c '\[pass\]' "$LOG" || true)
    failed=$(grep -Ec '\[(fail|FAIL)' "$LOG" || true)
    echo "memccapable (--workers $shape): $passed passed, $failed failed (exit $rc)"
    if [ "$rc" != 0 ] || [ "$failed" != 0 ] || [ "$passed" = 0 ]; then
        echo "memccapable: FAILED" >&2
        exit 1
    fi
done
echo "memccapable: all ASCII tests pass"
