#!/usr/bin/env bash
# Packages the core crate as crates.io would receive it (`cargo package`,
# which also builds the packaged sources on their own) and runs the packaged
# crate's tests, doctests included (the README's Rust examples), outside the
# workspace. Proves the published crate is whole: no file it needs lives
# outside segcache/ except the README and LICENSE that cargo copies in.
set -euo pipefail
cd "$(dirname "$0")/.."

name=$(sed -n 's/^name = "\(.*\)"/\1/p' segcache/Cargo.toml | head -n1)
version=$(sed -n 's/^version = "\(.*\)"/\1/p' segcache/Cargo.toml | head -n1)
target="${CARGO_TARGET_DIR:-$PWD/target}"

echo "== cargo package -p $name =="
# --allow-dirty: the check is about the files, not about a clean git tree.
cargo package -p "$name" --allow-dirty

# Unpacked outside the workspace (else cargo takes it for a member), at a
# fixed place per checkout, its files stamped now: cargo's fingerprints
# from an earlier run's build in the same target dir then see changed
# sources, whatever mtimes the archive carries.
work="${TMPDIR:-/tmp}/$name-package-$(echo "$PWD" | cksum | cut -d' ' -f1)"
rm -rf "$work"
mkdir -p "$work"
tar xzf "$target/package/$name-$version.crate" -C "$work"
find "$work" -type f -exec touch {} +
for f in LICENSE README.md Cargo.toml src/lib.rs; do
    [ -s "$work/$name-$version/$f" ] || { echo "package lacks $f" >&2; exit 1; }
done

echo "== tests of the packaged $name-$version (outside the workspace) =="
# Its own target dir, kept between runs (dependencies build once); the
# packaged Cargo.lock pins the same dependency versions as the workspace's.
(cd "$work/$name-$version" &&
    CARGO_TARGET_DIR="$target/package-test" timeout 1200 cargo test --release --locked)
echo "== package $name-$version: ok =="
