//! [`LocalCluster`]: N `rill-server` nodes on 127.0.0.1, each with its data directory and log
//! under one directory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};
use std::time::Duration;

use anyhow::{bail, Context};
use rill_client::Client;

use rill_tls::issue::ClusterCa;

use crate::process::ChildProcess;

/// With [`Ports::Base`], a node's internal port is its client port plus this.
pub const INTERNAL_PORT_OFFSET: u16 = 100;

/// With [`Ports::Base`], a node's Kafka port is its client port plus this: `rill dev`'s first
/// node (client port 7001) serves Kafka clients on 9092, Kafka's usual port.
pub const KAFKA_PORT_OFFSET: u16 = 2091;

/// Longest single wait of [`LocalCluster::wait_ready`] between checks that every node still runs.
const READY_ROUND: Duration = Duration::from_secs(2);

/// How node ports are chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ports {
    /// Node N serves clients on `base + N - 1`, the other nodes on
    /// `base + INTERNAL_PORT_OFFSET + N - 1` and Kafka clients on `base + KAFKA_PORT_OFFSET + N - 1`
    /// (`rill dev`, the bench: addresses a user can type).
    Base(u16),
    /// Each node gets a port the OS reports free (tests that run side by side).
    Free,
}

/// What to start.
#[derive(Debug, Clone)]
pub struct ClusterSpec {
    /// Founding members, numbered 1..=nodes.
    pub nodes: u64,
    /// Holds `node-N/` (data) and `node-N.log` of every node.
    pub dir: PathBuf,
    /// How ports are chosen.
    pub ports: Ports,
    /// The `rill-server` binary.
    pub server_bin: PathBuf,
    /// Environment for every node (e.g. `RILL_LOG_LEVEL`), on top of the launcher's own.
    pub env: Vec<(String, String)>,
    /// Mutual TLS between the nodes, with a throwaway CA and node certificates made under
    /// `dir/tls/` (the default); `false` starts the nodes with the insecure setting.
    pub internal_tls: bool,
}

impl ClusterSpec {
    /// `nodes` founding members under `dir`, on `ports`, with the `rill-server` found by
    /// [`crate::server_binary`].
    pub fn new(nodes: u64, dir: impl Into<PathBuf>, ports: Ports) -> Self {
        Self { nodes, dir: dir.into(), ports, server_bin: crate::server_binary(), env: Vec::new(), internal_tls: true }
    }

    /// Plain TCP between the nodes (`--tls-insecure-internal`), for comparisons and experiments.
    pub fn insecure_internal(mut self) -> Self {
        self.internal_tls = false;
        self
    }

    /// Adds an environment variable for every node.
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }
}

/// One node of a [`LocalCluster`].
struct LocalNode {
    /// Client listener.
    addr: String,
    /// Internal (node-to-node) listener.
    internal_addr: String,
    /// Kafka listener.
    kafka_addr: String,
    /// Started with `--join` (not a founding member).
    join: bool,
    data_dir: PathBuf,
    log: PathBuf,
    process: Option<ChildProcess>,
}

/// A running local cluster. Dropping it stops every node still running (SIGKILL: the tests'
/// clusters are throwaway; call [`LocalCluster::stop_all`] for a graceful stop).
pub struct LocalCluster {
    spec: ClusterSpec,
    nodes: BTreeMap<u64, LocalNode>,
    members: String,
    /// The cluster's throwaway CA, with mutual TLS between nodes (boxed: it is large and
    /// rarely used).
    ca: Option<Box<ClusterCa>>,
}

impl LocalCluster {
    /// Starts the founding members of `spec` (without waiting for them; see
    /// [`LocalCluster::wait_ready`]).
    pub fn start(spec: ClusterSpec) -> anyhow::Result<Self> {
        if spec.nodes == 0 {
            bail!("a cluster needs at least one node");
        }
        std::fs::create_dir_all(&spec.dir).with_context(|| format!("cannot create {}", spec.dir.display()))?;
        let mut nodes = BTreeMap::new();
        for id in 1..=spec.nodes {
            nodes.insert(id, LocalNode::new(&spec.dir, id, spec.ports, false)?);
        }
        let members = nodes
            .iter()
            .map(|(id, n): (&u64, &LocalNode)| format!("{id}@{}", n.internal_addr))
            .collect::<Vec<_>>()
            .join(",");
        // A fresh CA per start, kept in `dir/tls/` so `rill tls node --dir …` can issue a
        // certificate for a node added later.
        let ca = match spec.internal_tls {
            true => {
                let ca = ClusterCa::generate("Rill local cluster CA").context("cannot make the cluster's CA")?;
                ca.save(&spec.dir.join("tls")).context("cannot write the cluster's CA")?;
                Some(Box::new(ca))
            }
            false => None,
        };
        let mut cluster = Self { spec, nodes, members, ca };
        for id in 1..=cluster.spec.nodes {
            cluster.start_node(id)?;
        }
        Ok(cluster)
    }

