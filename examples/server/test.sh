#!/usr/bin/env bash
# The server's full check: its cargo tests (unit, protocol property tests,
# integration tests against the real binary), then memccapable -a and the
# twemproxy recipe. Installs the Debian packages the scripts need when
# missing (as root). About 1-3 minutes once Rust dependencies are cached.
set -euo pipefail
cd "$(dirname "$0")"
. scripts/common.sh
(cd "$REPO_DIR" && cargo test -q -p segcache-server)
bash scripts/memccapable.sh
bash scripts/twemproxy.sh
echo "segcache-server: all checks passed"
