#!/usr/bin/env bash
# Hit ratio of running servers at equal memory: segcache-server, memcached
# 1.6 (Debian package) and, when PELIKAN_SEGCACHE names a built
# `pelikan-segcache` binary, Pelikan's segcache server, each started with
# the same item memory (`--heap-size`, `-m`, `heap_size`) and its other
# settings as shipped, then sent the same Twitter-like request stream as a
# look-aside client would (`segcache-bench server-replay`: a miss is
# followed by a fill; one connection, pipelined). A fresh server per
# cluster and server.
#
# The heap of each cluster is its stream's footprint (distinct keys' key +
# value bytes) over FRACTION, rounded up to whole MiB, as the simulator's
# `twitter` tables use a quarter; HEAP_MIB gives one heap for every
# cluster instead. Time is the servers' wall clock: the streams' TTLs
# (hours to days in these clusters) do not expire within a replay.
#
# Env: CLUSTERS (default "52 22 19 7"), REQUESTS (per cluster, default
# 8000000), FRACTION (4), HEAP_MIB (unset), VARIANTS (segcache-server flag
# sets separated by ';', each measured as its own column; default
# ";--max-value 1MiB": the defaults, then 1 MiB segments),
# PELIKAN_SEGCACHE (unset: skipped). Prints markdown to stdout.
set -euo pipefail
. "$(dirname "$0")/common.sh"

CLUSTERS="${CLUSTERS:-52 22 19 7}"
REQUESTS="${REQUESTS:-8000000}"
FRACTION="${FRACTION:-4}"
VARIANTS="${VARIANTS-;--max-value 1MiB}"
REPLAY="$CARGO_TARGET_DIR/release/segcache-bench"

need_pkg memcached memcached
build_server
(cd "$REPO_DIR" && cargo build --release -q -p segcache-bench)
track_processes

IFS=';' read -r -a FLAGS <<<"$VARIANTS"
[ "${#FLAGS[@]}" -gt 0 ] || FLAGS=("")
SERVERS=""
for i in "${!FLAGS[@]}"; do SERVERS="$SERVERS segcache$i"; done
SERVERS="${SERVERS# } memcached"
if [ -n "${PELIKAN_SEGCACHE:-}" ]; then
    # With TCP_NODELAY (scripts/nodelay.c): with Nagle on, as shipped, the
    # replies to a pipelined window wait for the client's delayed ACK
    # (~40 ms a window). Hit ratios do not depend on it.
    NODELAY_SO="$WORK/nodelay.so"
    cc -O2 -shared -fPIC -o "$NODELAY_SO" "$SERVER_DIR/scripts/nodelay.c" -ldl
    SERVERS="$SERVERS pelikan"
fi

label() {
    case "$1" in
    segcache*)
        local f="${FLAGS[${1#segcache}]}"
        if [ -n "$f" ]; then echo "segcache-server $f"; else echo "segcache-server"; fi ;;
    memcached) echo "memcached $(memcached -V | awk '{print $2}')" ;;
    pelikan) echo "pelikan-segcache (TCP_NODELAY)" ;;
    esac
}

start_target() { # NAME MIB -> T_PORT, T_PID
    case "$1" in
    segcache*)
        # shellcheck disable=SC2086 # a variant is a list of flags
        start_server T --workers 1 --heap-size "$2MiB" ${FLAGS[${1#segcache}]} ;;
    memcached) start_memcached T 1 "" "$2" ;;
    pelikan) start_pelikan T 1 "" "$NODELAY_SO" "$2" ;;
    esac
    PIDS+=("$T_PID")
}

rss_mib() { awk '/^VmRSS:/ {printf "%.1f", $2 / 1024}' "/proc/$1/status"; }

RESULTS="$WORK/results"
for cluster in $CLUSTERS; do
    line="$("$REPLAY" server-replay --cluster "$cluster" --requests "$REQUESTS")"
    unique="$(field unique_mib "$line")"
    mib="${HEAP_MIB:-$(python3 -c "import math; print(max(8, math.ceil($unique / $FRACTION)))")}"
    for server in $SERVERS; do
        start_target "$server" "$mib"
        line="$("$REPLAY" server-replay --addr "127.0.0.1:$T_PORT" --cluster "$cluster" --requests "$REQUESTS")"
        echo "$cluster $server $mib $unique $(field reads "$line") $(field miss_ratio "$line") $(field items "$line") $(rss_mib "$T_PID") $(field refused "$line") $(field secs "$line")" >>"$RESULTS"
        stop_pid "$T_PID"
    done
done

echo "## Hit ratio at equal memory, servers (one worker each, $REQUESTS requests per cluster)"
echo
echo "Command: \`CLUSTERS=\"$CLUSTERS\" REQUESTS=$REQUESTS FRACTION=$FRACTION${HEAP_MIB:+ HEAP_MIB=$HEAP_MIB} VARIANTS=\"$VARIANTS\" bash examples/server/scripts/hitratio.sh\`"
echo
LABELS=""
for s in $SERVERS; do LABELS="$LABELS$(label "$s");"; done
python3 - "$RESULTS" "$SERVERS" "$LABELS" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1])]
servers, labels = sys.argv[2].split(), sys.argv[3].rstrip(";").split(";")
clusters = list(dict.fromkeys(r[0] for r in rows))
get = {(r[0], r[1]): r for r in rows}
print("Miss ratio; (x) = ratio to memcached's.\n")
print("| cluster | unique MiB | heap MiB | reads | " + " | ".join(labels) + " |")
print("|" + "---|" * (4 + len(servers)))
for c in clusters:
    reads = {get[(c, s)][4] for s in servers}
    if len(reads) != 1:
        sys.exit(f"cluster {c}: the servers saw different reads: {reads}")
    # A heap of more than twice the footprint evicts nothing: every server
    # misses each key's first read only, the same reads.
    roomy = float(get[(c, servers[0])][2]) > 2 * float(get[(c, servers[0])][3])
    if roomy and len({get[(c, s)][5] for s in servers}) != 1:
        sys.exit(f"cluster {c}: nothing to evict, yet the miss ratios differ")
    first = get[(c, servers[0])]
    base = float(get[(c, "memcached")][5])
    cells = []
    for s in servers:
        m = float(get[(c, s)][5])
        cells.append(f"{m:.4f} ({m / base:.2f}x)")
    print(f"| {c} | {first[3]} | {first[2]} | {first[4]} | " + " | ".join(cells) + " |")
print("\nItems held at the end (`stats` curr_items) / server RSS MiB / sets refused:\n")
print("| cluster | " + " | ".join(labels) + " |")
print("|" + "---|" * (1 + len(servers)))
for c in clusters:
    cells = [f"{get[(c, s)][6]} / {get[(c, s)][7]} / {get[(c, s)][8]}" for s in servers]
    print(f"| {c} | " + " | ".join(cells) + " |")
PY
