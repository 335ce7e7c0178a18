#!/usr/bin/env bash
# Checks that every Markdown table in the repository's tracked .md files
# renders as a table: its header row is followed by a separator row
# (`|---|...`) with as many columns. A table pasted without one shows
# as a paragraph of pipes on GitHub (three of BENCHMARKS.md's did).
# Fenced code blocks are skipped. Prints each bad table's file and line.
set -euo pipefail
cd "$(dirname "$0")/.."
git ls-files -z '*.md' | xargs -0 python3 -c '
import re, sys
bad = 0
for path in sys.argv[1:]:
    lines = open(path, encoding="utf-8").read().split("\n")
    fenced = False
    for i, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            fenced = not fenced
        if fenced or not line.startswith("|") or (i and lines[i - 1].startswith("|")):
            continue
        cols = len(re.split(r"(?<!\\)\|", line.strip().strip("|")))
        sep = lines[i + 1] if i + 1 < len(lines) else ""
        if not re.fullmatch(r"\|(\s*:?-+:?\s*\|)+\s*", sep) or sep.strip().strip("|").count("|") + 1 != cols:
            print(f"{path}:{i + 1}: a table header without a separator row of {cols} columns")
            bad += 1
sys.exit(1 if bad else 0)
'
echo "tables.sh: every Markdown table has its separator row"
