//! A cluster of real `rill-server` processes for one test.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use rill_client::{Client, TopicDescription};

/// Generous bound for a cluster to come up or a partition to elect a leader on a busy machine.
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// Directory holding the workspace's built binaries (next to this test executable).
pub fn bin_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/debug/deps/integration-xxxx → target/debug
    exe.parent().and_then(Path::parent).map(Path::to_path_buf).expect("target dir")
}

/// Path of a workspace binary, with a clear message when it was not built.
pub fn bin(name: &str) -> PathBuf {
    let p = bin_dir().join(name);
    assert!(p.exists(), "{} is missing: run `cargo build --bins` before the integration tests", p.display());
    p
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
    l.local_addr().expect("local addr").port()
}

/// One node process.
pub struct NodeProc {
    pub id: u64,
    pub addr: String,
    /// Started with `--join` (not a founding member).
    join: bool,
    data_dir: PathBuf,
    log: PathBuf,
    child: Option<Child>,
}

/// A running test cluster. Kills its processes on drop.
pub struct TestCluster {
    pub nodes: BTreeMap<u64, NodeProc>,
    members: String,
    dir: tempfile::TempDir,
}

impl TestCluster {
    /// Starts `n` nodes and waits until the cluster answers.
    pub async fn start(n: u64) -> Result<Self> {
        let dir = tempfile::tempdir()?;
        let addrs: BTreeMap<u64, String> = (1..=n).map(|id| (id, format!("127.0.0.1:{}", free_port()))).collect();
        let members = addrs.iter().map(|(id, a)| format!("{id}@{a}")).collect::<Vec<_>>().join(",");
        let mut nodes = BTreeMap::new();
        for (id, addr) in &addrs {
            let data_dir = dir.path().join(format!("node-{id}"));
            let log = dir.path().join(format!("node-{id}.log"));
            nodes.insert(*id, NodeProc { id: *id, addr: addr.clone(), join: false, data_dir, log, child: None });
        }
        let mut cluster = Self { nodes, members, dir };
        for id in 1..=n {
            cluster.start_node(id)?;
        }
        cluster.wait_ready().await?;
        Ok(cluster)
    }

    /// Bootstrap addresses.
    pub fn bootstrap(&self) -> Vec<String> {
        self.nodes.values().map(|n| n.addr.clone()).collect()
    }

    /// `host:port,…`
    pub fn bootstrap_arg(&self) -> String {
        self.bootstrap().join(",")
    }

    /// Adds node `id` (not a founding member) and starts it with `--join`.
    pub fn add_joining_node(&mut self, id: u64) -> Result<()> {
        if self.nodes.contains_key(&id) {
            bail!("node {id} exists already");
        }
        let addr = format!("127.0.0.1:{}", free_port());
        let data_dir = self.dir.path().join(format!("node-{id}"));
        let log = self.dir.path().join(format!("node-{id}.log"));
        self.nodes.insert(id, NodeProc { id, addr, join: true, data_dir, log, child: None });
        self.start_node(id)
    }

    /// `--cluster-members` of this cluster.
    pub fn members_arg(&self) -> &str {
        &self.members
    }

    /// The command that starts node `id` (without spawning it).
    fn node_command(&self, id: u64) -> Result<Command> {
        let node = self.nodes.get(&id).context("no such node")?;
        let mut cmd = Command::new(bin("rill-server"));
        cmd.arg("--node-id")
            .arg(id.to_string())
            .arg("--listen")
            .arg(&node.addr)
            .arg("--data-dir")
            .arg(&node.data_dir)
            .arg("--cluster-members")
            .arg(&self.members)
            .env("RILL_LOG_LEVEL", "info")
            .stdin(Stdio::null());
        if node.join {
            cmd.arg("--join");
        }
        Ok(cmd)
    }

