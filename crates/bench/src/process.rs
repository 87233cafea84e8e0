//! Server processes the bench starts, watches (CPU time) and stops.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// A server process with its output in a log file. Stopped (SIGTERM, then SIGKILL) on drop.
pub struct ServerProcess {
    /// Name in reports (`rill-1`, `nats-2`, …).
    pub name: String,
    child: Option<Child>,
    /// Where its stdout and stderr go.
    pub log: PathBuf,
}

impl ServerProcess {
    /// Starts `command` with stdout and stderr appended to `log`.
    pub fn spawn(name: &str, mut command: Command, log: &Path) -> anyhow::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("cannot open {}", log.display()))?;
        let child = command
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()
            .with_context(|| format!("cannot start {name} ({:?})", command.get_program()))?;
        Ok(Self { name: name.to_string(), child: Some(child), log: log.to_path_buf() })
    }

    /// Process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Fails with the log's tail when the process has exited.
    pub fn check_running(&mut self) -> anyhow::Result<()> {
        if let Some(child) = &mut self.child {
            if let Some(status) = child.try_wait()? {
                self.child = None;
                bail!(
                    "{} exited ({status}); last lines of {}:\n{}",
                    self.name,
                    self.log.display(),
                    tail(&self.log, 15)
                );
            }
        }
        Ok(())
    }

    /// CPU seconds used so far by the process and its descendants.
    pub fn cpu_seconds(&self) -> f64 {
        self.pid().map(tree_cpu_seconds).unwrap_or(0.0)
    }

    /// SIGKILL, no chance to clean up: a crash.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, then SIGKILL after `grace`.
    pub fn stop(&mut self, grace: Duration) {
        let Some(mut child) = self.child.take() else { return };
        let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        self.stop(Duration::from_secs(10));
    }
}

/// The last `n` lines of a log file.
pub fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

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
        let start = Instant::now();
        let mut x = 0u64;
        while start.elapsed() < Duration::from_millis(200) {
            x = x.wrapping_mul(31).wrapping_add(7);
        }
        assert!(x != 1);
        assert!(own_cpu_seconds() > 0.0);
        assert!(tree_cpu_seconds(std::process::id()) >= own_cpu_seconds());
        assert_eq!(tree_cpu_seconds(u32::MAX), 0.0);
    }
}
