#!/usr/bin/env bash
# Runs the test suite of gomemcache (github.com/bradfitz/gomemcache, the Go
# client most Go programs use) against segcache-server, in every server
# shape. Its tests talk to a real server two ways:
#  - TestLocalhost: a server already listening on localhost:11211. The
#    line naming that address is pointed at our free loopback port, and
#    the test's opening `flush_all` waits for its reply before the test
#    goes on (the suite writes it and closes the connection at once, so
#    with several workers the flush can run after the test's first sets
#    and erase them: a race in the test, seen once in CI as a miss of a
#    key just stored). Its touch test sleeps 900 ms between touches
#    instead of 1 s: it sets items with a 2 s TTL, and a server that
#    counts time in whole seconds (memcached does too) may expire such an
#    item just over 1 s after the set, so a touch 1 s later loses when
#    the sleep runs a few ms long (seen in CI: all three touches missed;
#    with a 1.02 s wait, 15 of 400 items were gone from memcached 1.6.18,
#    4 of 400 from segcache-server). With 900 ms the test still fails
#    if a touch does not extend the item (the third touch comes 2.7 s
#    after the set) and still sees the untouched item expire. Those are
#    the only edits, made in a copy of the module;
#  - TestUnixSocket and TestTLS start memcached themselves (`memcached -s
#    SOCK`; `memcached --enable-ssl -o ssl_chain_cert=... -o ssl_key=...`
#    with the test's own certificate). A `memcached` shim first in PATH
#    starts segcache-server with `--unix-socket SOCK`, or `--tls-cert` and
#    `--tls-key`, instead (the tests kill it with SIGKILL; the shim execs,
#    so the kill reaches the server). For TLS the server gets a
#    certificate made here (openssl): the test's RSA key has p < q, which
#    ring refuses, and its client does not verify the certificate.
# The three server tests must report PASS: a skip of any fails the script. Needs Go (Debian's
# golang-go is installed as root when `go` is missing) and the Go module
# proxy.
set -euo pipefail
. "$(dirname "$0")/common.sh"

GOMEMCACHE_VERSION=v0.0.0-20260422231931-4d751bb6e37c
need_pkg golang-go go
build_server

WORK="$CARGO_TARGET_DIR/gomemcache"
rm -rf "$WORK"
mkdir -p "$WORK/bin"
# The module as the proxy serves it (checked against the checksum
# database), copied so that the address line can be edited.
SRC="$(cd "$WORK" && go mod download -json \
    "github.com/bradfitz/gomemcache@$GOMEMCACHE_VERSION" \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')"
cp -r "$SRC" "$WORK/src"
chmod -R u+w "$WORK/src"
TEST_FILE="$WORK/src/memcache/memcache_test.go"
grep -q 'const localhostTCPAddr = "localhost:11211"' "$TEST_FILE" || {
    echo "gomemcache $GOMEMCACHE_VERSION: the localhost address line moved; update this script" >&2
    exit 1
}
# Replaces the one occurrence of the text $1 in the test file with $2;
# stops, naming $3, if the text is not there exactly once.
edit_test() {
    python3 - "$TEST_FILE" "$1" "$2" "$3" "$GOMEMCACHE_VERSION" <<'PY'
import sys

path, old, new, what, version = sys.argv[1:]
text = open(path).read()
if text.count(old) != 1:
    sys.exit(f"gomemcache {version}: {what} found {text.count(old)} times, not once; update gomemcache.sh")
open(path, "w").write(text.replace(old, new))
PY
}
edit_test 'io.WriteString(c, "flush_all\r\n")' \
    'io.WriteString(c, "flush_all\r\n"); bufio.NewReader(c).ReadString(10)' \
    "TestLocalhost's flush_all line"
edit_test 'time.Sleep(time.Duration(1 * time.Second))' 'time.Sleep(900 * time.Millisecond)' \
    "the touch test's sleep"

# The TLS server's certificate (see the shim's TestTLS case).
need_pkg openssl openssl
mkdir -p "$WORK/tls"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
    -keyout "$WORK/tls/key.pem" -out "$WORK/tls/cert.pem" -subj "/CN=127.0.0.1" 2>/dev/null

cat >"$WORK/bin/memcached" <<EOF
#!/usr/bin/env bash
# gomemcache's tests start memcached themselves: serve them with
# segcache-server instead (shape from \$SEGCACHE_SHAPE).
# shellcheck disable=SC2086 # the shape is a worker count and flags
case "\$*" in
    # TestUnixSocket: \`memcached -s SOCK\`.
    "-s "*) exec "$SERVER_BIN" --port 0 --admin-port 0 --unix-socket "\$2" --workers \$SEGCACHE_SHAPE ;;
    # TestTLS asks whether TLS is there first...
    "--enable-ssl --version") echo "memcached 1.6.18 (segcache-server shim)"; exit 0 ;;
    # ... then starts it: --port=N --listen=127.0.0.1 --enable-ssl
    # -o ssl_chain_cert=cert.pem -o ssl_key=key.pem (files in its cwd).
    # Its client skips verification; its RSA key has p < q, which ring
    # (rustls's crypto here) refuses, so the server gets a key of its own.
    "--port="*" --listen=127.0.0.1 --enable-ssl -o ssl_chain_cert=cert.pem -o ssl_key=key.pem")
        exec "$SERVER_BIN" --port "\${1#--port=}" --admin-port 0 --tls-cert "$WORK/tls/cert.pem" --tls-key "$WORK/tls/key.pem" --workers \$SEGCACHE_SHAPE ;;
esac
echo "segcache-server test shim: unsupported memcached arguments: \$*" >&2
exit 1
EOF
chmod +x "$WORK/bin/memcached"

for shape in "1" "2" "2 --shared-cache"; do
    # shellcheck disable=SC2086 # the shape is a worker count and flags
    start_server SRV --workers $shape
    trap 'stop_pid "$SRV_PID"' EXIT
    sed -i "s|const localhostTCPAddr = .*|const localhostTCPAddr = \"127.0.0.1:$SRV_PORT\"|" "$TEST_FILE"
    echo "segcache-server (--workers $shape) on 127.0.0.1:$SRV_PORT; running gomemcache's tests"
    log="$WORK/test-$(echo "$shape" | tr ' ' '_').log"
    if ! (cd "$WORK/src" && PATH="$WORK/bin:$PATH" SEGCACHE_SHAPE="$shape" \
        timeout 300 go test -count=1 -v ./memcache/ >"$log" 2>&1); then
        cat "$log"
        echo "gomemcache's tests failed against segcache-server (--workers $shape)" >&2
        exit 1
    fi
    for t in TestLocalhost TestUnixSocket TestTLS; do
        if ! grep -q -- "--- PASS: $t " "$log"; then
            cat "$log"
            echo "gomemcache's $t did not pass (skipped?) against segcache-server (--workers $shape)" >&2
            exit 1
        fi
    done
    grep -E -- "^(--- |ok|PASS|FAIL)" "$log"
    stop_pid "$SRV_PID"
    trap - EXIT
done
rm -f /tmp/test-gomemcache-*.sock
