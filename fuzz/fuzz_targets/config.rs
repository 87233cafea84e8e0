//! `rill-server`'s configuration: a TOML file read and validated by `Args::load` (the file's
//! syntax, unknown keys, durations, addresses, members, TLS settings, Raft timing).
//!
//! Input: the file's bytes (kept only when they are UTF-8, as the file must be).
//!
//! Properties: no panic — every input is a config or an error naming what is wrong; a config
//! accepted is accepted again, the same.
#![no_main]

use std::io::Write;
use std::path::PathBuf;

use libfuzzer_sys::fuzz_target;
use rill_server::Args;

/// The file every run rewrites (one per fuzzing process).
fn path() -> PathBuf {
    std::env::temp_dir().join(format!("rill-fuzz-config-{}.toml", std::process::id()))
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let path = path();
    let mut f = std::fs::File::create(&path).expect("the temporary directory is writable");
    f.write_all(text.as_bytes()).expect("writes");
    drop(f);
    let args = Args { config: Some(path), ..Args::default() };
    if let Ok(config) = args.load() {
        assert_eq!(args.load().ok(), Some(config), "a config loads the same twice");
    }
});
