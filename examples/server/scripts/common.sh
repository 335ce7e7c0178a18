#!/usr/bin/env bash
# Helpers shared by the server's scripts: package installs, building the
# release binary, starting/stopping servers on free loopback ports.
# Sourced, not run.

SERVER_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
REPO_DIR="$(cd "$SERVER_DIR/../.." && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$REPO_DIR/target}"
SERVER_BIN="$CARGO_TARGET_DIR/release/segcache-server"
APT_UPDATED=0

# need_pkg PACKAGE COMMAND...: installs PACKAGE (Debian) unless one of
# the commands exists. Runs `apt-get update` once.
need_pkg() {
    local pkg="$1"
    shift
    local c
    for c in "$@"; do
        command -v "$c" >/dev/null 2>&1 && return 0
    done
    if [ "$(id -u)" != 0 ]; then
        echo "missing $pkg (commands: $*); run as root or install it" >&2
        return 1
    fi
    if [ "$APT_UPDATED" = 0 ]; then
        apt-get update -qq >/dev/null
        APT_UPDATED=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$pkg" >/dev/null
}

# python_venv DIR PACKAGE...: a venv at DIR with the packages (pip),
# made once; installs Debian's python3-venv (as root) when the venv
# module is missing.
python_venv() {
    local dir="$1"
    shift
    [ -x "$dir/bin/pytest" ] && return 0
    if ! python3 -m venv "$dir" >/dev/null 2>&1; then
        rm -rf "$dir"
        need_pkg python3-venv __no_such_command__
        python3 -m venv "$dir"
    fi
    "$dir/bin/pip" install -q "$@"
}

build_server() {
    (cd "$REPO_DIR" && cargo build --release -q -p segcache-server --bins)
}

# free_port: a free loopback TCP port.
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# start_server VAR_PREFIX ARGS...: starts segcache-server on ephemeral
# ports; sets ${VAR_PREFIX}_PID, _PORT, _ADMIN.
start_server() {
    local prefix="$1"
    shift
    local out
    out="$(mktemp)"
    "$SERVER_BIN" --port 0 --admin-port 0 "$@" >"$out" 2>"$out.err" &
    local pid=$!
    local i line=""
    for i in $(seq 1 100); do
        line="$(head -n1 "$out" 2>/dev/null || true)"
        [ -n "$line" ] && break
        sleep 0.05
    done
    if [ -z "$line" ]; then
        echo "segcache-server did not start:" >&2
        cat "$out.err" >&2
        kill "$pid" 2>/dev/null
        return 1
    fi
    # listening on 127.0.0.1:P admin 127.0.0.1:Q
    local port admin
    port="$(echo "$line" | awk '{print $3}' | sed 's/.*://')"
    admin="$(echo "$line" | awk '{print $5}' | sed 's/.*://')"
    printf -v "${prefix}_PID" '%s' "$pid"
    printf -v "${prefix}_PORT" '%s' "$port"
    printf -v "${prefix}_ADMIN" '%s' "$admin"
}

# wait_port PORT: waits until something listens on 127.0.0.1:PORT.
wait_port() {
    local i
    for i in $(seq 1 100); do
        python3 - "$1" <<'PY' && return 0
import socket, sys
s = socket.socket()
try:
    s.connect(("127.0.0.1", int(sys.argv[1])))
except OSError:
    sys.exit(1)
PY
        sleep 0.05
    done
    return 1
}

stop_pid() {
    local pid="$1"
    [ -n "$pid" ] || return 0
    kill -TERM "$pid" 2>/dev/null || return 0
    local i
    for i in $(seq 1 100); do
        kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
        sleep 0.05
    done
    kill -KILL "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null || true
}

# start_memcached VAR_PREFIX WORKERS [CORES] [MIB]: memcached 1.6 with
# WORKERS threads and MIB MiB of item memory (`-m`, default 256) on a free
# loopback port (under `taskset -c CORES` when given); sets
# ${VAR_PREFIX}_PID and _PORT.
start_memcached() {
    local prefix="$1" workers="$2" cores="${3:-}" mib="${4:-256}"
    local taskset=() port
    if [ -n "$cores" ]; then taskset=(taskset -c "$cores"); fi
    port="$(free_port)"
    "${taskset[@]}" memcached -l 127.0.0.1 -p "$port" -U 0 -t "$workers" -m "$mib" -c 4096 -u root &
    printf -v "${prefix}_PID" '%s' "$!"
    printf -v "${prefix}_PORT" '%s' "$port"
    wait_port "$port"
}

