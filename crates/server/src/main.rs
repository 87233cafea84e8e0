//! `rill-server`: parses the configuration and runs [`rill_server::start`] until SIGTERM/SIGINT.

use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use rill_server::config::LogFormat;
use rill_server::recovery;
use rill_server::{Args, Config};
use tracing_subscriber::EnvFilter;

/// mimalloc rather than the system allocator: every produced record allocates on the request,
/// Raft and storage paths, and glibc's malloc/free took ~5% of a node's CPU at max rate.
#[cfg(not(madsim))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn init_logging(config: &Config) {
    // openraft logs every vote at info; keep it to warnings unless asked.
    let filter =
        EnvFilter::try_new(format!("openraft=warn,{}", config.log_level)).unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    match config.log_format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
    tracing::info!("shutdown requested");
}

/// Started by a launcher (`rill dev`, the test kit, the bench), which names itself in this
/// variable: the node then dies with it (see `rill_launcher::process`).
const PARENT_PID_ENV: &str = "RILL_PARENT_PID";

/// Asks the kernel to SIGKILL this process when the launcher named in [`PARENT_PID_ENV`] dies,
/// and exits at once if it is already gone (it may have died before the request was made).
#[cfg(target_os = "linux")]
fn die_with_launcher() -> Result<(), String> {
    let Some(raw) = std::env::var_os(PARENT_PID_ENV) else { return Ok(()) };
    let parent: i32 = raw
        .to_str()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("{PARENT_PID_ENV}={raw:?} is not a process id"))?;
    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
        .map_err(|e| format!("cannot ask to die with the launcher: {e}"))?;
    if nix::unistd::getppid().as_raw() != parent {
        return Err(format!("the launcher (process {parent}) is gone"));
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn die_with_launcher() -> Result<(), String> {
    Ok(())
}

/// Exit status when a node whose storage failed could not restart itself: a supervisor
/// restarting it does what the restart would have.
const EXIT_RESTART_FAILED: u8 = 75;

/// Replaces this process with a fresh `rill-server` run with the same arguments and
/// environment (same process id, so a launcher or supervisor keeps tracking it): the new one
/// opens the storage from what is durable, as after a crash (see `rill_server::recovery`).
/// Nothing is closed first: closing the failed engine could flush state the disk does not have.
fn restart_in_place(reason: &str) -> ! {
    use std::os::unix::process::CommandExt;
    tracing::warn!(reason, "restarting this node in place from its durable state");
    let err = match std::env::current_exe() {
        Ok(exe) => std::process::Command::new(exe).args(std::env::args_os().skip(1)).exec(),
        Err(e) => e,
    };
    tracing::error!(error = %err, "cannot restart in place; exiting so that a supervisor restarts the node");
    eprintln!("rill-server: storage failed ({reason}) and the restart in place failed: {err}");
    std::process::exit(i32::from(EXIT_RESTART_FAILED));
}

fn main() -> ExitCode {
    if let Err(e) = die_with_launcher() {
        eprintln!("rill-server: {e}");
        return ExitCode::FAILURE;
    }
    let args = Args::parse();
    let config = match args.load() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("rill-server: {e}");
            return ExitCode::from(2);
        }
    };
    init_logging(&config);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("rill-server: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        let engine = rill_server::open_engine(&config)?;
        let data_dir = config.data_dir.clone();
        let free_bytes = config.storage.recovery_free_bytes.unwrap_or(rill_server::config::DEFAULT_RECOVERY_FREE_BYTES);
        rill_server::start(config, engine, shutdown_signal(), move |node| {
            tokio::spawn(async move {
                let outcome = recovery::wait_until_writable(Arc::downgrade(&node), data_dir, free_bytes);
                drop(node);
                if let recovery::Recovery::Restart { reason } = outcome.await {
                    restart_in_place(&reason);
                }
            });
        })
        .await
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "rill-server failed");
            eprintln!("rill-server: {e}");
            ExitCode::FAILURE
        }
    }
}
