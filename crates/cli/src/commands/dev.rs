//! `rill dev`: a local cluster of real `rill-server` processes, for development and demos,
//! started by `rill-launcher` (the same launcher the integration tests and the bench use).
//! The nodes die with this process, however it ends.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{bail, Context};
use rill_launcher::{ClusterSpec, LocalCluster, Ports};

/// How long the cluster may take to elect its metadata leader.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long the nodes get to stop gracefully before they are killed.
const STOP_GRACE: Duration = Duration::from_secs(20);

/// `rill dev` arguments.
#[derive(Debug, clap::Args)]
pub struct DevArgs {
    /// Number of nodes.
    #[arg(long, default_value_t = 3)]
    nodes: u64,
    /// Directory for node data and logs.
    #[arg(long, default_value = ".rill-dev")]
    data_dir: PathBuf,
    /// Client port of node 1: node N serves clients on base-port + N - 1, the other nodes on
    /// base-port + 100 + N - 1 and Kafka clients on base-port + 2091 + N - 1 (9092 for node 1 by
    /// default).
    #[arg(long, default_value_t = 7001)]
    base_port: u16,
    /// The rill-server binary (default: next to this `rill` executable, then $PATH).
    #[arg(long, env = rill_launcher::binary::SERVER_BIN_ENV)]
    server_bin: Option<PathBuf>,
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
    let mut spec = ClusterSpec::new(args.nodes, &args.data_dir, Ports::Base(args.base_port));
    if let Some(bin) = args.server_bin {
        spec.server_bin = bin;
    }
    let mut cluster = LocalCluster::start(spec)?;
    eprintln!("starting {} node(s); logs in {}/node-N.log", args.nodes, args.data_dir.display());
    cluster.wait_ready(READY_TIMEOUT).await?;
    let bootstrap = cluster.bootstrap();
    println!("cluster ready: {} node(s)", args.nodes);
    println!("bootstrap: {}", bootstrap.join(","));
    println!("kafka bootstrap: {}", cluster.kafka_bootstrap().join(","));
    println!("try: rill --bootstrap {} topic create demo --partitions 3", bootstrap[0]);
    println!("press Ctrl-C to stop");
    wait_for_stop_signal().await?;
    eprintln!("stopping...");
    for (id, outcome) in cluster.stop_all(STOP_GRACE) {
        match outcome {
            Some(status) => eprintln!("node {id} stopped ({status})"),
            None => eprintln!("node {id} killed after {} s", STOP_GRACE.as_secs()),
        }
    }
    Ok(())
}
