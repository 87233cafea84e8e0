//! [`ChildProcess`]: one server process a launcher started, with its output in a log file.
//!
//! Signals are sent with `nix` (never through a shell). Every process is started with
//! [`PARENT_PID_ENV`] naming the launcher: `rill-server` then asks the kernel to kill it when
//! the launcher dies (the parent-death signal), so a SIGKILLed `rill dev` or test run leaves no
//! node behind. The kernel ties that signal to the *thread* that started the child; launchers
//! start nodes from threads that live as long as the cluster (a runtime's worker or main thread).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use nix::sys::signal::{self, Signal};
use nix::unistd::Pid;

/// Environment variable carrying the launcher's process id to the processes it starts;
/// `rill-server` dies with that process (see its `main.rs`).
pub const PARENT_PID_ENV: &str = "RILL_PARENT_PID";

/// How often a stopping process is checked for having exited.
const EXIT_POLL: Duration = Duration::from_millis(20);
/// How long a process dropped while running gets to stop gracefully before SIGKILL.
const DROP_GRACE: Duration = Duration::from_secs(10);

/// A running (or exited) server process. Stopped when dropped: SIGTERM, then SIGKILL after a
/// grace period.
pub struct ChildProcess {
    name: String,
    child: Option<Child>,
    log: PathBuf,
}

impl ChildProcess {
    /// Starts `command` with stdin closed and stdout and stderr appended to `log`.
    pub fn spawn(name: &str, mut command: Command, log: &Path) -> anyhow::Result<Self> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("cannot open {}", log.display()))?;
        let child = command
            .env(PARENT_PID_ENV, std::process::id().to_string())
            .stdin(Stdio::null())
            .stdout(file.try_clone()?)
            .stderr(file)
            .spawn()
            .with_context(|| format!("cannot start {name} ({})", command.get_program().to_string_lossy()))?;
        Ok(Self { name: name.to_string(), child: Some(child), log: log.to_path_buf() })
    }

    /// Name in messages (`rill-2`, `nats-1`, …).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Process id, while it has not been reaped.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Where its output goes.
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The last `n` lines of its log.
    pub fn log_tail(&self, n: usize) -> String {
        tail(&self.log, n)
    }

    /// Fails, naming the exit status and quoting the log's tail, when the process has exited.
    pub fn check_running(&mut self) -> anyhow::Result<()> {
        let Some(child) = &mut self.child else { bail!("{} is not running", self.name) };
        if let Some(status) = child.try_wait()? {
            self.child = None;
            bail!("{} exited ({status}); last lines of {}:\n{}", self.name, self.log.display(), tail(&self.log, 40));
        }
        Ok(())
    }

    /// True while the process runs.
    pub fn is_running(&mut self) -> bool {
        self.check_running().is_ok()
    }

    /// SIGKILL: a crash, with no chance to clean up. Waits until the process is gone.
    pub fn kill(&mut self) -> anyhow::Result<()> {
        let Some(mut child) = self.child.take() else { return Ok(()) };
        send(&child, Signal::SIGKILL)?;
        child.wait().with_context(|| format!("waiting for {} after SIGKILL", self.name))?;
        Ok(())
    }

    /// SIGTERM (graceful shutdown), waiting up to `grace` for the process to exit. Returns its
    /// exit status, or `None` when it had to be SIGKILLed after `grace`.
    pub fn terminate(&mut self, grace: Duration) -> anyhow::Result<Option<ExitStatus>> {
        self.request_stop()?;
        self.wait_stopped(grace)
    }

    /// Sends SIGTERM without waiting (to stop several processes side by side).
    pub fn request_stop(&mut self) -> anyhow::Result<()> {
        let Some(child) = &mut self.child else { return Ok(()) };
        if child.try_wait()?.is_some() {
            return Ok(());
        }
        send(child, Signal::SIGTERM)
    }

    /// Waits up to `grace` for the process to exit, then SIGKILLs it. Returns its exit status,
    /// or `None` when it had to be killed (or was not running).
    pub fn wait_stopped(&mut self, grace: Duration) -> anyhow::Result<Option<ExitStatus>> {
        let Some(mut child) = self.child.take() else { return Ok(None) };
        let deadline = Instant::now() + grace;
        loop {
            if let Some(status) = child.try_wait()? {
                return Ok(Some(status));
            }
            if Instant::now() >= deadline {
                send(&child, Signal::SIGKILL)?;
                child.wait()?;
                return Ok(None);
            }
            std::thread::sleep(EXIT_POLL);
        }
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        if let Err(e) = self.terminate(DROP_GRACE) {
            tracing::warn!(process = %self.name, error = %e, "could not stop a process cleanly");
        }
    }
}

fn send(child: &Child, signal: Signal) -> anyhow::Result<()> {
    let pid = i32::try_from(child.id()).context("process id out of range")?;
    match signal::kill(Pid::from_raw(pid), signal) {
        // Already exited, not yet reaped: nothing to signal.
        Ok(()) | Err(nix::errno::Errno::ESRCH) => Ok(()),
        Err(e) => Err(anyhow::anyhow!("cannot send {signal} to process {pid}: {e}")),
    }
}

/// The last `n` lines of a text file (empty when it cannot be read).
pub fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminate_reports_the_exit_and_kill_reaps() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let mut sleeper = Command::new("sleep");
        sleeper.arg("30");
        let mut p = ChildProcess::spawn("sleep", sleeper, &dir.path().join("sleep.log"))?;
        assert!(p.is_running());
        let status = p.terminate(Duration::from_secs(5))?;
        // `sleep` dies of SIGTERM: an exit status without a code.
        assert!(status.is_some_and(|s| s.code().is_none()), "{status:?}");
        assert!(p.pid().is_none());

        let mut echo = Command::new("sh");
        echo.args(["-c", "echo started; echo $RILL_PARENT_PID; exit 3"]);
        let mut p = ChildProcess::spawn("echo", echo, &dir.path().join("echo.log"))?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while p.is_running() && Instant::now() < deadline {
            std::thread::sleep(EXIT_POLL);
        }
        let err = p.check_running().unwrap_err().to_string();
        assert!(err.contains("not running") || err.contains("exit status: 3"), "{err}");
        let log = std::fs::read_to_string(dir.path().join("echo.log"))?;
        assert_eq!(log, format!("started\n{}\n", std::process::id()), "the child learns its launcher's pid");
        p.kill()?;
        Ok(())
    }
}