    /// Client addresses of every node, in id order.
    pub fn bootstrap(&self) -> Vec<String> {
        self.nodes.values().map(|n| n.addr.clone()).collect()
    }

    /// Kafka listener addresses of every node, in id order (a Kafka client's `bootstrap.servers`).
    pub fn kafka_bootstrap(&self) -> Vec<String> {
        self.nodes.values().map(|n| n.kafka_addr.clone()).collect()
    }

    /// The Kafka listener address of node `id`.
    pub fn kafka_addr(&self, id: u64) -> Option<&str> {
        self.nodes.get(&id).map(|n| n.kafka_addr.as_str())
    }

    /// The `--cluster-members` value of this cluster (internal addresses).
    pub fn members_arg(&self) -> &str {
        &self.members
    }

    /// Node ids, in order.
    pub fn ids(&self) -> Vec<u64> {
        self.nodes.keys().copied().collect()
    }

    /// The client address of node `id`.
    pub fn addr(&self, id: u64) -> Option<&str> {
        self.nodes.get(&id).map(|n| n.addr.as_str())
    }

    /// The internal (node-to-node) address of node `id`.
    pub fn internal_addr(&self, id: u64) -> Option<&str> {
        self.nodes.get(&id).map(|n| n.internal_addr.as_str())
    }

    /// Node `id`'s data directory.
    pub fn data_dir(&self, id: u64) -> Option<&Path> {
        self.nodes.get(&id).map(|n| n.data_dir.as_path())
    }

    /// The directory holding every node's data and log.
    pub fn dir(&self) -> &Path {
        &self.spec.dir
    }

    fn node(&self, id: u64) -> anyhow::Result<&LocalNode> {
        self.nodes.get(&id).with_context(|| format!("node {id} is not part of this cluster"))
    }

    fn node_mut(&mut self, id: u64) -> anyhow::Result<&mut LocalNode> {
        self.nodes.get_mut(&id).with_context(|| format!("node {id} is not part of this cluster"))
    }

    /// Where the cluster's certificates are (`ca.pem`, `node-N.pem`, `node-N.key`).
    pub fn tls_dir(&self) -> PathBuf {
        self.spec.dir.join("tls")
    }

    /// Issues (or re-issues) node `id`'s certificate from the cluster's CA and returns the
    /// `rill-server` flags that use it: `--tls-ca/--tls-cert/--tls-key`, or
    /// `--tls-insecure-internal` when the cluster runs without TLS.
    pub fn tls_args(&self, id: u64) -> anyhow::Result<Vec<String>> {
        let Some(ca) = &self.ca else { return Ok(vec!["--tls-insecure-internal".into()]) };
        let paths =
            ca.write_node(&self.tls_dir(), id).with_context(|| format!("cannot issue node {id}'s certificate"))?;
        let path = |p: &Path| p.display().to_string();
        Ok(vec![
            "--tls-ca".into(),
            path(&paths.ca),
            "--tls-cert".into(),
            path(&paths.cert),
            "--tls-key".into(),
            path(&paths.key),
        ])
    }

    /// Starts (or restarts, on its data directory) node `id`.
    pub fn start_node(&mut self, id: u64) -> anyhow::Result<()> {
        let node = self.node(id)?;
        if node.process.is_some() {
            bail!("node {id} is already running");
        }
        std::fs::create_dir_all(&node.data_dir)
            .with_context(|| format!("cannot create {}", node.data_dir.display()))?;
        let tls = self.tls_args(id)?;
        let mut cmd = Command::new(&self.spec.server_bin);
        cmd.args(&tls);
        cmd.args(["--node-id", &id.to_string(), "--listen", &node.addr, "--internal-listen", &node.internal_addr])
            .args(["--kafka-listen", &node.kafka_addr])
            .args(["--cluster-members", &self.members])
            .arg("--data-dir")
            .arg(&node.data_dir)
            .envs(self.spec.env.iter().map(|(k, v)| (k, v)));
        if node.join {
            cmd.arg("--join");
        }
        let process = ChildProcess::spawn(&format!("rill-{id}"), cmd, &node.log).with_context(|| {
            format!(
                "cannot start {} (build it with `cargo build --bins`, or set RILL_SERVER_BIN)",
                self.spec.server_bin.display()
            )
        })?;
        self.node_mut(id)?.process = Some(process);
        Ok(())
    }

