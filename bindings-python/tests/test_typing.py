"""The stubs type real code as intended: mypy (when installed, as test.sh
does) flags `cache.get(k).decode()` (get may return None), an unknown
stats key (stats() is a TypedDict) and a decorated function's misused
result (the decorator keeps the signature)."""

import subprocess
import sys
import textwrap

import pytest

SNIPPET = textwrap.dedent(
    """
    import segcache
    c = segcache.Cache(heap_size=1 << 20)
    c.get("missing").decode()
    ok: int = c.stats()["items"]
    bad: int = c.stats()["itemz"]

    @segcache.cached(c)
    def f(x: int) -> int:
        return x

    y: str = f(1)
    z: int = c.get("k", 0) or 0
    """
)


def test_mypy_reads_the_stubs(tmp_path):
    pytest.importorskip("mypy")
    path = tmp_path / "use.py"
    path.write_text(SNIPPET)
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(path)],
        capture_output=True,
        text=True,
        timeout=300,
    ).stdout
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert any(":4: error:" in e and "None" in e and "decode" in e for e in errors), out
    assert any(":6: error:" in e and "itemz" in e for e in errors), out
    assert any(":12: error:" in e and "Incompatible types" in e for e in errors), out
    assert len(errors) == 3, out
