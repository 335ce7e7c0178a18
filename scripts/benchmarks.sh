#!/usr/bin/env bash
# Checks that every command BENCHMARKS.md prints still parses, without
# running the (long) benchmarks: each line of a fenced block that starts
# with `cargo ` (a trailing `\` joins lines) is run
# - as printed plus `--help` when it is `cargo run ... -- ARGS`: the
#   program parses ARGS, and fails on a subcommand or flag it does not
#   know, then prints its help instead of running;
# - for `cargo bench -p PKG --bench NAME [-- FILTER]`: PKG has a bench
#   target NAME (cargo metadata; clippy --all-targets in .ci/run already
#   compiles it, so no bench-profile build here).
# Anything else starting with `cargo ` fails the check (teach this script
# how to check it). Ends with the list of what was checked.
#
# Usage: scripts/benchmarks.sh [FILE.md]   (default BENCHMARKS.md)
set -uo pipefail
cd "$(dirname "$0")/.."
doc="${1:-BENCHMARKS.md}"
limit="${BENCH_CHECK_TIMEOUT:-900}"

mapfile -t cmds < <(awk '
    /^[ \t]*```/ { open = !open; cmd = ""; next }
    open {
        line = $0
        if (cmd == "" && line !~ /^cargo /) next
        if (line ~ /\\$/) { sub(/\\$/, "", line); cmd = cmd line; next }
        print NR "\t" cmd line; cmd = ""
    }
' "$doc" | sort -t$'\t' -k2 -u | sort -n)
[ ${#cmds[@]} -gt 0 ] || { echo "benchmarks.sh: no cargo commands in $doc" >&2; exit 1; }

checked=()
status=0
for entry in "${cmds[@]}"; do
    line="${entry%%$'\t'*}"
    cmd="${entry#*$'\t'}"
    case "$cmd" in
    "cargo run "*" -- "*) check="$cmd --help" ;;
    "cargo bench "*)
        pkg=$(sed -n 's/.* -p \([^ ]*\).*/\1/p' <<<"${cmd%% -- *}")
        bench=$(sed -n 's/.* --bench \([^ ]*\).*/\1/p' <<<"${cmd%% -- *}")
        check="cargo metadata --no-deps --format-version 1 | python3 -c '
import json, sys
pkgs = [p for p in json.load(sys.stdin)[\"packages\"] if p[\"name\"] == \"$pkg\"]
sys.exit(not any(\"bench\" in t[\"kind\"] and t[\"name\"] == \"$bench\" for p in pkgs for t in p[\"targets\"]))'"
        ;;
    *)
        echo "benchmarks.sh: $doc:$line: no way to check: $cmd" >&2
        checked+=("FAIL  $doc:$line  $cmd")
        status=1
        continue
        ;;
    esac
    echo "== $doc:$line: $check"
    if out=$(timeout "$limit" bash -c "$check" 2>&1); then
        checked+=("ok    $doc:$line  $cmd")
    else
        echo "$out" | tail -n 20 >&2
        echo "benchmarks.sh: $doc:$line does not parse: $cmd" >&2
        checked+=("FAIL  $doc:$line  $cmd")
        status=1
    fi
done

echo "== benchmarks.sh: ${#checked[@]} distinct commands of $doc checked =="
for c in "${checked[@]}"; do echo "  $c"; done
[ $status -eq 0 ] && echo "== benchmarks.sh: all parse ==" || echo "== benchmarks.sh: FAILED ==" >&2
exit $status
