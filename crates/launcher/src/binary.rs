//! Finding the `rill-server` binary.

use std::path::PathBuf;

/// Environment variable naming the `rill-server` binary to start.
pub const SERVER_BIN_ENV: &str = "RILL_SERVER_BIN";

/// The `rill-server` binary: `$RILL_SERVER_BIN`, else the one beside the running executable
/// (both binaries are built into one target directory), else its parent directory (test
/// executables live in `target/<profile>/deps/`), else `rill-server` from `$PATH`.
pub fn server_binary() -> PathBuf {
    if let Some(p) = std::env::var_os(SERVER_BIN_ENV) {
        return PathBuf::from(p);
    }
    let exe_dir = std::env::current_exe().ok().and_then(|p| p.parent().map(PathBuf::from));
    let candidates = exe_dir.iter().flat_map(|d| [d.join("rill-server"), d.join("..").join("rill-server")]);
    for candidate in candidates {
        if candidate.is_file() {
            return candidate;
        }
    }
    PathBuf::from("rill-server")
}
