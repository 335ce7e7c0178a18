//! The checked-in `include/segcache.h` must be what cbindgen generates from
//! the current sources. On a mismatch, regenerate it with
//! `SEGCACHE_BLESS=1 cargo test -p segcache-c --test header` and commit it.

use std::path::Path;

fn generate() -> Vec<u8> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml"))
        .expect("bindings-c/cbindgen.toml is readable and valid");
    let mut out = Vec::new();
    cbindgen::Builder::new()
        .with_config(config)
        .with_src(dir.join("src/lib.rs"))
        .generate()
        .expect("cbindgen parses bindings-c/src")
        .write(&mut out);
    out
}

#[test]
fn checked_in_header_matches_cbindgen() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("include/segcache.h");
    let fresh = generate();
    if std::env::var_os("SEGCACHE_BLESS").is_some() {
        std::fs::write(&path, &fresh).expect("write include/segcache.h");
        return;
    }
    let current = std::fs::read(&path).unwrap_or_default();
    assert!(
        current == fresh,
        "bindings-c/include/segcache.h is stale (it differs from what cbindgen generates \
         from bindings-c/src).\nRegenerate it with:\n    \
         SEGCACHE_BLESS=1 cargo test -p segcache-c --test header\nand commit the result."
    );
}

#[test]
fn header_declares_every_exported_function() {
    let header = String::from_utf8(generate()).unwrap();
    for name in [
        "segcache_config_default",
        "segcache_new",
        "segcache_free",
        "segcache_set",
        "segcache_add",
        "segcache_replace",
        "segcache_cas",
        "segcache_append",
        "segcache_prepend",
        "segcache_incr",
        "segcache_decr",
        "segcache_touch",
        "segcache_delete",
        "segcache_contains",
        "segcache_get",
        "segcache_get_with",
        "segcache_ttl",
        "segcache_flush",
        "segcache_flush_after",
        "segcache_expire",
        "segcache_clear",
        "segcache_len",
        "segcache_max_value_len",
        "segcache_stats",
        "segcache_strerror",
    ] {
        assert!(
            header.contains(&format!(" {name}(")),
            "{name} is missing from the generated header"
        );
    }
    for item in [
        "typedef struct segcache_t segcache_t;",
        "SEGCACHE_BUFFER_TOO_SMALL = 5",
        "#define SEGCACHE_MAX_KEY_LEN 250",
    ] {
        assert!(header.contains(item), "{item:?} missing");
    }
}
