//! Gives libsegcache.so its SONAME, `libsegcache.so.<ABI>`, where the ABI
//! version is the crate's major version, or `0.<minor>` before 1.0 (where
//! cargo's rules make every minor release a breaking one). The Makefile
//! installs the library under that name with the usual symlinks.

fn main() {
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").unwrap_or_else(|_| "0".into());
    let minor = std::env::var("CARGO_PKG_VERSION_MINOR").unwrap_or_else(|_| "0".into());
    let abi = if major == "0" {
        format!("0.{minor}")
    } else {
        major
    };
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libsegcache.so.{abi}");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
