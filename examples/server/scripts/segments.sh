#!/usr/bin/env bash
# TCP segments per request on loopback, and who transmits them:
# segcache-server vs memcached 1.6 (Debian package) and, when
# PELIKAN_SEGCACHE names a built `pelikan-segcache` binary, Pelikan's own
# segcache server. Counts, not times.
#
# While the load generator runs at a fixed rate, the kernel's per-socket
# counters (`ss -ti`: segs_out, data_segs_out, bytes_received) of both
# ends of every connection are read before and after a window of SECS
# seconds, and `perf record -a` logs every transmitted segment
# (`net:net_dev_xmit`) with the thread that transmitted it. Per request
# (the bytes the server received over the load generator's mean request
# size): request and reply data segments, pure ACKs each way, and the
# share of all segments transmitted by the server's threads, by the load
# generator, and by anything else (ksoftirqd, other processes).
#
# Why "who": on loopback, transmitting a segment also delivers it into
# the receiving socket (TCP receive processing, waking the reader) in the
# transmitting thread's context, and that work is charged to its CPU
# time. A reply held back by Nagle's algorithm (TCP_NODELAY off) goes out
# when the client's next segment ACKs the previous reply, in the
# client's context, and the server's CPU time no longer contains it.
#
# Env: RATES (default "20000 50000 80000"), ROUNDS (1), SECS (2), CONNS
# (128), WORKERS (1), PELIKAN_SEGCACHE (unset: skipped), PELIKAN_NODELAY (1: also
# Pelikan with TCP_NODELAY, see common.sh), SEGCACHE_BIN (a
# segcache-server binary to measure instead of this tree's), SERVER_ARGS
# (more flags for segcache-server). Needs `ss` and `perf` with tracepoint
# access (root). Prints markdown to stdout.
set -euo pipefail
. "$(dirname "$0")/common.sh"

RATES="${RATES:-20000 50000 80000}"
ROUNDS="${ROUNDS:-1}"
SECS="${SECS:-2}"
CONNS="${CONNS:-128}"
WORKERS="${WORKERS:-1}"
LOADGEN="$CARGO_TARGET_DIR/release/loadgen"

need_pkg memcached memcached
command -v perf >/dev/null || { echo "perf not found" >&2; exit 1; }
command -v ss >/dev/null || { echo "ss not found" >&2; exit 1; }
build_server
SERVER_BIN="${SEGCACHE_BIN:-$SERVER_BIN}"

track_processes

start_target() { # NAME -> T_PORT, T_PID
    case "$1" in
    segcache)
        # shellcheck disable=SC2086 # SERVER_ARGS is a list of flags
        start_server T --workers "$WORKERS" --heap-size 256MiB ${SERVER_ARGS:-} ;;
    memcached) start_memcached T "$WORKERS" ;;
    pelikan) start_pelikan T "$WORKERS" ;;
    pelikan-nodelay) start_pelikan T "$WORKERS" "" "$NODELAY_SO" ;;
    esac
    PIDS+=("$T_PID")
}

# snap FILTER FILE: the TCP info of established sockets matching FILTER.
snap() { ss -tinH state established "$1" >"$2"; }

SERVERS="segcache memcached"
add_pelikan_servers

RESULTS="$WORK/results"
for round in $(seq 1 "$ROUNDS"); do
    for server in $SERVERS; do
        start_target "$server"
        fill_first "$LOADGEN" --port "$T_PORT" --rate 10000 --duration 1 --warmup 0 \
            --connections "$CONNS"
        for rate in $RATES; do
            "$LOADGEN" --port "$T_PORT" --rate "$rate" --duration "$((SECS + 3))" \
                --warmup 0.5 --connections "$CONNS" --no-fill >"$WORK/line" &
            lg=$!
            sleep 1
            snap "( sport = :$T_PORT )" "$WORK/s0"
            snap "( dport = :$T_PORT )" "$WORK/c0"
            # The window ends inside the recording (writing it out after
            # takes a while at high rates).
            perf record -q --no-buildid -e net:net_dev_xmit -a -o "$WORK/perf.data" -- \
                bash -c "sleep $SECS; ss -tinH state established '( sport = :$T_PORT )' >'$WORK/s1'
                    ss -tinH state established '( dport = :$T_PORT )' >'$WORK/c1'" >/dev/null 2>&1
            ls "/proc/$T_PID/task" >"$WORK/tids"
            wait "$lg"
            perf script -i "$WORK/perf.data" -F tid 2>/dev/null >"$WORK/xmit"
            python3 - "$WORK" "$server" "$rate" "$lg" "$(field request_bytes "$(cat "$WORK/line")")" \
                >>"$RESULTS" <<'PY'
import re, sys
work, server, rate, lg, req_bytes = sys.argv[1:6]
def total(name):
    tot = {}
    for line in open(f"{work}/{name}"):
        for k, v in re.findall(r"\b(segs_out|data_segs_out|bytes_received):(\d+)", line):
            tot[k] = tot.get(k, 0) + int(v)
    return tot
def delta(side):
    a, b = total(f"{side}0"), total(f"{side}1")
    return {k: b.get(k, 0) - a.get(k, 0) for k in ("segs_out", "data_segs_out", "bytes_received")}
s, c = delta("s"), delta("c")
reqs = max(1.0, s["bytes_received"] / float(req_bytes))
tids = {l.strip() for l in open(f"{work}/tids")}
mine = theirs = other = 0
for line in open(f"{work}/xmit"):
    tid = line.strip()
    if tid in tids:
        mine += 1
    elif tid == lg:
        theirs += 1
    else:
        other += 1
n = max(1, mine + theirs + other)
print(server, rate, f"{reqs:.0f}",
      c["data_segs_out"] / reqs, s["data_segs_out"] / reqs,
      (s["segs_out"] - s["data_segs_out"]) / reqs, (c["segs_out"] - c["data_segs_out"]) / reqs,
      (s["segs_out"] + c["segs_out"]) / reqs, mine / n, theirs / n, other / n)
PY
        done
        stop_pid "$T_PID"
    done
done

echo "## TCP segments per request and who transmits them (median of $ROUNDS interleaved rounds)"
echo
echo "Command: \`RATES=\"$RATES\" ROUNDS=$ROUNDS SECS=$SECS CONNS=$CONNS WORKERS=$WORKERS bash examples/server/scripts/segments.sh\`"
echo
python3 - "$RESULTS" "$SERVERS" "$RATES" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
servers, rates = sys.argv[2].split(), sys.argv[3].split()
print("| server | rate (req/s) | requests in window | request segs/req | reply segs/req "
      "| server pure ACKs/req | client pure ACKs/req | all segs/req "
      "| sent by server | sent by loadgen | sent by others |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for r in rates:
    for s in servers:
        mine = [x for x in rows if x[0] == s and x[1] == r]
        if not mine:
            continue
        col = lambda i: statistics.median(float(x[i]) for x in mine)
        print(f"| {s} | {r} | {col(2):.0f} | "
              + " | ".join(f"{col(i):.3f}" for i in range(3, 8)) + " | "
              + " | ".join(f"{100 * col(i):.0f} %" for i in range(8, 11)) + " |")
PY
