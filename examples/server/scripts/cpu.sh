#!/usr/bin/env bash
# Server CPU time per request at fixed request rates: segcache-server vs
# memcached 1.6 (Debian package) and, when PELIKAN_SEGCACHE names a built
# `pelikan-segcache` binary, Pelikan's own segcache server. The figure that
# survives a noisy machine best: the server's user+system CPU (from
# /proc/PID/stat) over a measured window, divided by the requests the load
# generator completed in it. Rounds are interleaved (every server at every
# rate, then again) and the median and range over rounds are reported,
# with the context switches per request (all the server's threads) and
# p50 and p999 at each rate.
#
# On loopback the kernel work of a TCP segment (transmit, and delivery
# into the receiving socket) is charged to the process that transmits it,
# and a server that leaves Nagle on (Pelikan's does) has many of its
# replies transmitted by the client's next request's ACK, in the load
# generator's context. So the table also shows server + load generator
# CPU per request (the generator's own user+system time, which it
# reports): the figure that charges every segment to someone.
#
# Env: RATES (default "20000 50000 80000"), ROUNDS (3), SECS (4), CONNS
# (128), WORKERS (1), PELIKAN_SEGCACHE (unset: skipped), PELIKAN_NODELAY (1: also
# Pelikan with TCP_NODELAY, see common.sh), PIN (0/1: pin
# servers with --pin / taskset to cores 0-WORKERS), SERVER_ARGS (more flags
# for segcache-server, e.g. --shared-cache), SEGCACHE_BINS (several
# segcache-server binaries to measure in the same rounds, as segcache1,
# segcache2...: a change against its base beside memcached), UNIX (1: also
# segcache-server and memcached over a Unix domain socket, as
# segcache-unix and memcached-unix: `--unix-socket`, memcached's `-s`; the
# load generator connects with `--unix`), TLS (1: also segcache-server
# with TLS on its TCP port, as segcache-tls: `--tls-cert`/`--tls-key`
# with a certificate made by openssl for the run; the load generator
# speaks TLS with `--tls-ca`; memcached is not built with TLS in Debian),
# BINARY (1: also segcache-server and memcached spoken to in the binary
# protocol, as segcache-bin and memcached-bin: the load generator's
# `--binary`, the same requests as GET and SET packets).
# Prints markdown to stdout.
set -euo pipefail
. "$(dirname "$0")/common.sh"

RATES="${RATES:-20000 50000 80000}"
ROUNDS="${ROUNDS:-3}"
SECS="${SECS:-4}"
CONNS="${CONNS:-128}"
WORKERS="${WORKERS:-1}"
PIN="${PIN:-0}"
LOADGEN="$CARGO_TARGET_DIR/release/loadgen"
TICKS="$(getconf CLK_TCK)"

need_pkg memcached memcached
build_server

track_processes

cpu_ticks() { # PID -> utime+stime of the whole process
    awk '{print $14 + $15}' "/proc/$1/stat"
}

