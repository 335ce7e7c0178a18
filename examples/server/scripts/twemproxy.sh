#!/usr/bin/env bash
# Three segcache-server instances behind twemproxy (Debian package
# nutcracker) with ketama hashing, on free loopback ports. Writes N keys
# through the proxy, reads each back through the proxy, then asks every
# server directly: each key must live on exactly one server, and every
# server must own some keys (the distribution works). Installs nutcracker
# when missing (as root).
set -euo pipefail
. "$(dirname "$0")/common.sh"
N="${N:-3000}"

need_pkg nutcracker nutcracker
NUTCRACKER="$(command -v nutcracker || echo /usr/sbin/nutcracker)"
build_server

track_processes

PORTS=()
for i in 1 2 3; do
    start_server S --workers 1 --heap-size 16MiB
    PIDS+=("$S_PID")
    PORTS+=("$S_PORT")
done
PROXY_PORT="$(free_port)"
STATS_PORT="$(free_port)"
# The recipe, with this run's addresses.
sed -e "s/127.0.0.1:22121/127.0.0.1:$PROXY_PORT/" \
    -e "s/127.0.0.1:12331:1/127.0.0.1:${PORTS[0]}:1/" \
    -e "s/127.0.0.1:12332:1/127.0.0.1:${PORTS[1]}:1/" \
    -e "s/127.0.0.1:12333:1/127.0.0.1:${PORTS[2]}:1/" \
    "$SERVER_DIR/twemproxy.yml" >"$WORK/nutcracker.yml"
"$NUTCRACKER" -t -c "$WORK/nutcracker.yml" >/dev/null 2>&1 || {
    echo "nutcracker rejects the config:" >&2
    "$NUTCRACKER" -t -c "$WORK/nutcracker.yml" >&2
    exit 1
}
"$NUTCRACKER" -c "$WORK/nutcracker.yml" -s "$STATS_PORT" -a 127.0.0.1 \
    -o "$WORK/nutcracker.log" &
PIDS+=("$!")
wait_port "$PROXY_PORT"
echo "servers on ${PORTS[*]}, twemproxy on $PROXY_PORT"

timeout 120 python3 - "$PROXY_PORT" "${PORTS[@]}" "$N" <<'PY'
import socket, sys

proxy, servers, n = int(sys.argv[1]), [int(p) for p in sys.argv[2:5]], int(sys.argv[5])

def conn(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    return s, s.makefile("rb")

def get(f, s, key):
    s.sendall(b"get " + key + b"\r\n")
    line = f.readline()
    if line == b"END\r\n":
        return None
    parts = line.split()
    assert parts[0] == b"VALUE" and parts[1] == key, line
    data = f.read(int(parts[3]) + 2)[:-2]
    assert f.readline() == b"END\r\n"
    return data

ps, pf = conn(proxy)
for i in range(n):
    key, val = b"key:%d" % i, b"value-%d" % (i * 7)
    ps.sendall(b"set %s 0 0 %d\r\n%s\r\n" % (key, len(val), val))
    line = pf.readline()
    assert line == b"STORED\r\n", (key, line)
bad = 0
for i in range(n):
    if get(pf, ps, b"key:%d" % i) != b"value-%d" % (i * 7):
        bad += 1
assert bad == 0, f"{bad} keys read back wrong through the proxy"
owners = [0, 0, 0]
direct = [conn(p) for p in servers]
for i in range(n):
    key, val = b"key:%d" % i, b"value-%d" % (i * 7)
    found = [j for j, (s, f) in enumerate(direct) if get(f, s, key) == val]
    assert len(found) == 1, f"{key} found on servers {found}"
    owners[found[0]] += 1
print(f"twemproxy: {n} keys written and read back through the proxy; "
      f"owners per server (direct reads): {owners}")
assert all(o > n // 10 for o in owners), f"uneven distribution {owners}"
PY
echo "twemproxy: OK"
