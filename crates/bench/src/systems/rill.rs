//! Rill: a local cluster of `rill-server` processes, driven through `rill-client`.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context};
use bytes::Bytes;
use futures::future::BoxFuture;
use futures::FutureExt;
use rill_client::{
    Acks, Client, Consumer, ConsumerConfig, OffsetSpec, Producer, ProducerConfig, Record, TopicPartition,
};

use super::{Deployment, Env};
use crate::driver::{AckFuture, BenchConsumer, BenchProducer, Driver};
use crate::process::ServerProcess;

/// How long a fresh cluster may take to elect its metadata leader and see every node.
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a new topic may take to elect a leader for every partition.
const TOPIC_READY_TIMEOUT: Duration = Duration::from_secs(60);

/// The `rill-server` binary: `$RILL_SERVER_BIN`, next to this executable, then `$PATH`.
pub fn server_binary() -> PathBuf {
    if let Some(p) = std::env::var_os("RILL_SERVER_BIN") {
        return PathBuf::from(p);
    }
    let beside = std::env::current_exe().ok().and_then(|p| p.parent().map(|d| d.join("rill-server")));
    match beside {
        Some(p) if p.exists() => p,
        _ => PathBuf::from("rill-server"),
    }
}

/// Client port of node `id` (1-based).
fn port(env: &Env, id: u64) -> u16 {
    env.base_port + id as u16 - 1
}

/// Starts node `id` of an `nodes`-node cluster.
pub fn spawn_node(env: &Env, dir: &std::path::Path, id: u64, nodes: u64) -> anyhow::Result<ServerProcess> {
    let members = (1..=nodes).map(|n| format!("{n}@127.0.0.1:{}", port(env, n))).collect::<Vec<_>>().join(",");
    let data = dir.join(format!("node-{id}"));
    std::fs::create_dir_all(&data).with_context(|| format!("cannot create {}", data.display()))?;
    let mut cmd = Command::new(&env.rill_server);
    cmd.args(["--node-id", &id.to_string(), "--listen", &format!("127.0.0.1:{}", port(env, id))])
        .args(["--cluster-members", &members])
        .arg("--data-dir")
        .arg(&data)
        .env("RUST_LOG", "warn");
    ServerProcess::spawn(&format!("rill-{id}"), cmd, &dir.join(format!("node-{id}.log")))
}

/// Starts an `nodes`-node cluster under `env.data_dir/name` and waits until it is ready.
pub async fn start(env: &Env, name: &str, nodes: u64) -> anyhow::Result<Deployment> {
    let dir = env.fresh_dir(name)?;
    let mut processes = Vec::new();
    for id in 1..=nodes {
        processes.push(spawn_node(env, &dir, id, nodes)?);
    }
    let endpoints: Vec<String> = (1..=nodes).map(|id| format!("127.0.0.1:{}", port(env, id))).collect();
    let mut deployment = Deployment { processes, endpoints, dir };
    wait_ready(&mut deployment).await?;
    Ok(deployment)
}

