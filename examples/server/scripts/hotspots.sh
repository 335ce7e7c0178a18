#!/usr/bin/env bash
# Where segcache-server's user-space instructions go, per request:
# callgrind on every thread, counted over a window of steady load only
# (`callgrind_control -z` after the fill, `-d` after the measured load:
# start-up, the fill and shutdown are not in it; the load generator's
# CONNS new connections are, e.g. each one's first 16 KiB read buffer
# zeroed: `memset`, about 2.1M instructions in all). A count, not a time: it barely moves with the
# machine's other load, so binaries (a change and its base) compare on a
# shared machine. Kernel work (syscalls, TCP) is not in it: see
# syscalls.sh.
#
# Env: SEGCACHE_BINS (segcache-server binaries, default this tree's),
# WORKERS (1), RATE (3000: a server under valgrind keeps up), SECS (4),
# CONNS (128), TOP (12: functions listed, by their own instructions).
# Prints markdown to stdout.
set -euo pipefail
. "$(dirname "$0")/common.sh"

RATE="${RATE:-3000}"
SECS="${SECS:-4}"
CONNS="${CONNS:-128}"
WORKERS="${WORKERS:-1}"
TOP="${TOP:-12}"
LOADGEN="$CARGO_TARGET_DIR/release/loadgen"

need_pkg valgrind valgrind callgrind_control
build_server
BINS="${SEGCACHE_BINS:-$SERVER_BIN}"
track_processes

echo "## User-space instructions per request in a window of steady load (callgrind, all threads, $WORKERS worker(s))"
echo
echo "Command: \`SEGCACHE_BINS=\"$BINS\" WORKERS=$WORKERS RATE=$RATE SECS=$SECS CONNS=$CONNS bash examples/server/scripts/hotspots.sh\`"
for bin in $BINS; do
    out="$WORK/$(basename "$bin")-$RANDOM"
    mkdir -p "$out"
    port="$(free_port)"
    valgrind --tool=callgrind -q --callgrind-out-file="$out/cg.%p" "$bin" --port "$port" \
        --admin-port 0 --workers "$WORKERS" --heap-size 256MiB >/dev/null 2>&1 &
    pid=$!
    PIDS+=("$pid")
    tries=0
    until wait_port "$port"; do
        tries=$((tries + 1))
        [ "$tries" -lt 4 ] || { echo "$bin did not start under valgrind" >&2; exit 1; }
    done
    fill_first "$LOADGEN" --port "$port" --rate 2000 --duration 1 --warmup 0 --connections "$CONNS"
    callgrind_control -z "$pid" >/dev/null 2>&1
    line="$("$LOADGEN" --port "$port" --rate "$RATE" --duration "$SECS" --warmup 0 \
        --connections "$CONNS" --no-fill)"
    callgrind_control -d "$pid" >/dev/null 2>&1
    stop_pid "$pid"
    reqs="$(field requests "$line")"
    echo
    echo "### $bin"
    echo
    callgrind_annotate --threshold=100 "$out"/cg.*.1 2>/dev/null |
        python3 -c '
import re, sys
reqs, top = int(sys.argv[1]), int(sys.argv[2])
rows = []
for l in sys.stdin:
    m = re.match(r"\s*([\d,]+) \(\s*[\d.]+%\)\s+(\S.*)$", l)
    if m:
        rows.append((int(m.group(1).replace(",", "")), m.group(2)))
total = next(n for n, name in rows if name.startswith("PROGRAM TOTALS"))
print(f"{reqs} requests, **{total / reqs:.0f} instructions per request** (all threads)")
print()
print("| function | own instructions/req |")
print("| --- | ---: |")
# Own (exclusive) counts: the thread entry points that only call on are
# the first rows with nearly all of the total; skip those.
own = [(n, name) for n, name in rows[1:] if n < total * 0.5]
for n, name in own[:top]:
    name = re.sub(r" \[.*\]$", "", name).split(":", 1)[-1] if name.startswith("???") else re.sub(r" \[.*\]$", "", name).rsplit(":", 1)[-1]
    print(f"| `{name}` | {n / reqs:.0f} |")
' "$reqs" "$TOP"
done
