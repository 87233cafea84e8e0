//! A cluster of real `rill-server` processes for one test.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Result};
use rill_client::{Client, TopicDescription};
use rill_launcher::{ClusterSpec, LocalCluster, Ports};

/// Generous bound for a cluster to come up or a partition to elect a leader on a busy machine.
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// Path of a workspace binary (built next to this test executable), with a clear message when
/// it was not built.
pub fn bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    // target/debug/deps/integration-xxxx → target/debug
    let dir = exe.parent().and_then(Path::parent).map(Path::to_path_buf).expect("target dir");
    let p = dir.join(name);
    assert!(p.exists(), "{} is missing: run `cargo build --bins` before the integration tests", p.display());
    p
}

/// A running test cluster of real `rill-server` processes (started by `rill-launcher`, as
/// `rill dev` and the bench start theirs) in a temporary directory. Kills its nodes on drop.
pub struct TestCluster {
    cluster: LocalCluster,
    dir: tempfile::TempDir,
}

impl TestCluster {
    /// Starts `n` nodes and waits until the cluster answers.
    pub async fn start(n: u64) -> Result<Self> {
        Self::start_with(n, &[], None).await
    }

    /// Starts `n` nodes with extra environment `env` for every node and, with `data_from`, on
    /// copies of the data directories `data_from/node-N` (left untouched); waits until the
    /// cluster answers.
    pub async fn start_with(n: u64, env: &[(&str, &str)], data_from: Option<&Path>) -> Result<Self> {
        Self::start_in(tempfile::tempdir()?, n, env, data_from).await
    }

    /// [`TestCluster::start_with`] in directory `dir`, which may already hold a node's data
    /// directory (`dir/node-N`, say a mount point prepared by the test).
    pub async fn start_in(
        dir: tempfile::TempDir,
        n: u64,
        env: &[(&str, &str)],
        data_from: Option<&Path>,
    ) -> Result<Self> {
        if let Some(from) = data_from {
            for id in 1..=n {
                let name = format!("node-{id}");
                copy_dir(&from.join(&name), &dir.path().join(&name))?;
            }
        }
        let mut spec = ClusterSpec::new(n, dir.path(), Ports::Free).env("RILL_LOG_LEVEL", "info");
        for (k, v) in env {
            spec = spec.env(*k, *v);
        }
        spec.server_bin = bin("rill-server");
        let mut cluster = LocalCluster::start(spec)?;
        if let Err(e) = cluster.wait_ready(READY_TIMEOUT).await {
            bail!("{e:#}\n{}", cluster.log_tails(40));
        }
        Ok(Self { cluster, dir })
    }

    /// The launcher's cluster.
    pub fn local(&mut self) -> &mut LocalCluster {
        &mut self.cluster
    }

    /// Client address of node `id`.
    pub fn addr(&self, id: u64) -> String {
        self.cluster.addr(id).unwrap_or_default().to_string()
    }

    /// Bootstrap addresses.
    pub fn bootstrap(&self) -> Vec<String> {
        self.cluster.bootstrap()
    }

    /// `host:port,…`
    pub fn bootstrap_arg(&self) -> String {
        self.bootstrap().join(",")
    }

    /// Adds node `id` (not a founding member) and starts it with `--join`.
    pub fn add_joining_node(&mut self, id: u64) -> Result<()> {
        self.cluster.add_joining_node(id)
    }

    /// `--cluster-members` of this cluster.
    pub fn members_arg(&self) -> &str {
        self.cluster.members_arg()
    }

    /// Starts (or restarts) node `id` on its data directory.
    pub fn start_node(&mut self, id: u64) -> Result<()> {
        self.cluster.start_node(id)
    }

    /// SIGKILLs node `id`.
    pub fn kill(&mut self, id: u64) -> Result<()> {
        self.cluster.kill(id)
    }

    /// SIGTERMs node `id` and waits for it to exit (graceful shutdown).
    pub fn terminate(&mut self, id: u64) -> Result<()> {
        self.cluster.terminate(id, Duration::from_secs(30)).map(|_| ())
    }

    /// Node `id`'s whole log.
    pub fn log_text(&self, id: u64) -> String {
        self.cluster.log_text(id)
    }

    /// The last lines of node `id`'s log (for failure messages).
    pub fn log_tail(&self, id: u64) -> String {
        self.cluster.log_tail(id, 40)
    }

    /// The last lines of every node's log, each under its node's name (for failure messages).
    pub fn log_tails(&self) -> String {
        self.cluster.log_tails(40)
    }

    /// A client bootstrapped with every node.
    pub async fn client(&self) -> Result<Client> {
        let bootstrap = self.cluster.bootstrap();
        wait_for_ok(READY_TIMEOUT, "a client connection", || Client::connect(&bootstrap)).await
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
        Ok(client.wait_for_leaders(topic, READY_TIMEOUT).await?)
    }
}

/// Set to keep every test cluster's directory (node logs and data) after the test, for
/// investigating a failure; the path is printed.
pub const KEEP_DIRS_ENV: &str = "RILL_KEEP_TEST_DIRS";

impl Drop for TestCluster {
    fn drop(&mut self) {
        for id in self.cluster.ids() {
            let _ = self.cluster.kill(id);
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

/// Copies directory `from` to `to` (created), recursively.
pub fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", from.display()))? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

/// A nullable value (or key) as text: what the test wrote, or `<null>`.
pub fn text(field: &Option<bytes::Bytes>) -> String {
    field.as_ref().map_or_else(|| "<null>".to_string(), |b| String::from_utf8_lossy(b).into_owned())
}

/// Installs a test log subscriber once.
pub fn init_logs() {
    let _ = tracing_subscriber::fmt().with_env_filter("info").with_test_writer().try_init();
}

/// Reads `topic`/`partition` from offset 0 up to its high watermark (across the offsets a
/// compacted topic holds no records at).
pub async fn read_all(client: &Client, topic: &str, partition: u32) -> Result<Vec<rill_client::ReceivedRecord>> {
    let mut out = Vec::new();
    let mut offset = 0;
    loop {
        let f = client.fetch(topic, partition, Some(offset), Duration::ZERO).await?;
        if f.records.is_empty() && f.next_offset <= offset {
            if offset >= f.high_watermark {
                return Ok(out);
            }
            bail!("fetch at {offset} returned nothing below the high watermark {}", f.high_watermark);
        }
        // A compacted range may hold no records; the fetch still moves past it.
        offset = f.next_offset;
        out.extend(f.records);
    }
}
