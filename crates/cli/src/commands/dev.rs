//! `rill dev`: a local cluster of real `rill-server` processes, for development and demos.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context};
use rill_client::Client;

/// How long the cluster may take to elect its metadata leader.
const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// `rill dev` arguments.
#[derive(Debug, clap::Args)]
pub struct DevArgs {
    /// Number of nodes.
    #[arg(long, default_value_t = 3)]
    nodes: u64,
    /// Directory for node data and logs.
    #[arg(long, default_value = ".rill-dev")]
    data_dir: PathBuf,
    /// Port of node 1; node N listens on base-port + N - 1.
    #[arg(long, default_value_t = 7001)]
    base_port: u16,
    /// The rill-server binary (default: next to this `rill` executable, then $PATH).
    #[arg(long, env = "RILL_SERVER_BIN")]
    server_bin: Option<PathBuf>,
}

fn server_binary(explicit: Option<PathBuf>) -> PathBuf {
    explicit.unwrap_or_else(rill_bench::systems::rill::server_binary)
}

struct Nodes(Vec<(u64, Child)>);

impl Nodes {
    /// SIGTERM every node (graceful shutdown), then wait; SIGKILL what does not exit in time.
    fn stop(&mut self) {
        for (_, child) in &self.0 {
            let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
        }
        for (id, child) in &mut self.0 {
            let mut waited = Duration::ZERO;
            loop {
                match child.try_wait() {
                    Ok(Some(status)) => {
                        eprintln!("node {id} stopped ({status})");
                        break;
                    }
                    Ok(None) if waited < Duration::from_secs(20) => {
                        std::thread::sleep(Duration::from_millis(100));
                        waited += Duration::from_millis(100);
                    }
                    _ => {
                        let _ = child.kill();
                        let _ = child.wait();
                        eprintln!("node {id} killed after 20 s");
                        break;
                    }
                }
            }
        }
        self.0.clear();
    }
}

impl Drop for Nodes {
    fn drop(&mut self) {
        self.stop();
    }
}

fn spawn(bin: &Path, id: u64, addr: &str, members: &str, dir: &Path) -> anyhow::Result<Child> {
    let data = dir.join(format!("node-{id}"));
    std::fs::create_dir_all(&data).with_context(|| format!("cannot create {}", data.display()))?;
    let log_path = dir.join(format!("node-{id}.log"));
    let log = std::fs::OpenOptions::new().create(true).append(true).open(&log_path)?;
    Command::new(bin)
        .args(["--node-id", &id.to_string(), "--listen", addr, "--cluster-members", members])
        .arg("--data-dir")
        .arg(&data)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .with_context(|| {
            format!("cannot start {} (build it with `cargo build --bins`, or pass --server-bin)", bin.display())
        })
}

/// Waits for Ctrl-C (SIGINT) or SIGTERM.
async fn wait_for_stop_signal() -> anyhow::Result<()> {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("installing a SIGTERM handler")?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.context("waiting for Ctrl-C")?,
        _ = term.recv() => {}
    }
    Ok(())
}

/// Runs `rill dev` until Ctrl-C.
pub async fn run(args: DevArgs) -> anyhow::Result<()> {
    if args.nodes == 0 || args.nodes > 9 {
        bail!("--nodes must be between 1 and 9");
    }
    let bin = server_binary(args.server_bin);
    std::fs::create_dir_all(&args.data_dir).with_context(|| format!("cannot create {}", args.data_dir.display()))?;
    let addrs: Vec<(u64, String)> =
        (1..=args.nodes).map(|id| (id, format!("127.0.0.1:{}", u64::from(args.base_port) + id - 1))).collect();
    let members = addrs.iter().map(|(id, a)| format!("{id}@{a}")).collect::<Vec<_>>().join(",");
    let mut nodes = Nodes(Vec::new());
    for (id, addr) in &addrs {
        nodes.0.push((*id, spawn(&bin, *id, addr, &members, &args.data_dir)?));
    }
    let bootstrap: Vec<String> = addrs.iter().map(|(_, a)| a.clone()).collect();
    eprintln!("starting {} node(s); logs in {}/node-N.log", args.nodes, args.data_dir.display());

    let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
    loop {
        if let Ok(client) = Client::connect(&bootstrap).await {
            if let Ok(c) = client.describe_cluster().await {
                if c.metadata_leader.is_some() && c.nodes.iter().all(|n| n.alive) {
                    break;
                }
            }
        }
        for (id, child) in &mut nodes.0 {
            if let Ok(Some(status)) = child.try_wait() {
                bail!("node {id} exited early ({status}); see {}/node-{id}.log", args.data_dir.display());
            }
        }
        if tokio::time::Instant::now() > deadline {
            bail!(
                "the cluster did not become ready within {READY_TIMEOUT:?}; see {}/node-*.log",
                args.data_dir.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    println!("cluster ready: {} node(s)", args.nodes);
    println!("bootstrap: {}", bootstrap.join(","));
    println!("try: rill --bootstrap {} topic create demo --partitions 3", bootstrap[0]);
    println!("press Ctrl-C to stop");
    wait_for_stop_signal().await?;
    eprintln!("stopping...");
    nodes.stop();
    Ok(())
}
