"""Reads valgrind memcheck logs of the Python test suite and fails on any
error the extension could have caused.

Run by `bindings-python/memcheck.sh`; its argument is the folder of logs
(one per process, `--log-file=DIR/vg.%p.log`, run with
`--track-origins=yes`).

Every error counts, except the one kind CPython 3.11 makes by itself: an
uninitialised-value use whose value was created by CPython's own int
allocation (`_PyLong_New`: a zero int built from text or bytes, whose
unused first digit the small-int lookup reads and multiplies by its size,
0), with no frame of the extension in its stack. Invalid reads
and writes, bad frees, overlapping copies, and any error with a frame in
the extension module or an origin in it, always count.
"""

import re
import sys
from pathlib import Path

EXTENSION = re.compile(r"_segcache|segcache_python|/segcache/")
BENIGN_ORIGINS = ("_PyLong_New",)


def errors(log):
    """(kind, frames, origin frames) of each error in one log."""
    text = Path(log).read_text(errors="replace")
    for block in re.split(r"\n==\d+== \n", text):
        lines = [l.split("== ", 1)[1].rstrip() for l in block.splitlines() if "== " in l]
        lines = [l for l in lines if l.strip() and not l.startswith("Thread ")]
        if not lines or lines[0].startswith(("at ", "by ")):
            continue
        kind = lines[0].strip()
        if kind.startswith(("HEAP SUMMARY", "LEAK SUMMARY", "ERROR SUMMARY", "For lists")):
            continue
        frames, origin, seen_origin = [], [], False
        for line in lines[1:]:
            line = line.strip()
            if line.startswith("Uninitialised value was created"):
                seen_origin = True
                origin.append(line)
            elif line.startswith(("at ", "by ")):
                (origin if seen_origin else frames).append(line)
        yield kind, frames, origin


def benign(kind, frames, origin):
    if not (kind.startswith("Conditional jump") or kind.startswith("Use of uninitialised")):
        return False
    if any(EXTENSION.search(f) for f in frames + origin):
        return False
    created = " ".join(origin)
    return bool(origin) and any(site in created for site in BENIGN_ORIGINS)


def main(folder):
    logs = sorted(Path(folder).glob("vg.*.log"))
    if not logs:
        print(f"check.py: no valgrind logs in {folder}", file=sys.stderr)
        return 1
    counted = benign_count = 0
    for log in logs:
        for kind, frames, origin in errors(log):
            if benign(kind, frames, origin):
                benign_count += 1
                continue
            counted += 1
            print(f"{log.name}: {kind}")
            for f in (frames + origin)[:16]:
                print(f"    {f}")
    print(
        f"check.py: {len(logs)} processes, {counted} errors counted, "
        f"{benign_count} of CPython's own zero ints passed over"
    )
    return 1 if counted else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
