"""Packaging: the build backend refuses to build without cargo instead of
downloading a toolchain, and at once on a free-threaded CPython pyo3 does
not support, the version is one everywhere, the typing files
are installed and the runtime signatures match the stubs."""

import ast
import importlib.metadata
import importlib.resources
import inspect
import os
import pathlib
import sys

import pytest

import segcache

HERE = pathlib.Path(__file__).resolve().parent
BACKEND = HERE.parent / "build_backend"


def test_build_backend_without_cargo_says_so(monkeypatch, tmp_path):
    pytest.importorskip("maturin")
    monkeypatch.syspath_prepend(str(BACKEND))
    monkeypatch.chdir(BACKEND.parent)  # maturin reads ./pyproject.toml
    import segcache_build

    monkeypatch.setenv("PATH", str(tmp_path))  # no cargo here
    monkeypatch.delenv("SEGCACHE_ALLOW_RUST_DOWNLOAD", raising=False)
    for hook in (
        lambda: segcache_build.get_requires_for_build_wheel(None),
        lambda: segcache_build.build_wheel(str(tmp_path)),
        lambda: segcache_build.prepare_metadata_for_build_wheel(str(tmp_path)),
    ):
        with pytest.raises(segcache_build.CargoNotFound, match="needs cargo"):
            hook()
    # With the opt-in, maturin's own behaviour (it asks for puccinialin).
    monkeypatch.setenv("SEGCACHE_ALLOW_RUST_DOWNLOAD", "1")
    assert "puccinialin" in segcache_build.get_requires_for_build_wheel(None)


def test_build_backend_refuses_free_threaded_3_13(monkeypatch):
    pytest.importorskip("maturin")
    monkeypatch.syspath_prepend(str(BACKEND))
    import segcache_build

    check = segcache_build._require_supported_interpreter
    with pytest.raises(segcache_build.UnsupportedInterpreter, match=r"3\.13t: pyo3.* from 3\.14 on"):
        check(gil_disabled=True, version=(3, 13))
    check(gil_disabled=True, version=(3, 14))  # pyo3 0.30 builds for 3.14t
    check(gil_disabled=False, version=(3, 13))
    check()  # the interpreter running this suite was able to build the wheel


def test_version_is_consistent():
    assert segcache.__version__ == importlib.metadata.version("segcache")


def test_typing_files_are_installed():
    files = importlib.resources.files("segcache")
    assert files.joinpath("py.typed").is_file()
    assert files.joinpath("_segcache.pyi").is_file()


def stub_signatures():
    """{(class or None, name): parameter names} from the installed stub."""
    text = importlib.resources.files("segcache").joinpath("_segcache.pyi").read_text()
    out = {}
    for node in ast.parse(text).body:
        if isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef):
                    args = item.args
                    names = [a.arg for a in args.posonlyargs + args.args]
                    if args.vararg:
                        names.append("*" + args.vararg.arg)
                    names += [a.arg for a in args.kwonlyargs]
                    if args.kwarg:
                        names.append("**" + args.kwarg.arg)
                    out[(node.name, item.name)] = names
    return out


def runtime_names(obj):
    names = []
    for p in inspect.signature(obj).parameters.values():
        prefix = {p.VAR_POSITIONAL: "*", p.VAR_KEYWORD: "**"}.get(p.kind, "")
        names.append(prefix + p.name)
    return names


@pytest.mark.parametrize("cls", ["Cache", "CachedFunction", "ManualClock"])
def test_runtime_signatures_match_the_stub(cls):
    stubs = stub_signatures()
    native = getattr(segcache._segcache, cls)
    checked = 0
    for (owner, name), params in stubs.items():
        if owner != cls or name.startswith("__") and name not in ("__init__",):
            continue
        if name == "__init__":
            obj = native
            params = params[1:]
        else:
            obj = getattr(native, name)
            if isinstance(obj, property) or not callable(obj):
                continue
        try:
            got = runtime_names(obj)
        except ValueError:
            pytest.fail(f"{cls}.{name} has no __text_signature__")
        if got and got[0] == "self":
            got = got[1:]
        if params and params[0] == "self":
            params = params[1:]
        assert got == params, f"{cls}.{name}"
        checked += 1
    assert checked >= 3


def test_docstrings_are_present():
    for name in ("get", "set", "get_or_set", "pop", "setdefault", "incr", "stats"):
        assert getattr(segcache.Cache, name).__doc__, name
    assert "memory-bounded" in segcache.Cache.__doc__
    for word in ("heap_size", "serializer", "MutableMapping", "1 == 1.0 == True"):
        assert word in segcache.Cache.__doc__, word
    assert segcache.cached.__doc__


def elf_section_names(data):
    """Section names of a 64-bit little-endian ELF file."""
    import struct

    assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1, "ELF64 LE"
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    def header(i):
        return struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize)
    strtab_off = header(shstrndx)[4]
    names = []
    for i in range(shnum):
        name_off = header(i)[0]
        end = data.index(b"\0", strtab_off + name_off)
        names.append(data[strtab_off + name_off:end].decode())
    return names


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ELF check")
def test_extension_has_no_debug_info():
    so = pathlib.Path(segcache._segcache.__file__)
    if so.parent == HERE.parent / "python" / "segcache":
        pytest.skip("a development build (maturin develop), not the wheel")
    names = elf_section_names(so.read_bytes())
    assert ".text" in names and ".dynsym" in names
    assert not [n for n in names if n.startswith(".debug") or n == ".symtab"], names


def test_the_wheel_is_an_optimised_build():
    # pip builds the release profile; only memcheck.sh installs a dev
    # build (debug assertions on, for its checks) and says so. A dev build
    # left installed runs a 64 B get an order of magnitude slower, and the
    # bench scripts refuse it by the same flag.
    if pathlib.Path(segcache._segcache.__file__).parent == HERE.parent / "python" / "segcache":
        pytest.skip("a development build (maturin develop), not the wheel")
    expected = os.environ.get("SEGCACHE_EXPECT_DEV_BUILD") == "1"
    assert segcache._segcache._DEBUG_ASSERTIONS is expected
