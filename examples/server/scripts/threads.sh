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

for round in $(seq 1 "$ROUNDS"); do
    for bin in $BINS; do
        SERVER_BIN="$bin"
        # shellcheck disable=SC2086 # SERVER_ARGS is a list of flags
        start_server T --workers "$WORKERS" --heap-size 256MiB ${SERVER_ARGS:-}
        PIDS+=("$T_PID")
        renice -n "$NICE" -p "$T_PID" >/dev/null
        for tid in /proc/"$T_PID"/task/*; do renice -n "$NICE" -p "${tid##*/}" >/dev/null; done
        "$LOADGEN" --port "$T_PORT" --rate 10000 --duration 1 --warmup 0 \
            --connections "$CONNS" >/dev/null
        for rate in $RATES; do
            nice -n "$NICE" "$LOADGEN" --port "$T_PORT" --rate "$rate" --duration "$((SECS + 2))" \
                --warmup 0.5 --connections "$CONNS" --no-fill >"$WORK/line" &
            lg=$!
            sleep 1
            t0="$(awk '{print $14 + $15}' "/proc/$T_PID/stat")"
            perf stat --per-thread -x, -o "$WORK/stat" -e "$EVENTS" -p "$T_PID" -- sleep "$SECS"
            t1="$(awk '{print $14 + $15}' "/proc/$T_PID/stat")"
            wait "$lg"
            python3 - "$WORK/stat" "$bin" "$rate" "$SECS" "$t0" "$t1" "$(getconf CLK_TCK)" \
                "$(field p999_us "$(cat "$WORK/line")")" >>"$WORK/results" <<'PY'
import collections, sys
path, binary, rate, secs, t0, t1, hz, p999 = sys.argv[1:9]
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
      *(w[k] / reqs for k in ("sys_enter", "epoll_wait", "context-switches", "sched_wakeup")),
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
echo "| binary | rate | CPU µs/req | p999 µs | hand-offs (workers' futex)/req | workers: syscalls | epoll_wait | ctx sw | threads woken | storage: syscalls | futex | eventfd writes | ctx sw |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
awk '{printf "| %s | %s | %.2f | %s |", $1, $2, $3, $4; for (i = 5; i <= NF; i++) printf " %.3f |", $i; printf "\n"}' "$WORK/results"