    /// Starts (or restarts) node `id` on its data directory.
    pub fn start_node(&mut self, id: u64) -> Result<()> {
        let mut cmd = self.node_command(id)?;
        let node = self.nodes.get_mut(&id).context("no such node")?;
        if node.child.is_some() {
            bail!("node {id} is already running");
        }
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&node.log)?;
        let child = cmd.stdout(log.try_clone()?).stderr(log).spawn().context("spawn rill-server")?;
        node.child = Some(child);
        Ok(())
    }

    /// SIGKILLs node `id`.
    pub fn kill(&mut self, id: u64) -> Result<()> {
        let node = self.nodes.get_mut(&id).context("no such node")?;
        if let Some(mut c) = node.child.take() {
            c.kill()?;
            c.wait()?;
        }
        Ok(())
    }

    /// SIGTERMs node `id` and waits for it to exit (graceful shutdown).
    pub fn terminate(&mut self, id: u64) -> Result<()> {
        let node = self.nodes.get_mut(&id).context("no such node")?;
        if let Some(mut c) = node.child.take() {
            let pid = c.id();
            let status = Command::new("kill").arg("-TERM").arg(pid.to_string()).status().context("run kill")?;
            if !status.success() {
                bail!("kill -TERM {pid} failed");
            }
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            loop {
                if let Some(status) = c.try_wait()? {
                    if !status.success() {
                        bail!("node {id} exited with {status} after SIGTERM; log:\n{}", self.log_tail(id));
                    }
                    return Ok(());
                }
                if std::time::Instant::now() > deadline {
                    c.kill()?;
                    bail!("node {id} did not exit within 30 s of SIGTERM");
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(())
    }

    /// Node `id`'s whole log.
    pub fn log_text(&self, id: u64) -> String {
        self.nodes.get(&id).and_then(|n| std::fs::read_to_string(&n.log).ok()).unwrap_or_default()
    }

    /// The last lines of node `id`'s log (for failure messages).
    pub fn log_tail(&self, id: u64) -> String {
        let Some(n) = self.nodes.get(&id) else {
            return String::new();
        };
        let text = std::fs::read_to_string(&n.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// The last lines of every node's log, each under its node's name (for failure messages).
    pub fn log_tails(&self) -> String {
        self.nodes.keys().map(|id| format!("--- node {id} log (last lines):\n{}\n", self.log_tail(*id))).collect()
    }

    /// A client bootstrapped with every node.
    pub async fn client(&self) -> Result<Client> {
        let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
        loop {
            match Client::connect(&self.bootstrap()).await {
                Ok(c) => return Ok(c),
                Err(e) if tokio::time::Instant::now() > deadline => return Err(e.into()),
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }

    async fn wait_ready(&self) -> Result<()> {
        let client = self.client().await?;
        let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
        loop {
            if let Ok(c) = client.describe_cluster().await {
                if c.metadata_leader.is_some() && c.nodes.iter().all(|n| n.alive) && c.nodes.len() == self.nodes.len() {
                    return Ok(());
                }
            }
            if tokio::time::Instant::now() > deadline {
                bail!("cluster not ready within {READY_TIMEOUT:?}; node 1 log:\n{}", self.log_tail(1));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Creates a topic and waits until every partition has a leader.
    pub async fn create_topic(
        &self,
        client: &Client,
        name: &str,
        partitions: u32,
        rf: u32,
        configs: &[(&str, &str)],
    ) -> Result<TopicDescription> {
        let configs: Vec<(String, String)> = configs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        client.create_topic(name, partitions, rf, &configs).await?;
        self.wait_for_leaders(client, name).await
    }

    /// Waits until every partition of `topic` reports a leader.
    pub async fn wait_for_leaders(&self, client: &Client, topic: &str) -> Result<TopicDescription> {
        wait_for(READY_TIMEOUT, &format!("leaders for every partition of {topic}"), || async {
            let d = client.describe_topic(topic).await.ok()?;
            d.partitions.iter().all(|p| p.leader.is_some()).then_some(d)
        })
        .await
    }
}

/// Set to keep every test cluster's directory (node logs and data) after the test, for
/// investigating a failure; the path is printed.
pub const KEEP_DIRS_ENV: &str = "RILL_KEEP_TEST_DIRS";

impl Drop for TestCluster {
    fn drop(&mut self) {
        for n in self.nodes.values_mut() {
            if let Some(mut c) = n.child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        if std::env::var_os(KEEP_DIRS_ENV).is_some() {
            self.dir.disable_cleanup(true);
            eprintln!("kept the cluster's directory: {}", self.dir.path().display());
        }
    }
}

/// Polls `probe` until it yields a value or `timeout` passes (then fails naming `what`).
pub async fn wait_for<T, F, Fut>(timeout: Duration, what: &str, probe: F) -> Result<T>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Some(v) = probe().await {
            return Ok(v);
        }
        if tokio::time::Instant::now() > deadline {
            bail!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Polls the fallible `probe` until it succeeds or `timeout` passes, then fails naming `what`
/// and the probe's last error (so a timeout says why, not only that).
pub async fn wait_for_ok<T, E, F, Fut>(timeout: Duration, what: &str, probe: F) -> Result<T>
where
    E: std::fmt::Display,
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = std::result::Result<T, E>>,
{
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match probe().await {
            Ok(v) => return Ok(v),
            Err(e) if tokio::time::Instant::now() > deadline => {
                bail!("timed out after {timeout:?} waiting for {what}; last error: {e}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Installs a test log subscriber once.
pub fn init_logs() {
    let _ = tracing_subscriber::fmt().with_env_filter("info").with_test_writer().try_init();
}

/// Reads `topic`/`partition` from offset 0 up to its high watermark.
pub async fn read_all(client: &Client, topic: &str, partition: u32) -> Result<Vec<rill_client::ReceivedRecord>> {
    let mut out = Vec::new();
    let mut offset = 0;
    loop {
        let f = client.fetch(topic, partition, Some(offset), Duration::ZERO).await?;
        if f.records.is_empty() {
            if offset >= f.high_watermark {
                return Ok(out);
            }
            bail!("fetch at {offset} returned nothing below the high watermark {}", f.high_watermark);
        }
        offset = f.next_offset;
        out.extend(f.records);
    }
}
