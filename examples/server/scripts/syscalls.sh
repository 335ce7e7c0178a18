#!/usr/bin/env bash
# System calls and context switches per request at fixed request rates:
# segcache-server vs memcached 1.6 (Debian package) and, when
# PELIKAN_SEGCACHE names a built `pelikan-segcache` binary, Pelikan's own
# segcache server. Counts, not times: `perf stat` counts the server's
# syscall tracepoints and context switches (all its threads) while the load
# generator runs, divided by the requests it completed. Unlike CPU time,
# these barely move with the machine's other load, so they compare servers
# on a shared machine.
#
# Counts still follow how requests happen to bunch up (a server that falls
# behind reads several requests per call), so rounds are interleaved and
# the median per figure is shown, with the range of syscalls per request.
#
# Env: RATES (default "20000 50000 80000"), ROUNDS (3), SECS (3), CONNS
# (128), WORKERS (1), PELIKAN_SEGCACHE (unset: skipped), PELIKAN_NODELAY (1: also
# Pelikan with TCP_NODELAY, see common.sh), SEGCACHE_BIN (a
# segcache-server binary to measure instead of this tree's), SERVER_ARGS
# (more flags for segcache-server, e.g. --shared-cache). Needs `perf`
# with tracepoint access (root). Prints markdown to stdout.
set -euo pipefail
. "$(dirname "$0")/common.sh"

RATES="${RATES:-20000 50000 80000}"
ROUNDS="${ROUNDS:-3}"
SECS="${SECS:-3}"
CONNS="${CONNS:-128}"
WORKERS="${WORKERS:-1}"
LOADGEN="$CARGO_TARGET_DIR/release/loadgen"

need_pkg memcached memcached
command -v perf >/dev/null || { echo "perf not found" >&2; exit 1; }
build_server
SERVER_BIN="${SEGCACHE_BIN:-$SERVER_BIN}"

track_processes

# Receive, send and wait calls under every name the three servers use;
# `write` apart: none of the three sends replies with it, all three use it
# for their eventfd or pipe wake-ups. `sched:sched_wakeup` counts the
# threads the server's threads wake (its own, or the load generator by a
# reply).
EVENTS="raw_syscalls:sys_enter,context-switches,sched:sched_wakeup"
for s in read recvfrom recvmsg readv write sendto sendmsg writev \
    epoll_wait epoll_pwait epoll_ctl futex; do
    EVENTS="$EVENTS,syscalls:sys_enter_$s"
done

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

SERVERS="segcache memcached"
add_pelikan_servers

RESULTS="$(mktemp)"
for round in $(seq 1 "$ROUNDS"); do
    for server in $SERVERS; do
        start_target "$server"
        fill_first "$LOADGEN" --port "$T_PORT" --rate 10000 --duration 1 --warmup 0 \
            --connections "$CONNS"
        for rate in $RATES; do
            stat="$(mktemp)"
            line="$(perf stat -x, -o "$stat" -e "$EVENTS" -p "$T_PID" -- \
                "$LOADGEN" --port "$T_PORT" --rate "$rate" --duration "$SECS" \
                --warmup 0 --connections "$CONNS" --no-fill)"
            reqs="$(python3 -c "print(round(float('$(field achieved "$line")') * $SECS))")"
            python3 - "$stat" "$server" "$rate" "$reqs" >>"$RESULTS" <<'PY'
import sys
path, server, rate, reqs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
counts = {}
for line in open(path):
    parts = line.strip().split(",")
    if len(parts) < 3 or not parts[0].replace(".", "").isdigit():
        continue
    name = parts[2].split(":")[-1].replace("sys_enter_", "")
    counts[name] = counts.get(name, 0) + float(parts[0])
g = lambda *names: sum(counts.get(n, 0) for n in names) / max(1, reqs)
print(server, rate, reqs,
      g("sys_enter"),
      g("read", "recvfrom", "recvmsg", "readv"),
      g("sendto", "sendmsg", "writev"),
      g("write"),
      g("epoll_wait", "epoll_pwait"),
      g("epoll_ctl"),
      g("futex"),
      g("context-switches"),
      g("sched_wakeup"))
PY
            rm -f "$stat"
        done
        stop_pid "$T_PID"
    done
done

echo "## Syscalls and context switches per request (perf stat counts over all the server's threads, median of $ROUNDS interleaved rounds)"
echo
echo "Command: \`RATES=\"$RATES\" ROUNDS=$ROUNDS SECS=$SECS CONNS=$CONNS WORKERS=$WORKERS bash examples/server/scripts/syscalls.sh\`"
echo
python3 - "$RESULTS" "$SERVERS" "$RATES" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
servers, rates = sys.argv[2].split(), sys.argv[3].split()
print("| server | rate (req/s) | requests | syscalls/req [min-max] | recv/req | send/req "
      "| write (wake-ups)/req | epoll_wait/req | epoll_ctl/req | futex/req | ctx sw/req "
      "| threads woken/req |")
print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
for r in rates:
    for s in servers:
        mine = [x for x in rows if x[0] == s and x[1] == r]
        if not mine:
            continue
        col = lambda i: statistics.median(float(x[i]) for x in mine)
        total = sorted(float(x[3]) for x in mine)
        print(f"| {s} | {r} | {col(2):.0f} | {col(3):.2f} [{total[0]:.2f}-{total[-1]:.2f}] | "
              + " | ".join(f"{col(i):.3f}" for i in range(4, 12)) + " |")
PY
