#!/usr/bin/env bash
# The server's full check: its cargo tests (unit, protocol property tests,
# integration tests against the real binary, the differential test against
# a real memcached), then memccapable -a, pymemcache's integration suite,
# gomemcache's test suite (TCP and Unix socket), pylibmc's test suite
# (text and binary protocol), the twemproxy recipe and a small run of the hit-ratio comparison. Installs what the scripts need
# when missing (Debian packages as root, pymemcache in a venv). About 3-5
# minutes once Rust dependencies are cached.
set -euo pipefail
cd "$(dirname "$0")"
. scripts/common.sh
# The reference for tests/differential.rs (skipped without it).
need_pkg memcached memcached
(cd "$REPO_DIR" && cargo test -q -p segcache-server)
bash scripts/memccapable.sh
bash scripts/pymemcache.sh
bash scripts/gomemcache.sh
bash scripts/pylibmc.sh
bash scripts/twemproxy.sh
# The hit-ratio comparison at equal memory, small (its tables: BENCH.md):
# with a heap five times the stream's footprint nothing is evicted, so
# segcache-server and memcached must miss the same first reads.
CLUSTERS=52 REQUESTS=200000 bash scripts/hitratio.sh
echo "segcache-server: all checks passed"
