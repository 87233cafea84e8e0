//! Recovering from a storage failure: waiting until the data directory takes writes again.
//!
//! A failed write or fsync (a full disk, an I/O error) is final for the running process
//! (`rill_storage::health`): after a failed fsync the kernel may have dropped the pages it could
//! not write, so nothing in memory can be trusted to match the disk. The node has stopped every
//! Raft group (it leads, votes and acknowledges nothing; produces get `STORAGE_ERROR`) and says
//! why in its pings, `DescribeCluster` and its log. It keeps answering what it can.
//!
//! [`wait_until_writable`] then probes the data directory every [`PROBE_EVERY`]: a file of the
//! configured size (`[storage] recovery-free-bytes`) is written, fsynced and removed. Once that
//! succeeds the binary restarts itself in place (`main.rs` re-executes itself with the same
//! arguments, keeping its process id): the new process opens the engine from what is durable,
//! exactly as after a crash (the value log's synced part is checked, only a torn tail past it
//! is cut), rejoins its groups as a follower and catches up from the leaders. An in-process
//! reopen would not do: the failed engine cannot be closed cleanly (closing RocksDB flushes
//! memtables that may point at value log bytes that never reached the disk), and every layer
//! above holds state derived from it.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Weak;
use std::time::Duration;

use crate::node::Node;

/// How often a node whose storage failed looks at it again: a restart waits at most this long
/// after space is freed, and a probe of a few MiB per second costs a failed node nothing it
/// needs.
pub const PROBE_EVERY: Duration = Duration::from_secs(1);

/// The probe file, in the data directory (removed after every probe, and at the next one if a
/// crash left it).
pub const PROBE_FILE: &str = "space-probe.tmp";

/// Size of each write of a probe: large enough to be quick, small enough to keep memory flat.
const PROBE_CHUNK_BYTES: usize = 1 << 20;

/// Writes `bytes` bytes to a probe file in `dir`, fsyncs it and the directory, and removes it.
/// Fails with the first error (a full disk: "No space left on device").
pub fn probe(dir: &Path, bytes: u64) -> std::io::Result<()> {
    let path = dir.join(PROBE_FILE);
    let result = write_probe(&path, bytes);
    let removed = match std::fs::remove_file(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    };
    result.and(removed).and_then(|()| File::open(dir)?.sync_all())
}

fn write_probe(path: &Path, bytes: u64) -> std::io::Result<()> {
    let mut f = OpenOptions::new().write(true).create(true).truncate(true).open(path)?;
    let chunk = vec![0x5a; PROBE_CHUNK_BYTES];
    let mut left = bytes;
    while left > 0 {
        let n = left.min(PROBE_CHUNK_BYTES as u64) as usize;
        f.write_all(&chunk[..n])?;
        left -= n as u64;
    }
    f.sync_all()
}

/// What ended [`wait_until_writable`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recovery {
    /// The storage failed for `reason`, and the data directory takes writes again: restart
    /// from the durable state.
    Restart {
        /// Why the storage had failed.
        reason: String,
    },
    /// The node is gone (it stopped).
    Stopped,
}

/// Waits until `node`'s storage has failed and then until its data directory `dir` takes a
/// probe of `free_bytes` (see the module docs). Logs the failure once and each probe's outcome
/// when it changes.
pub async fn wait_until_writable(node: Weak<Node>, dir: PathBuf, free_bytes: u64) -> Recovery {
    let reason = loop {
        let Some(n) = node.upgrade() else { return Recovery::Stopped };
        if let Some(reason) = n.multi().storage_failure() {
            break reason;
        }
        drop(n);
        rill_rt::sleep(PROBE_EVERY).await;
    };
    tracing::error!(
        data_dir = %dir.display(),
        reason,
        free_bytes,
        "storage failed: this node leads, votes and acknowledges nothing; it restarts from its durable state once \
         its data directory takes {free_bytes} bytes again"
    );
    let mut last_problem = String::new();
    loop {
        if node.strong_count() == 0 {
            return Recovery::Stopped;
        }
        let probe_dir = dir.clone();
        match rill_rt::blocking(move || probe(&probe_dir, free_bytes)).await {
            Ok(()) => {
                tracing::warn!(
                    data_dir = %dir.display(),
                    free_bytes,
                    "the data directory takes writes again: restarting from the durable state"
                );
                return Recovery::Restart { reason };
            }
            Err(e) => {
                let problem = e.to_string();
                if problem != last_problem {
                    tracing::warn!(data_dir = %dir.display(), error = %problem, "the data directory still refuses writes");
                    last_problem = problem;
                }
            }
        }
        rill_rt::sleep(PROBE_EVERY).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_probe_leaves_nothing_behind_and_reports_what_failed() {
        let dir = tempfile::tempdir().unwrap();
        probe(dir.path(), 3 * PROBE_CHUNK_BYTES as u64 + 5).unwrap();
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        let err = probe(&dir.path().join("missing"), 10).unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
    }
}
