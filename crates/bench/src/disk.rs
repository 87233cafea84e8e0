//! The file system under the bench's data: a guard that stops a run before it fills it.
//!
//! Some runs write tens of gigabytes: `--scenario restart --restart-mb 10000` keeps 30 GB, and
//! the transactions scenario, whose producers run flat out for minutes, wrote about 45 GB
//! before its topics got a retention limit.
//! A node answers a full disk with errors and keeps what it acknowledged (`t47_disk_full`), but
//! the machine is not only the bench's: a file system full to the last block stops every other
//! program on it that writes. So the bench refuses to start with less than
//! [`MIN_FREE_BYTES`] free under its data directory, watches the free space while it runs, and
//! when it falls below that floor, or on Ctrl-C, stops (the systems' processes end with the
//! scenario that started them) and removes the directories it created ([`CreatedDirs`]; with
//! `RILL_BENCH_KEEP_LOGS`, all but their node logs, as a scenario that ends on its own does).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// The least free space under the data directory a run starts with and keeps.
pub const MIN_FREE_BYTES: u64 = 4 << 30;

/// How often the free space is read while a run writes. The fastest scenario writes a few
/// hundred MB/s over all its nodes: well under the floor between two readings.
const CHECK_EVERY: Duration = Duration::from_millis(250);

/// Bytes an unprivileged process may still write on the file system holding `path`.
pub fn free_bytes(path: &Path) -> anyhow::Result<u64> {
    let stats = nix::sys::statvfs::statvfs(path)
        .map_err(|e| anyhow::anyhow!("cannot read the free space under {}: {e}", path.display()))?;
    Ok(stats.blocks_available().saturating_mul(stats.fragment_size()))
}

/// Fails unless `path`'s file system has at least `min_free` bytes free.
pub fn ensure_room(path: &Path, min_free: u64) -> anyhow::Result<()> {
    let free = free_bytes(path)?;
    anyhow::ensure!(
        free >= min_free,
        "{} has {} free; the bench needs at least {} there (some scenarios write tens of GB): \
         free some space or pass --data-dir on a larger file system",
        path.display(),
        gib(free),
        gib(min_free)
    );
    Ok(())
}

/// Fails unless `path`'s file system can take `bytes` more and still keep [`MIN_FREE_BYTES`]
/// free: for a scenario whose footprint is known before it writes, so it is refused at once
/// rather than stopped by the floor minutes later. `what` names it in the error.
pub fn ensure_room_for(path: &Path, bytes: u64, what: &str) -> anyhow::Result<()> {
    ensure_room(path, bytes.saturating_add(MIN_FREE_BYTES)).map_err(|e| {
        e.context(format!("{what} writes about {} and the bench keeps {} free", gib(bytes), gib(MIN_FREE_BYTES)))
    })
}

/// Resolves once `path`'s file system has less than `min_free` bytes free (or its free space
/// can no longer be read), with the error that says so. Never resolves otherwise.
pub async fn exhausted(path: &Path, min_free: u64) -> anyhow::Error {
    loop {
        tokio::time::sleep(CHECK_EVERY).await;
        match free_bytes(path) {
            Ok(free) if free >= min_free => {}
            Ok(free) => {
                return anyhow::anyhow!(
                    "stopped: {} free under {}, below the {} the bench keeps free; the run's data is removed",
                    gib(free),
                    path.display(),
                    gib(min_free)
                )
            }
            Err(e) => return e,
        }
    }
}

/// `bytes` in GiB, for messages.
fn gib(bytes: u64) -> String {
    format!("{:.2} GiB", bytes as f64 / f64::from(1u32 << 30))
}

/// The data directories a run created, so a run stopped early can remove them: only those,
/// never the rest of the data directory, which may be shared.
#[derive(Debug, Clone, Default)]
pub struct CreatedDirs(Arc<Mutex<Vec<PathBuf>>>);

impl CreatedDirs {
    /// Notes `dir` as the run's.
    pub fn record(&self, dir: &Path) {
        let mut dirs = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if !dirs.iter().any(|d| d == dir) {
            dirs.push(dir.to_path_buf());
        }
    }

    /// Removes every directory noted that still exists (all but the node logs in it with
    /// `RILL_BENCH_KEEP_LOGS`), saying which could not be.
    pub fn remove_all(&self) {
        let dirs = std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner));
        for dir in dirs.iter().filter(|d| d.exists()) {
            if keep_logs() {
                remove_all_but_logs(dir);
                eprintln!("removed {} but its node logs", dir.display());
                continue;
            }
            match std::fs::remove_dir_all(dir) {
                Ok(()) => eprintln!("removed {}", dir.display()),
                Err(e) => eprintln!("could not remove {}: {e}", dir.display()),
            }
        }
    }
}

/// `RILL_BENCH_KEEP_LOGS` is set: a scenario's node logs outlive its data.
pub fn keep_logs() -> bool {
    std::env::var_os("RILL_BENCH_KEEP_LOGS").is_some()
}

/// Removes everything in `dir` except the nodes' `*.log` files.
pub fn remove_all_but_logs(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let removed = if path.is_dir() {
            std::fs::remove_dir_all(&path)
        } else if path.extension().is_some_and(|e| e == "log") {
            Ok(())
        } else {
            std::fs::remove_file(&path)
        };
        if let Err(e) = removed {
            eprintln!("could not remove {}: {e}", path.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_free_space_of_an_existing_directory_is_read_and_checked() {
        let dir = std::env::temp_dir();
        assert!(free_bytes(&dir).is_ok_and(|free| free > 0));
        assert!(ensure_room(&dir, 0).is_ok());
        let refused = ensure_room(&dir, u64::MAX).map_err(|e| e.to_string());
        assert!(refused.is_err_and(|e| e.contains("the bench needs at least")));
        assert!(free_bytes(Path::new("/no/such/directory")).is_err());
        let too_big = ensure_room_for(&dir, u64::MAX, "a huge run").map_err(|e| e.to_string());
        assert!(too_big.is_err_and(|e| e.starts_with("a huge run writes about")));
    }

    #[test]
    fn only_the_directories_recorded_are_removed() {
        let parent = std::env::temp_dir().join(format!("rill-bench-disk-test-{}", std::process::id()));
        let (ours, other) = (parent.join("ours"), parent.join("other"));
        for d in [&ours, &other] {
            std::fs::create_dir_all(d.join("nested")).unwrap();
        }
        let created = CreatedDirs::default();
        created.record(&ours);
        created.record(&ours);
        created.clone().remove_all();
        assert!(!ours.exists() && other.exists());
        created.remove_all();
        std::fs::remove_dir_all(&parent).unwrap();
    }

    #[tokio::test]
    async fn a_file_system_below_the_floor_stops_the_watch() {
        let e = exhausted(&std::env::temp_dir(), u64::MAX).await.to_string();
        assert!(e.contains("below the"), "{e}");
    }
}
