#!/usr/bin/env bash
# Runs pylibmc's own test suite (pylibmc 1.6.3, the Python client on
# libmemcached; its tests speak both the text and the binary protocol)
# against segcache-server, in every server shape. Every test must pass but
# the three in test_autoconf.py, which need an ElastiCache configuration
# endpoint on port 11211 and fail against memcached too (deselected by
# name). Installs Debian's libmemcached-dev (as root) to build pylibmc,
# and pylibmc and pytest in a venv under the cargo target directory; the
# tests come from pylibmc's source distribution.
set -euo pipefail
. "$(dirname "$0")/common.sh"

PYLIBMC_VERSION=1.6.3
VENV="$CARGO_TARGET_DIR/pylibmc-venv"
SRC="$CARGO_TARGET_DIR/pylibmc-src"
if [ ! -f /usr/include/libmemcached/memcached.h ]; then
    need_pkg libmemcached-dev __no_such_command__
fi
python_venv "$VENV" "pylibmc==$PYLIBMC_VERSION" pytest
if [ ! -d "$SRC/pylibmc-$PYLIBMC_VERSION/tests" ]; then
    rm -rf "$SRC"
    mkdir -p "$SRC"
    "$VENV/bin/pip" download -q --no-deps --no-binary :all: -d "$SRC" "pylibmc==$PYLIBMC_VERSION"
    tar xzf "$SRC/pylibmc-$PYLIBMC_VERSION.tar.gz" -C "$SRC"
fi

build_server
cd "$SRC/pylibmc-$PYLIBMC_VERSION"
for shape in "1" "2" "2 --shared-cache"; do
    # shellcheck disable=SC2086 # the shape is a worker count and flags
    start_server SRV --workers $shape
    trap 'stop_pid "$SRV_PID"' EXIT
    echo "segcache-server (--workers $shape) on 127.0.0.1:$SRV_PORT; running pylibmc $PYLIBMC_VERSION's tests"
    MEMCACHED_HOST=127.0.0.1 MEMCACHED_PORT="$SRV_PORT" timeout 300 "$VENV/bin/pytest" -q -p no:cacheprovider \
        --deselect tests/test_autoconf.py tests
    stop_pid "$SRV_PID"
    trap - EXIT
done
