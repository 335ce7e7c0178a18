#!/usr/bin/env bash
# User-space instructions per request: segcache-server (WORKERS workers,
# default one) and, when PELIKAN_SEGCACHE names a built `pelikan-segcache`
# binary, Pelikan's own segcache server (as many worker threads), each under valgrind's callgrind
# (every thread counted) while the load generator runs at a fixed, low
# rate. A count, not a time: it does not move with the machine's other
# load. Kernel work (the syscalls and TCP, most of every server's CPU at
# these rates; see syscalls.sh and segments.sh) is not in it.
#
# Each server runs twice, for SHORT and for LONG seconds of load after the
# same fill; the figure is the difference in instructions over the
# difference in requests, so start-up, the fill and shutdown cancel out.
# memcached is not measured: under valgrind it cannot set its file limit
# and exits.
#
# Env: RATE (default 3000: slow enough for a server under valgrind to keep
# up, so each request is read and answered on its own), SHORT (2), LONG
# (5), CONNS (128), WORKERS (1), SEGCACHE_BIN (a segcache-server binary to measure
# instead of this tree's), PELIKAN_SEGCACHE. Prints markdown to stdout.
set -euo pipefail
. "$(dirname "$0")/common.sh"

RATE="${RATE:-3000}"
SHORT="${SHORT:-2}"
LONG="${LONG:-5}"
CONNS="${CONNS:-128}"
WORKERS="${WORKERS:-1}"
LOADGEN="$CARGO_TARGET_DIR/release/loadgen"

need_pkg valgrind valgrind
build_server
SERVER_BIN="${SEGCACHE_BIN:-$SERVER_BIN}"
track_processes

# run NAME SECS: "instructions requests" of one server run.
run() {
    local name="$1" secs="$2" out="$WORK/$1-$2" port pid line
    mkdir -p "$out"
    port="$(free_port)"
    local grind=(valgrind --tool=callgrind -q --callgrind-out-file="$out/cg.%p")
    case "$name" in
    segcache)
        "${grind[@]}" "$SERVER_BIN" --port "$port" --admin-port 0 --workers "$WORKERS" \
            --heap-size 256MiB >/dev/null 2>&1 &
        ;;
    pelikan)
        pelikan_conf "$out/pelikan.toml" "$WORKERS" "$port"
        "${grind[@]}" "$PELIKAN_SEGCACHE" "$out/pelikan.toml" >/dev/null 2>&1 &
        ;;
    esac
    pid=$!
    PIDS+=("$pid")
    # Start-up under valgrind is slow: wait up to four times wait_port's bound.
    local tries=0
    until wait_port "$port"; do
        tries=$((tries + 1))
        [ "$tries" -lt 4 ] || { echo "$name did not start under valgrind" >&2; return 1; }
    done
    fill_first "$LOADGEN" --port "$port" --rate 2000 --duration 1 --warmup 0 \
        --connections "$CONNS"
    line="$("$LOADGEN" --port "$port" --rate "$RATE" --duration "$secs" --warmup 0 \
        --connections "$CONNS" --no-fill)"
    stop_pid "$pid"
    echo "$(cat "$out"/cg.* | awk '/^summary:/ {n += $2} END {print n}') $(field requests "$line")"
}

SERVERS="segcache"
if [ -n "${PELIKAN_SEGCACHE:-}" ]; then SERVERS="$SERVERS pelikan"; fi

echo "## User-space instructions per request (callgrind, all threads, $WORKERS worker(s))"
echo
echo "Command: \`RATE=$RATE SHORT=$SHORT LONG=$LONG CONNS=$CONNS WORKERS=$WORKERS bash examples/server/scripts/instructions.sh\`"
echo
echo "| server | rate (req/s) | instructions/req | runs (instructions requests) |"
echo "| --- | ---: | ---: | --- |"
for server in $SERVERS; do
    short="$(run "$server" "$SHORT")"
    long="$(run "$server" "$LONG")"
    python3 - "$server" "$RATE" "$short" "$long" <<'PY'
import sys
server, rate, short, long_ = sys.argv[1:5]
(i0, r0), (i1, r1) = (map(int, x.split()) for x in (short, long_))
print(f"| {server} | {rate} | {(i1 - i0) / max(1, r1 - r0):.0f} | {short}; {long_} |")
PY
done
