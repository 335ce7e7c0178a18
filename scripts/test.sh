#!/usr/bin/env bash
# Runs every test of the project: the Rust workspace (core, storage thread,
# benches harness, server), then the C library, the Python package and the
# server's protocol-conformance scripts. Each part installs what it needs
# when it is missing (Debian packages as root, Python tools in a venv).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null; then
    echo "cargo not found: install Rust (rustup, 1.85 or newer) first" >&2
    exit 1
fi

echo "== cargo test (workspace, release) =="
cargo test --workspace --release

for part in bindings-c/test.sh bindings-python/test.sh examples/server/test.sh; do
    if [ -f "$part" ]; then
        echo "== $part =="
        bash "$part"
    fi
done
echo "== all tests passed =="
