//! Helpers around the processes the bench starts (they are started and stopped by
//! `rill-launcher`): running set-up commands, finding programs, waiting for ports, and CPU time.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{bail, Context};

/// Runs a command to completion; fails with its output when it fails.
pub fn run(command: &mut Command) -> anyhow::Result<String> {
    let out = command.output().with_context(|| format!("cannot run {:?}", command.get_program()))?;
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    if !out.status.success() {
        bail!("{:?} failed ({}):\n{}", command, out.status, text.trim());
    }
    Ok(text)
}

/// Finds a program on `$PATH` or at one of `extra` paths (checked first).
pub fn find_program(name: &str, extra: &[PathBuf]) -> Option<PathBuf> {
    let from_path = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).map(|d| d.join(name)).collect::<Vec<_>>())
        .unwrap_or_default();
    extra.iter().cloned().chain(from_path).find(|p| p.is_file())
}

/// Waits until something accepts TCP connections on `port` at 127.0.0.1.
pub async fn wait_for_port(port: u16, timeout: Duration, what: &str) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_ok() {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            bail!("{what} did not listen on 127.0.0.1:{port} within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn clock_ticks_per_second() -> f64 {
    static TICKS: OnceLock<f64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse::<f64>().ok())
            .filter(|t| *t > 0.0)
            .unwrap_or(100.0)
    })
}

/// `(ppid, utime + stime in ticks)` from `/proc/<pid>/stat`.
fn stat(pid: u32) -> Option<(u32, u64)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields start after the last ')'.
    let rest = &text[text.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state): ppid is field 4, utime 14, stime 15.
    let ppid = fields.get(1)?.parse().ok()?;
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((ppid, utime + stime))
}

/// CPU seconds of `root` and every live descendant.
pub fn tree_cpu_seconds(root: u32) -> f64 {
    let mut parent = HashMap::new();
    let mut ticks = HashMap::new();
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else { continue };
            if let Some((ppid, t)) = stat(pid) {
                parent.insert(pid, ppid);
                ticks.insert(pid, t);
            }
        }
    }
    let total: u64 = ticks
        .iter()
        .filter(|(pid, _)| {
            let mut p = **pid;
            for _ in 0..64 {
                if p == root {
                    return true;
                }
                match parent.get(&p) {
                    Some(&pp) if pp != 0 => p = pp,
                    _ => return false,
                }
            }
            false
        })
        .map(|(_, t)| *t)
        .sum();
    total as f64 / clock_ticks_per_second()
}

/// CPU seconds this bench process has used.
pub fn own_cpu_seconds() -> f64 {
    stat(std::process::id()).map(|(_, t)| t as f64 / clock_ticks_per_second()).unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_cpu_time_of_a_process_tree() {
        // Burn some CPU in this process so the counter is above zero.
        let start = std::time::Instant::now();
        let mut x = 0u64;
        while start.elapsed() < Duration::from_millis(200) {
            x = x.wrapping_mul(31).wrapping_add(7);
        }
        assert!(x != 1);
        // Read this process's own time first: it keeps growing (other tests run beside this one),
        // so the tree's, read after, can only be larger.
        let own = own_cpu_seconds();
        assert!(own > 0.0);
        assert!(tree_cpu_seconds(std::process::id()) >= own);
        assert_eq!(tree_cpu_seconds(u32::MAX), 0.0);
    }
}
