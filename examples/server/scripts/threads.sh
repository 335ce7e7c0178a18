#!/usr/bin/env bash
# Where segcache-server's hand-offs cost: syscalls, wake-ups and context
# switches per request for each kind of thread (the workers together, the
# storage thread), and the server's CPU per request, at fixed rates.
# Counts from `perf stat --per-thread` while the load generator runs.
#
# With several workers and the storage thread, a worker hands each
# event-loop round to the storage thread: it wakes it (a futex wake, when
# the storage thread had parked), sleeps until the answer (an
# `epoll_wait` on its eventfd, written by the storage thread), and the
# storage thread parks again when it runs dry (a futex wait). So the
# workers' futex calls count the hand-offs that woke the storage thread,
# and the storage thread's `write` calls the answers that had to wake a
# sleeping worker. How many requests a hand-off carries depends on how
# requests bunch up (the machine's load), so compare per hand-off too.
#
# With combining (the default), a worker that finds the storage thread
# parked runs its round itself; only a round that finds the cache's token
# held (by the other worker's turn, or the awake storage thread) is left
# to the holder. The server's own counters (`stats`: storage_waits_spun,
# storage_waits_slept) say how the worker got such a round's answer:
# found while it spun briefly, or after sleeping in its epoll until the
# holder wrote its eventfd (the workers' `write` column).
#
# Env: RATES (default "20000"), ROUNDS (3), SECS (2), CONNS (128), WORKERS
# (2), SERVER_ARGS (more flags), SEGCACHE_BINS (binaries to alternate,
# default this tree's), NICE (a niceness for the server and the load
# generator, e.g. -19 on a shared machine; needs root). Prints markdown.
set -euo pipefail
. "$(dirname "$0")/common.sh"

RATES="${RATES:-20000}"
ROUNDS="${ROUNDS:-3}"
SECS="${SECS:-2}"
CONNS="${CONNS:-128}"
WORKERS="${WORKERS:-2}"
NICE="${NICE:-0}"
LOADGEN="$CARGO_TARGET_DIR/release/loadgen"

command -v perf >/dev/null || { echo "perf not found" >&2; exit 1; }
build_server
BINS="${SEGCACHE_BINS:-$SERVER_BIN}"

track_processes

EVENTS="raw_syscalls:sys_enter,context-switches,sched:sched_wakeup"
for s in futex epoll_wait write recvfrom sendto; do
    EVENTS="$EVENTS,syscalls:sys_enter_$s"
done

# waits PORT: the server's counters of rounds left to another holder of
# the storage token, "found-spinning found-after-sleeping" (0 0 from a
# binary without them).
waits() {
    python3 - "$1" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
s.sendall(b"stats\r\n")
data = b""
while not data.endswith(b"END\r\n"):
    chunk = s.recv(65536)
    if not chunk:
        break
    data += chunk
stats = dict(l.split()[1:3] for l in data.decode().splitlines() if l.startswith("STAT "))
print(stats.get("storage_waits_spun", 0), stats.get("storage_waits_slept", 0))
PY
}

for round in $(seq 1 "$ROUNDS"); do
    for bin in $BINS; do
        SERVER_BIN="$bin"
        # shellcheck disable=SC2086 # SERVER_ARGS is a list of flags
        start_server T --workers "$WORKERS" --heap-size 256MiB ${SERVER_ARGS:-}
        PIDS+=("$T_PID")
        renice -n "$NICE" -p "$T_PID" >/dev/null
        for tid in /proc/"$T_PID"/task/*; do renice -n "$NICE" -p "${tid##*/}" >/dev/null; done
        fill_first "$LOADGEN" --port "$T_PORT" --rate 10000 --duration 1 --warmup 0 \
            --connections "$CONNS"
        for rate in $RATES; do
            nice -n "$NICE" "$LOADGEN" --port "$T_PORT" --rate "$rate" --duration "$((SECS + 2))" \
                --warmup 0.5 --connections "$CONNS" --no-fill >"$WORK/line" &
            lg=$!
            sleep 1
            w0="$(waits "$T_PORT")"
            t0="$(awk '{print $14 + $15}' "/proc/$T_PID/stat")"
            perf stat --per-thread -x, -o "$WORK/stat" -e "$EVENTS" -p "$T_PID" -- sleep "$SECS"
            t1="$(awk '{print $14 + $15}' "/proc/$T_PID/stat")"
            w1="$(waits "$T_PORT")"
            wait "$lg"
            python3 - "$WORK/stat" "$bin" "$rate" "$SECS" "$t0" "$t1" "$(getconf CLK_TCK)" \
                "$(field p999_us "$(cat "$WORK/line")")" $w0 $w1 >>"$WORK/results" <<'PY'
import collections, sys
path, binary, rate, secs, t0, t1, hz, p999 = sys.argv[1:9]
spun0, slept0, spun1, slept1 = (int(x) for x in sys.argv[9:13])
reqs = int(rate) * float(secs)
kinds = collections.defaultdict(lambda: collections.Counter())
for line in open(path):
    p = line.strip().split(",")
    if len(p) < 4 or not p[1].replace(".", "").isdigit():
        continue
    name = p[0].rsplit("-", 1)[0]
    kind = "workers" if name.startswith("worker") else "storage" if "storag" in name else "other"
    kinds[kind][p[3].split(":")[-1].replace("sys_enter_", "")] += float(p[1])
w, s = kinds["workers"], kinds["storage"]
handoffs = w["futex"]
cpu = (int(t1) - int(t0)) / int(hz) * 1e6 / reqs
print(binary, rate, cpu, p999, handoffs / reqs,
      (spun1 - spun0) / reqs, (slept1 - slept0) / reqs,
      *(w[k] / reqs for k in ("sys_enter", "epoll_wait", "write", "context-switches", "sched_wakeup")),
      *(s[k] / reqs for k in ("sys_enter", "futex", "write", "context-switches")))
PY
        done
        stop_pid "$T_PID"
    done
done

echo "## Per thread kind, per request (perf stat --per-thread; $ROUNDS interleaved rounds, every round shown)"
echo
echo "Command: \`RATES=\"$RATES\" ROUNDS=$ROUNDS SECS=$SECS CONNS=$CONNS WORKERS=$WORKERS NICE=$NICE bash examples/server/scripts/threads.sh\`"
echo
echo "| binary | rate | CPU µs/req | p999 µs | hand-offs (workers' futex)/req | rounds left to a holder, answer found spinning/req | ... found after sleeping/req | workers: syscalls | epoll_wait | eventfd writes | ctx sw | threads woken | storage: syscalls | futex | eventfd writes | ctx sw |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
awk '{printf "| %s | %s | %.2f | %s |", $1, $2, $3, $4; for (i = 5; i <= NF; i++) printf " %.3f |", $i; printf "\n"}' "$WORK/results"