    /// Adds node `id` (not a founding member) and starts it with `--join`.
    pub fn add_joining_node(&mut self, id: u64) -> anyhow::Result<()> {
        if self.nodes.contains_key(&id) {
            bail!("node {id} exists already");
        }
        let node = LocalNode::new(&self.spec.dir, id, self.spec.ports, true)?;
        self.nodes.insert(id, node);
        self.start_node(id)
    }

    /// SIGKILLs node `id` (a crash; unsynced writes may be lost, as on a power failure of the
    /// process alone: the page cache keeps what was written).
    pub fn kill(&mut self, id: u64) -> anyhow::Result<()> {
        match self.node_mut(id)?.process.take() {
            Some(mut p) => p.kill(),
            None => Ok(()),
        }
    }

    /// SIGTERMs node `id` and waits up to `grace` for it to stop; fails when it had to be
    /// SIGKILLed or exited unsuccessfully (quoting its log).
    pub fn terminate(&mut self, id: u64, grace: Duration) -> anyhow::Result<ExitStatus> {
        let Some(mut process) = self.node_mut(id)?.process.take() else { bail!("node {id} is not running") };
        match process.terminate(grace)? {
            Some(status) if status.success() => Ok(status),
            Some(status) => bail!("node {id} exited with {status} after SIGTERM; log:\n{}", self.log_tail(id, 40)),
            None => bail!("node {id} did not exit within {grace:?} of SIGTERM and was killed"),
        }
    }

    /// SIGTERMs every running node at once, then waits for each (SIGKILL after `grace`).
    /// Returns each node's outcome: its exit status, or `None` when it had to be killed.
    pub fn stop_all(&mut self, grace: Duration) -> Vec<(u64, Option<ExitStatus>)> {
        let mut running: Vec<(u64, ChildProcess)> =
            self.nodes.iter_mut().filter_map(|(id, n)| n.process.take().map(|p| (*id, p))).collect();
        // Signal all first, so the nodes shut down side by side rather than one after another.
        for (id, p) in &mut running {
            if let Err(e) = p.request_stop() {
                tracing::warn!(node = *id, error = %e, "cannot signal a node to stop");
            }
        }
        running.iter_mut().map(|(id, p)| (*id, p.wait_stopped(grace).unwrap_or(None))).collect()
    }

    /// Process id of node `id`, while it runs.
    pub fn pid(&self, id: u64) -> Option<u32> {
        self.nodes.get(&id).and_then(|n| n.process.as_ref()).and_then(ChildProcess::pid)
    }

    /// Every running node's process, for CPU accounting.
    pub fn processes(&self) -> impl Iterator<Item = (u64, &ChildProcess)> {
        self.nodes.iter().filter_map(|(id, n)| n.process.as_ref().map(|p| (*id, p)))
    }

    /// True while node `id` runs.
    pub fn is_running(&mut self, id: u64) -> bool {
        self.nodes.get_mut(&id).and_then(|n| n.process.as_mut()).is_some_and(ChildProcess::is_running)
    }

    /// Fails, quoting its log, when a node that was started has exited on its own.
    pub fn check_running(&mut self) -> anyhow::Result<()> {
        for n in self.nodes.values_mut() {
            if let Some(p) = &mut n.process {
                if let Err(e) = p.check_running() {
                    n.process = None;
                    return Err(e);
                }
            }
        }
        Ok(())
    }

    /// Node `id`'s log file.
    pub fn log_path(&self, id: u64) -> Option<&Path> {
        self.nodes.get(&id).map(|n| n.log.as_path())
    }

    /// Node `id`'s whole log.
    pub fn log_text(&self, id: u64) -> String {
        self.nodes.get(&id).and_then(|n| std::fs::read_to_string(&n.log).ok()).unwrap_or_default()
    }

