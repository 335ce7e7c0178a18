"""PEP 517 build backend for the segcache Python package: maturin's, with
one change. When ``cargo`` is not on PATH, maturin (>= 1.8) downloads a Rust
toolchain of about 1 GB into a cache directory without asking. This backend
stops instead and says what is missing; set ``SEGCACHE_ALLOW_RUST_DOWNLOAD=1``
to let maturin download it anyway.

Only the hooks that build something are wrapped; everything else is
maturin's own.
"""

from __future__ import annotations

import os
import shutil
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


def get_requires_for_build_wheel(config_settings: Optional[Mapping[str, Any]] = None) -> list:
    _require_cargo()
    return maturin.get_requires_for_build_wheel(config_settings)


def get_requires_for_build_editable(config_settings: Optional[Mapping[str, Any]] = None) -> list:
    _require_cargo()
    return maturin.get_requires_for_build_wheel(config_settings)


def prepare_metadata_for_build_wheel(metadata_directory: str, config_settings: Optional[Mapping[str, Any]] = None) -> str:
    _require_cargo()
    return maturin.prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def build_wheel(wheel_directory: str, config_settings: Optional[Mapping[str, Any]] = None, metadata_directory: Optional[str] = None) -> str:
    _require_cargo()
    return maturin.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_editable(wheel_directory: str, config_settings: Optional[Mapping[str, Any]] = None, metadata_directory: Optional[str] = None) -> str:
    _require_cargo()
    return maturin.build_editable(wheel_directory, config_settings, metadata_directory)
