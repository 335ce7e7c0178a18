#!/usr/bin/env bash
# Open-loop benchmark: segcache-server vs memcached 1.6 (Debian package
# memcached) and, when PELIKAN_SEGCACHE names a built `pelikan-segcache`
# binary, Pelikan's own segcache server, on loopback, same worker thread
# count, with and without pinning. For each server: a short step search
# for the highest target rate held with p999 < 2 ms, then p50/p99/p999 at
# one common rate. Prints markdown to stdout (paste what you keep into
# examples/server/BENCH.md; the script never writes it).
#
# Env: WORKERS (default 1), CONNS (default 64), STEP_SECS (default 2),
# RATES (default "10000 20000 40000 60000 80000 100000 130000 160000"),
# PELIKAN_SEGCACHE (unset: Pelikan skipped).
set -euo pipefail
. "$(dirname "$0")/common.sh"

WORKERS="${WORKERS:-1}"
CONNS="${CONNS:-64}"
STEP_SECS="${STEP_SECS:-2}"
RATES="${RATES:-10000 20000 40000 60000 80000 100000 130000 160000}"
SLO_US=2000
LOADGEN="$CARGO_TARGET_DIR/release/loadgen"

need_pkg memcached memcached
build_server

track_processes

say() { echo "$*"; }

start_target() { # NAME -> sets T_PORT, T_PID
    case "$1" in
    segcache)
        start_server T --workers "$WORKERS" --heap-size 256MiB
        T_PID="$T_PID" ;;
    segcache-pinned)
        # Worker i on core i, the storage thread (several workers) on the next.
        local last=$((WORKERS))
        start_server T --workers "$WORKERS" --heap-size 256MiB --pin "0-$last" ;;
    memcached) start_memcached T "$WORKERS" ;;
    memcached-pinned) start_memcached T "$WORKERS" "0-$WORKERS" ;;
    pelikan) start_pelikan T "$WORKERS" ;;
    pelikan-pinned) start_pelikan T "$WORKERS" "0-$WORKERS" ;;
    esac
    PIDS+=("$T_PID")
}

run_load() { # PORT RATE [extra]
    loaded "$LOADGEN" --port "$1" --rate "$2" --duration "$STEP_SECS" --warmup 0.5 \
        --connections "$CONNS" "${@:3}"
}

CONFIGS="segcache segcache-pinned memcached memcached-pinned"
if [ -n "${PELIKAN_SEGCACHE:-}" ]; then CONFIGS="$CONFIGS pelikan pelikan-pinned"; fi
declare -A BEST
say "## segcache-server vs memcached${PELIKAN_SEGCACHE:+ and Pelikan}: open-loop step search"
say ""
say "Command: \`WORKERS=$WORKERS CONNS=$CONNS STEP_SECS=$STEP_SECS bash examples/server/scripts/bench.sh\`"
say ""
say "Machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), $(uname -r); memcached $(memcached -V | awk '{print $2}'); loadgen, servers and the kernel share these cores."
if [ "$WORKERS" = 1 ]; then SHAPE="1 worker owning the cache (no storage thread)"; else SHAPE="$WORKERS workers + 1 storage thread"; fi
say "Workload: keys 4-32 B, values 64/256 B, 80:20 get:set, uniform over 50,000 prefilled keys, $CONNS connections, open loop, latency from scheduled send to full reply. segcache-server: $SHAPE; memcached: -t $WORKERS${PELIKAN_SEGCACHE:+; Pelikan: $WORKERS worker thread(s)}. Pinned: segcache \`--pin 0-$WORKERS\`, the others under \`taskset -c 0-$WORKERS\`."
say ""
say "| server | target rate | achieved | p50 us | p99 us | p999 us | max us |"
say "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"
for cfg in $CONFIGS; do
    start_target "$cfg"
    fill=""
    BEST[$cfg]=0
    for rate in $RATES; do
        line="$(run_load "$T_PORT" "$rate" $fill)"
        fill="--no-fill"
        ach="$(field achieved "$line")"
        p999="$(field p999_us "$line")"
        to="$(field timeouts "$line")"
        err="$(field errors "$line")"
        say "| $cfg | $rate | $ach | $(field p50_us "$line") | $(field p99_us "$line") | $p999 | $(field max_us "$line") |"
        ok=$(python3 -c "print(int($p999 < $SLO_US and float($ach) >= 0.97 * $rate and $to == 0 and $err == 0))")
        if [ "$ok" = 1 ]; then
            BEST[$cfg]=$rate
        fi
        # Stop once the server falls behind (not on one noisy p999).
        if python3 -c "import sys; sys.exit(0 if $(field p50_us "$line") > $SLO_US or float($ach) < 0.9 * $rate or $to > 0 else 1)"; then
            break
        fi
    done
    stop_pid "$T_PID"
done
say ""
say "### Highest step held with p999 < 2 ms"
say ""
say "| server | rate (ops/s) |"
say "| --- | ---: |"
COMMON=""
for cfg in $CONFIGS; do
    say "| $cfg | ${BEST[$cfg]} |"
    b=${BEST[$cfg]}
    if [ "$b" != 0 ] && { [ -z "$COMMON" ] || [ "$b" -lt "$COMMON" ]; }; then COMMON=$b; fi
done
COMMON="${COMMON:-$(echo "$RATES" | awk '{print $1}')}"
say ""
say "### All servers at a common rate: $COMMON ops/s (${STEP_SECS}s x 3 runs, median p999 run shown)"
say ""
say "| server | p50 us | p99 us | p999 us |"
say "| --- | ---: | ---: | ---: |"
for cfg in $CONFIGS; do
    start_target "$cfg"
    runs=()
    fill=""
    for i in 1 2 3; do
        runs+=("$(run_load "$T_PORT" "$COMMON" $fill)")
        fill="--no-fill"
    done
    stop_pid "$T_PID"
    med="$(for r in "${runs[@]}"; do echo "$(field p999_us "$r") $r"; done | sort -n | sed -n 2p | cut -d' ' -f2-)"
    say "| $cfg | $(field p50_us "$med") | $(field p99_us "$med") | $(field p999_us "$med") |"
done
