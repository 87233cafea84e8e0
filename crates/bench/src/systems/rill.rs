//! Rill: a local cluster of `rill-server` processes, driven through `rill-client`.

use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use futures::future::BoxFuture;
use futures::FutureExt;
use rill_client::{
    Acks, Client, Consumer, ConsumerConfig, OffsetSpec, Producer, ProducerConfig, Record, TopicPartition,
};

use rill_launcher::{ClusterSpec, LocalCluster, Ports};

use super::{Deployment, Env, Nodes};
use crate::driver::{AckFuture, BenchConsumer, BenchProducer, Driver};

/// How long a fresh cluster may take to elect its metadata leader and see every node.
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a new topic may take to elect a leader for every partition.
const TOPIC_READY_TIMEOUT: Duration = Duration::from_secs(60);

/// Starts an `nodes`-node cluster under `env.data_dir/name` (mutual TLS between the nodes
/// unless `internal_tls` is false) and waits until it is ready.
pub async fn start(env: &Env, name: &str, nodes: u64, internal_tls: bool) -> anyhow::Result<Deployment> {
    start_with(env, name, nodes, internal_tls, &[]).await
}

/// [`start`] with extra environment variables for every node (settings such as
/// `RILL_STORAGE_SEGMENT_BYTES`).
pub async fn start_with(
    env: &Env,
    name: &str,
    nodes: u64,
    internal_tls: bool,
    vars: &[(&str, &str)],
) -> anyhow::Result<Deployment> {
    let dir = env.fresh_dir(name)?;
    let log_filter = std::env::var("RILL_BENCH_NODE_LOG").unwrap_or_else(|_| "warn".to_string());
    let mut spec = ClusterSpec::new(nodes, &dir, Ports::Base(env.base_port)).env("RILL_LOG_LEVEL", log_filter);
    for (k, v) in vars {
        spec = spec.env(*k, *v);
    }
    if !internal_tls {
        spec = spec.insecure_internal();
    }
    spec.server_bin = env.rill_server.clone();
    let mut cluster = LocalCluster::start(spec)?;
    cluster.wait_ready(READY_TIMEOUT).await?;
    let endpoints = cluster.bootstrap();
    Ok(Deployment { nodes: Nodes::Rill(cluster), endpoints, dir })
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

impl RillDriver {
    /// The client it drives the cluster with.
    pub fn client(&self) -> &Client {
        &self.client
    }
}

/// Waits until every partition of `topic` has a leader.
pub async fn wait_for_leaders(client: &Client, topic: &str) -> anyhow::Result<()> {
    client.wait_for_leaders(topic, TOPIC_READY_TIMEOUT).await?;
    Ok(())
}

/// Waits until every partition of `topic` is `wanted` (described every 200 ms); after `timeout`
/// fails, naming `what` was not reached.
pub async fn wait_for_partitions(
    client: &Client,
    topic: &str,
    timeout: Duration,
    what: &str,
    wanted: impl Fn(&rill_client::PartitionDescription) -> bool,
) -> anyhow::Result<()> {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Ok(d) = client.describe_topic(topic).await {
            if d.partitions.iter().all(&wanted) {
                return Ok(());
            }
        }
        if std::time::Instant::now() > deadline {
            anyhow::bail!("{topic}: {what} not reached within {timeout:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
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
            Ok(records.into_iter().map(|r| r.value.unwrap_or_default()).collect())
        }
        .boxed()
    }
}