# pelikan_conf FILE WORKERS PORT [MIB]: writes the config of Pelikan's
# segcache server (WORKERS worker threads, a heap of MIB MiB, default 256,
# in 1 MiB segments, merge eviction, PORT on loopback, its admin port on a
# free one) to FILE. (Pelikan's "MB" is 2^20 bytes.)
pelikan_conf() {
    cat >"$1" <<EOT
daemonize = false
[admin]
host = "127.0.0.1"
port = "$(free_port)"
[server]
host = "127.0.0.1"
port = "$3"
[worker]
threads = $2
[seg]
heap_size = "${4:-256}MB"
segment_size = "1MB"
hash_power = 20
eviction = "Merge"
[time]
time_type = "Memcache"
[debug]
log_level = "error"
[klog]
sample = 0
EOT
}

# start_pelikan VAR_PREFIX WORKERS [CORES] [PRELOAD] [MIB]: Pelikan's
# segcache server (the binary PELIKAN_SEGCACHE names, built from
# pelikan-io/pelikan outside this repository) with WORKERS worker threads,
# a heap of MIB MiB (default 256) in 1 MiB segments, on a free loopback
# port (under `taskset -c CORES` when given, with LD_PRELOAD=PRELOAD when
# given); sets ${VAR_PREFIX}_PID and _PORT.
start_pelikan() {
    local prefix="$1" workers="$2" cores="${3:-}" preload="${4:-}" mib="${5:-256}"
    local taskset=() port conf
    if [ -n "$cores" ]; then taskset=(taskset -c "$cores"); fi
    if [ -n "$preload" ]; then taskset=(env LD_PRELOAD="$preload" "${taskset[@]}"); fi
    port="$(free_port)"
    conf="$(mktemp --suffix .toml)"
    pelikan_conf "$conf" "$workers" "$port" "$mib"
    "${taskset[@]}" "$PELIKAN_SEGCACHE" "$conf" >/dev/null 2>&1 &
    printf -v "${prefix}_PID" '%s' "$!"
    printf -v "${prefix}_PORT" '%s' "$port"
    wait_port "$port"
}

# add_pelikan_servers: appends the Pelikan entries to SERVERS: "pelikan"
# when PELIKAN_SEGCACHE is set, and "pelikan-nodelay" too when
# PELIKAN_NODELAY=1 (Pelikan's server with TCP_NODELAY set on every
# accepted socket by scripts/nodelay.c, built into $WORK/nodelay.so; it
# leaves Nagle on by itself, segcache-server and memcached set it).
add_pelikan_servers() {
    [ -n "${PELIKAN_SEGCACHE:-}" ] || return 0
    SERVERS="$SERVERS pelikan"
    if [ "${PELIKAN_NODELAY:-0}" = 1 ]; then
        NODELAY_SO="$WORK/nodelay.so" # WORK: see track_processes
        cc -O2 -shared -fPIC -o "$NODELAY_SO" "$SERVER_DIR/scripts/nodelay.c" -ldl
        SERVERS="$SERVERS pelikan-nodelay"
    fi
}

# Stops every process whose PID the script appends to PIDS, and removes
# its scratch directory WORK, when the script exits.
track_processes() {
    PIDS=()
    WORK="$(mktemp -d)"
    trap cleanup EXIT
}
cleanup() {
    local p
    for p in "${PIDS[@]}"; do stop_pid "$p"; done
    rm -rf "$WORK"
}

# field NAME LINE: the value of NAME in a line of NAME=VALUE words
# (loadgen's report).
field() { echo "$2" | tr ' ' '\n' | sed -n "s/^$1=//p"; }

# loaded LOADGEN ARGS...: runs the load generator and prints its report,
# or stops the script if the server refused any set of its fill: a
# benchmark over a half-filled key space measures misses, not the server.
loaded() {
    local line refused
    line="$("$@")"
    refused="$(field fill_refused "$line")"
    if [ "${refused:-0}" != 0 ]; then
        echo "$(basename "$0"): the server refused $refused sets of the fill: $line" >&2
        exit 1
    fi
    echo "$line"
}

# fill_first LOADGEN ARGS...: the fill and a short unmeasured step, checked
# as `loaded` checks them.
fill_first() {
    loaded "$@" >/dev/null
}