ctx_switches() { # PID -> voluntary + involuntary context switches of its threads
    cat /proc/"$1"/task/*/status 2>/dev/null | awk '/ctxt_switches/ {n += $2} END {print n + 0}'
}

start_target() { # NAME -> T_PORT, T_PID; TARGET: the load generator's flags
    local cores=""
    if [ "$PIN" = 1 ]; then cores="0-$WORKERS"; fi
    local sock="$WORK/$1.sock"
    case "$1" in
    *-bin)
        start_target "${1%-bin}"
        TARGET+=(--binary)
        return ;;
    segcache-tls)
        local pin=()
        if [ -n "$cores" ]; then pin=(--pin "$cores"); fi
        # shellcheck disable=SC2086 # SERVER_ARGS is a list of flags
        start_server T --workers "$WORKERS" --heap-size 256MiB ${SERVER_ARGS:-} "${pin[@]}" \
            --tls-cert "$WORK/tls-cert.pem" --tls-key "$WORK/tls-key.pem"
        TARGET=(--port "$T_PORT" --tls-ca "$WORK/tls-cert.pem")
        PIDS+=("$T_PID")
        return ;;
    segcache-unix)
        local pin=()
        if [ -n "$cores" ]; then pin=(--pin "$cores"); fi
        # shellcheck disable=SC2086 # SERVER_ARGS is a list of flags
        start_server T --workers "$WORKERS" --heap-size 256MiB ${SERVER_ARGS:-} "${pin[@]}" \
            --unix-socket "$sock"
        TARGET=(--unix "$sock")
        PIDS+=("$T_PID")
        return ;;
    memcached-unix)
        local taskset=()
        if [ -n "$cores" ]; then taskset=(taskset -c "$cores"); fi
        rm -f "$sock"
        "${taskset[@]}" memcached -s "$sock" -a 700 -U 0 -t "$WORKERS" -m 256 -c 4096 -u root &
        T_PID=$!
        for _ in $(seq 1 100); do [ -S "$sock" ] && break; sleep 0.05; done
        TARGET=(--unix "$sock")
        PIDS+=("$T_PID")
        return ;;
    esac
    case "$1" in
    segcache*)
        if [ "$1" != segcache ]; then SERVER_BIN="${BINS[${1#segcache} - 1]}"; fi
        local pin=()
        if [ -n "$cores" ]; then pin=(--pin "$cores"); fi
        # shellcheck disable=SC2086 # SERVER_ARGS is a list of flags
        start_server T --workers "$WORKERS" --heap-size 256MiB ${SERVER_ARGS:-} "${pin[@]}" ;;
    memcached) start_memcached T "$WORKERS" "$cores" ;;
    pelikan) start_pelikan T "$WORKERS" "$cores" ;;
    pelikan-nodelay) start_pelikan T "$WORKERS" "$cores" "$NODELAY_SO" ;;
    esac
    PIDS+=("$T_PID")
    TARGET=(--port "$T_PORT")
}

SERVERS="segcache memcached"
read -r -a BINS <<<"${SEGCACHE_BINS:-}"
if [ "${#BINS[@]}" -gt 0 ]; then
    SERVERS=""
    for i in "${!BINS[@]}"; do
        SERVERS="$SERVERS segcache$((i + 1))"
        echo "segcache$((i + 1)): ${BINS[$i]}" >&2
    done
    SERVERS="${SERVERS# } memcached"
fi
add_pelikan_servers
if [ "${UNIX:-0}" = 1 ]; then SERVERS="$SERVERS segcache-unix memcached-unix"; fi
if [ "${BINARY:-0}" = 1 ]; then SERVERS="$SERVERS segcache-bin memcached-bin"; fi
if [ "${TLS:-0}" = 1 ]; then
    need_pkg openssl openssl
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
        -keyout "$WORK/tls-key.pem" -out "$WORK/tls-cert.pem" -subj "/CN=127.0.0.1" \
        -addext "subjectAltName=IP:127.0.0.1" -addext "basicConstraints=critical,CA:FALSE" 2>/dev/null
    SERVERS="$SERVERS segcache-tls"
fi

RESULTS="$(mktemp)"
for round in $(seq 1 "$ROUNDS"); do
    for server in $SERVERS; do
        start_target "$server"
        # Fill once, then one unmeasured warm-up step.
        fill_first "$LOADGEN" "${TARGET[@]}" --rate 10000 --duration 1 --warmup 0 \
            --connections "$CONNS"
        for rate in $RATES; do
            before="$(cpu_ticks "$T_PID")"
            cs_before="$(ctx_switches "$T_PID")"
            line="$("$LOADGEN" "${TARGET[@]}" --rate "$rate" --duration "$SECS" \
                --warmup 0 --connections "$CONNS" --no-fill)"
            after="$(cpu_ticks "$T_PID")"
            cs_after="$(ctx_switches "$T_PID")"
            done_reqs="$(field requests "$line")"
            [ -n "$done_reqs" ] || done_reqs="$(python3 -c "print(int(float('$(field achieved "$line")') * $SECS))")"
            us="$(python3 -c "print(f'{($after - $before) / $TICKS * 1e6 / max(1, $done_reqs):.2f}')")"
            cs="$(python3 -c "print(f'{($cs_after - $cs_before) / max(1, $done_reqs):.3f}')")"
            both="$(python3 -c "print(f'{$us + $(field cpu_us "$line") / max(1, $done_reqs):.2f}')")"
            echo "$server $rate $round $us $(field p999_us "$line") $(field achieved "$line") $cs $both $(field p50_us "$line")" >>"$RESULTS"
        done
        stop_pid "$T_PID"
    done
done

echo "## Server CPU per request (µs, user+system from /proc, median of $ROUNDS interleaved rounds [min-max])"
echo
echo "Command: \`RATES=\"$RATES\" ROUNDS=$ROUNDS SECS=$SECS CONNS=$CONNS WORKERS=$WORKERS PIN=$PIN UNIX=${UNIX:-0} TLS=${TLS:-0} BINARY=${BINARY:-0} bash examples/server/scripts/cpu.sh\`"
echo
python3 - "$RESULTS" "$SERVERS" "$RATES" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
servers, rates = sys.argv[2].split(), sys.argv[3].split()
print("| rate (req/s) | " + " | ".join(f"{s} CPU µs/req" for s in servers) + " | " +
      " | ".join(f"{s} + loadgen µs/req" for s in servers) + " | " +
      " | ".join(f"{s} ctx sw/req" for s in servers) + " | " +
      " | ".join(f"{s} p50 µs" for s in servers) + " | " +
      " | ".join(f"{s} p999 µs" for s in servers) + " |")
print("| ---: | " + " | ".join("---:" for _ in servers * 5) + " |")
for r in rates:
    cpu, both, cs, p50, p999 = [], [], [], [], []
    for s in servers:
        mine = [x for x in rows if x[0] == s and x[1] == r]
        us = sorted(float(x[3]) for x in mine)
        lat = sorted(float(x[4]) for x in mine)
        sw = sorted(float(x[6]) for x in mine)
        tot = sorted(float(x[7]) for x in mine)
        mid = sorted(float(x[8]) for x in mine)
        cpu.append(f"{statistics.median(us):.2f} [{us[0]:.2f}-{us[-1]:.2f}]")
        both.append(f"{statistics.median(tot):.2f} [{tot[0]:.2f}-{tot[-1]:.2f}]")
        cs.append(f"{statistics.median(sw):.2f}")
        p50.append(f"{statistics.median(mid):.0f}")
        p999.append(f"{statistics.median(lat):.0f}")
    print(f"| {r} | " + " | ".join(cpu) + " | " + " | ".join(both) + " | " + " | ".join(cs) + " | " + " | ".join(p50) + " | " + " | ".join(p999) + " |")
PY