    /// The last `lines` lines of node `id`'s log.
    pub fn log_tail(&self, id: u64, lines: usize) -> String {
        self.nodes.get(&id).map(|n| crate::process::tail(&n.log, lines)).unwrap_or_default()
    }

    /// The last lines of every node's log, each under its node's name (for failure messages).
    pub fn log_tails(&self, lines: usize) -> String {
        self.nodes
            .keys()
            .map(|id| format!("--- node {id} log (last lines):\n{}\n", self.log_tail(*id, lines)))
            .collect()
    }

    /// Waits until the cluster is usable: a metadata leader is elected and every running node
    /// is registered and answers. Fails early, quoting its log, when a node exits meanwhile.
    /// Returns a connected client.
    pub async fn wait_ready(&mut self, timeout: Duration) -> anyhow::Result<Client> {
        let deadline = tokio::time::Instant::now() + timeout;
        let expected = self.nodes.values().filter(|n| n.process.is_some()).count();
        let mut client: Option<Client> = None;
        let mut last_error = String::from("no answer yet");
        loop {
            self.check_running()?;
            if client.is_none() {
                match Client::connect(&self.bootstrap()).await {
                    Ok(c) => client = Some(c),
                    Err(e) => last_error = e.to_string(),
                }
            }
            if let Some(c) = &client {
                // Short rounds, so a node that exits meanwhile is noticed between them.
                let left = deadline.saturating_duration_since(tokio::time::Instant::now());
                match c.wait_for_cluster(expected, left.min(READY_ROUND)).await {
                    Ok(_) => return Ok(c.clone()),
                    Err(e) => last_error = e.to_string(),
                }
            }
            if tokio::time::Instant::now() >= deadline {
                bail!(
                    "the cluster in {} was not ready within {timeout:?} ({last_error}); logs in {}/node-N.log",
                    self.spec.dir.display(),
                    self.spec.dir.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl LocalNode {
    fn new(dir: &Path, id: u64, ports: Ports, join: bool) -> anyhow::Result<Self> {
        let (client, internal, kafka) = ports_for(ports, id)?;
        Ok(Self {
            addr: format!("127.0.0.1:{client}"),
            internal_addr: format!("127.0.0.1:{internal}"),
            kafka_addr: format!("127.0.0.1:{kafka}"),
            join,
            data_dir: dir.join(format!("node-{id}")),
            log: dir.join(format!("node-{id}.log")),
            process: None,
        })
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        for n in self.nodes.values_mut() {
            if let Some(mut p) = n.process.take() {
                let _ = p.kill();
            }
        }
    }
}

/// Node `id`'s client, internal and Kafka ports.
fn ports_for(ports: Ports, id: u64) -> anyhow::Result<(u16, u16, u16)> {
    match ports {
        Ports::Base(base) => {
            let offset = u16::try_from(id - 1).context("node id too large for a port offset")?;
            let port = |extra: u16| {
                base.checked_add(offset)
                    .and_then(|p| p.checked_add(extra))
                    .with_context(|| format!("port {base} + {offset} + {extra} is out of range"))
            };
            Ok((port(0)?, port(INTERNAL_PORT_OFFSET)?, port(KAFKA_PORT_OFFSET)?))
        }
        Ports::Free => Ok((free_port()?, free_port()?, free_port()?)),
    }
}

/// A port the OS reports free that this process has not handed out before. A port is probed,
/// released, and bound by the node's process only later: without the record, the OS could hand
/// the same port to the next node of the cluster, or to a cluster of a test running alongside,
/// in the meantime, and one of the two nodes would fail to start ("address already in use").
fn free_port() -> anyhow::Result<u16> {
    static HANDED_OUT: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    // Probes stay bound while the search goes on, so that the OS offers others.
    let mut probes = Vec::new();
    for _ in 0..64 {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").context("cannot bind an ephemeral port")?;
        let port = probe.local_addr()?.port();
        if HANDED_OUT.lock().unwrap_or_else(|p| p.into_inner()).insert(port) {
            return Ok(port);
        }
        probes.push(probe);
    }
    anyhow::bail!("no free port this process has not handed out already")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_are_never_handed_out_twice() -> anyhow::Result<()> {
        let ports = (0..200).map(|_| free_port()).collect::<anyhow::Result<Vec<u16>>>()?;
        let distinct: std::collections::BTreeSet<u16> = ports.iter().copied().collect();
        assert_eq!(distinct.len(), ports.len());
        Ok(())
    }
}
