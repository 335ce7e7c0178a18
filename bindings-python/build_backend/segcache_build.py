"""PEP 517 build backend for the segcache Python package: maturin's, with
two checks before any build:

- When ``cargo`` is not on PATH, maturin (>= 1.8) downloads a Rust
  toolchain of about 1 GB into a cache directory without asking. This
  backend stops instead and says what is missing; set
  ``SEGCACHE_ALLOW_RUST_DOWNLOAD=1`` to let maturin download it anyway.
- On a free-threaded CPython older than 3.14 (3.13t), pyo3 stops the
  build with an error from deep inside cargo's output, after compiling
  for a while. This backend says so at once, and what to use instead.

Only the hooks that build something are wrapped; everything else is
maturin's own.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from typing import Any, Mapping, Optional

import maturin
from maturin import *  # noqa: F401,F403  (re-export every hook)


class CargoNotFound(RuntimeError):
    """Raised by every build hook when cargo is missing."""


def _require_cargo() -> None:
    if os.environ.get("SEGCACHE_ALLOW_RUST_DOWNLOAD") == "1" or shutil.which("cargo"):
        return
    raise CargoNotFound(
        "segcache is a Rust extension and building it needs cargo (Rust 1.85 or newer), "
        "which is not on PATH. Install Rust (https://rustup.rs) and retry, or set "
        "SEGCACHE_ALLOW_RUST_DOWNLOAD=1 to let maturin download a temporary toolchain "
        "(about 1 GB)."
    )


class UnsupportedInterpreter(RuntimeError):
    """Raised by every build hook on a free-threaded CPython below 3.14."""


def _require_supported_interpreter(gil_disabled: Optional[bool] = None, version: Optional[tuple] = None) -> None:
    """The interpreter building the wheel (by default this one) must not be
    a free-threaded CPython below 3.14: pyo3 (0.30) supports free-threaded
    builds from 3.14 on only."""
    if gil_disabled is None:
        gil_disabled = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
    if version is None:
        version = tuple(sys.version_info[:2])
    if gil_disabled and version < (3, 14):
        raise UnsupportedInterpreter(
            f"segcache does not build for free-threaded CPython {version[0]}.{version[1]}t: pyo3, "
            "the layer it is built on, supports free-threaded CPython from 3.14 on. Install it "
            "into CPython 3.14t or newer, or into a CPython 3.10+ with the GIL (for 3.13, the "
            "python3.13 executable rather than python3.13t)."
        )


def _preflight() -> None:
    _require_supported_interpreter()
    _require_cargo()


def get_requires_for_build_wheel(config_settings: Optional[Mapping[str, Any]] = None) -> list:
    _preflight()
    return maturin.get_requires_for_build_wheel(config_settings)


def get_requires_for_build_editable(config_settings: Optional[Mapping[str, Any]] = None) -> list:
    _preflight()
    return maturin.get_requires_for_build_wheel(config_settings)


def prepare_metadata_for_build_wheel(metadata_directory: str, config_settings: Optional[Mapping[str, Any]] = None) -> str:
    _preflight()
    return maturin.prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def build_wheel(wheel_directory: str, config_settings: Optional[Mapping[str, Any]] = None, metadata_directory: Optional[str] = None) -> str:
    _preflight()
    return maturin.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_editable(wheel_directory: str, config_settings: Optional[Mapping[str, Any]] = None, metadata_directory: Optional[str] = None) -> str:
    _preflight()
    return maturin.build_editable(wheel_directory, config_settings, metadata_directory)
