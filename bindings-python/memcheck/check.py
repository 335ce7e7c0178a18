"""Reads valgrind memcheck logs of the Python test suite and fails on any
error the extension could have caused.

Run by `bindings-python/memcheck.sh`; its argument is the folder of logs
(one per process, `--log-file=DIR/vg.%p.log`, run with
`--track-origins=yes`).

Every error counts, except two kinds that come without the extension:
an uninitialised-value use whose value was created by CPython's own int
allocation (`_PyLong_New`: a zero int built from text or bytes, whose
unused first digit the small-int lookup reads and multiplies by its size,
0), and a read past a block's end by one of glibc's vectorised string
routines (`__wmemcmp_avx2_movbe` comparing two str objects reads whole
32-byte words; valgrind does not replace that routine). Either is passed
over only when no frame of the extension is in the error's stack, its
block's allocation or its origin. Invalid writes, bad frees, overlapping
copies, other invalid reads, and any error with a frame in the extension
module always count.
"""

import re
import sys
from pathlib import Path

EXTENSION = re.compile(r"_segcache|segcache_python|/segcache/")
BENIGN_ORIGINS = ("_PyLong_New",)
VECTOR_STRING_ROUTINE = re.compile(r"^at 0x[0-9A-F]+: __\w+_(avx2|evex|sse2|sse4)\w* ")


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
    if any(EXTENSION.search(f) for f in frames + origin):
        return False
    if kind.startswith("Invalid read of size"):
        return bool(frames) and bool(VECTOR_STRING_ROUTINE.match(frames[0]))
    if not (kind.startswith("Conditional jump") or kind.startswith("Use of uninitialised")):
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
        f"{benign_count} of CPython's zero ints or glibc's vector reads passed over"
    )
    return 1 if counted else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