/// Waits until the metadata group has a leader and every node is alive.
pub async fn wait_ready(deployment: &mut Deployment) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
    loop {
        if let Ok(client) = Client::connect(&deployment.endpoints).await {
            if let Ok(c) = client.describe_cluster().await {
                if c.metadata_leader.is_some() && c.nodes.iter().all(|n| n.alive) {
                    return Ok(());
                }
            }
        }
        for p in &mut deployment.processes {
            p.check_running()?;
        }
        if tokio::time::Instant::now() > deadline {
            bail!("the Rill cluster was not ready within {READY_TIMEOUT:?}; logs in {}", deployment.dir.display());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Rill with one acknowledgement level and replication factor.
pub struct RillDriver {
    client: Client,
    acks: Acks,
    replication_factor: u32,
    idempotence: bool,
}

impl RillDriver {
    /// Connects to `deployment`.
    pub async fn connect(
        deployment: &Deployment,
        acks: Acks,
        replication_factor: u32,
        idempotence: bool,
    ) -> anyhow::Result<Self> {
        let client = Client::connect(&deployment.endpoints).await.context("cannot connect to Rill")?;
        Ok(Self { client, acks, replication_factor, idempotence })
    }
}

/// Waits until every partition of `topic` has a leader.
pub async fn wait_for_leaders(client: &Client, topic: &str) -> anyhow::Result<()> {
    wait_for_leaders_within(client, topic, TOPIC_READY_TIMEOUT).await
}

/// Waits until every partition of `topic` has a leader, at most `timeout`.
pub async fn wait_for_leaders_within(client: &Client, topic: &str, timeout: Duration) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        if let Ok(d) = client.describe_topic(topic).await {
            if !d.partitions.is_empty() && d.partitions.iter().all(|p| p.leader.is_some()) {
                client.refresh_metadata(&[topic.to_string()]).await?;
                return Ok(());
            }
        }
        if tokio::time::Instant::now() > deadline {
            bail!("topic {topic} had partitions without a leader after {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

impl Driver for RillDriver {
    fn create_topic<'a>(&'a self, topic: &'a str, partitions: u32) -> BoxFuture<'a, anyhow::Result<()>> {
        async move {
            let min_isr = self.replication_factor.min(2).to_string();
            let configs = [("min.insync.replicas".to_string(), min_isr)];
            self.client.create_topic(topic, partitions, self.replication_factor, &configs).await?;
            wait_for_leaders(&self.client, topic).await
        }
        .boxed()
    }

    fn producer<'a>(&'a self, topic: &'a str) -> BoxFuture<'a, anyhow::Result<Box<dyn BenchProducer>>> {
        async move {
            let config = ProducerConfig {
                acks: self.acks,
                idempotence: self.idempotence,
                // Kafka's benchmark settings: linger 1 ms, batches up to 1 MiB.
                linger: Duration::from_millis(1),
                batch_size: 1 << 20,
                buffer_memory: 64 << 20,
                ..ProducerConfig::default()
            };
            let producer = Producer::new(self.client.clone(), config);
            Ok(Box::new(RillProducer { producer, topic: topic.to_string() }) as Box<dyn BenchProducer>)
        }
        .boxed()
    }

    fn consumer<'a>(
        &'a self,
        topic: &'a str,
        _subscription: u32,
        member: u32,
        members: u32,
    ) -> BoxFuture<'a, anyhow::Result<Box<dyn BenchConsumer>>> {
        async move {
            let partitions = self.client.partition_count(topic).await?;
            let config = ConsumerConfig {
                start: OffsetSpec::Earliest,
                fetch_max_wait: Duration::from_millis(100),
                max_poll_records: 2000,
                ..ConsumerConfig::default()
            };
            let mut consumer = Consumer::new(self.client.clone(), config);
            consumer.assign((0..partitions).filter(|p| p % members == member).map(|p| TopicPartition::new(topic, p)));
            Ok(Box::new(RillConsumer(consumer)) as Box<dyn BenchConsumer>)
        }
        .boxed()
    }
}

struct RillProducer {
    producer: Producer,
    topic: String,
}

impl BenchProducer for RillProducer {
    fn send(&self, key: Option<Bytes>, payload: Bytes) -> BoxFuture<'_, anyhow::Result<AckFuture>> {
        async move {
            let record = match key {
                Some(k) => Record::keyed(k, payload),
                None => Record::new(payload),
            };
            let delivery = self.producer.send(&self.topic, record).await?;
            Ok(async move { delivery.await.map(|_| ()).map_err(anyhow::Error::from) }.boxed())
        }
        .boxed()
    }

    fn close(self: Box<Self>) -> BoxFuture<'static, ()> {
        async move { self.producer.close().await }.boxed()
    }
}

struct RillConsumer(Consumer);

impl BenchConsumer for RillConsumer {
    fn poll(&mut self) -> BoxFuture<'_, anyhow::Result<Vec<Bytes>>> {
        async move {
            let records = self.0.poll(Duration::from_millis(200)).await?;
            Ok(records.into_iter().map(|r| r.value).collect())
        }
        .boxed()
    }
}
