//! Rill through its Kafka listener, driven by librdkafka (the `rdkafka` crate, built from the
//! source `rdkafka-sys` ships): the same cluster, topics and workload as `rill-acks-all-rf3`,
//! with a Kafka client instead of `rill-client`, so one run compares the two protocols on the
//! same processes. Behind the `kafka` cargo feature (building librdkafka takes minutes):
//! `cargo build --release -p rill-bench --features kafka`.
//!
//! Settings are the Kafka benchmark's for acks=all: idempotent producer, `linger.ms` 1, batches
//! up to 1 MiB, no compression; consumers assigned partitions (no group), fetching with a 100 ms
//! long poll. Topics are created through `rill-client`, exactly as for the gRPC variant.

use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use futures::future::BoxFuture;
use futures::FutureExt;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use rill_client::Acks;

use super::rill::RillDriver;
use super::{Deployment, Nodes};
use crate::driver::{AckFuture, BenchConsumer, BenchProducer, Driver};

/// How long `close` waits for outstanding acknowledgements.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a producer waits before offering a message again when librdkafka's queue is full.
const QUEUE_FULL_BACKOFF: Duration = Duration::from_millis(1);
/// Most messages one `poll` returns (as the gRPC variant's `max_poll_records`).
const MAX_POLL_RECORDS: usize = 2000;

/// Rill's Kafka listener at acks=all, replication factor 3.
pub struct KafkaDriver {
    /// The gRPC variant's driver at the same settings: it creates the topics, exactly as that
    /// variant does.
    topics: RillDriver,
    /// The nodes' Kafka listeners.
    bootstrap: String,
}

impl KafkaDriver {
    /// Connects to `deployment`, a Rill cluster.
    pub async fn connect(deployment: &Deployment) -> anyhow::Result<Self> {
        let Nodes::Rill(cluster) = &deployment.nodes else {
            anyhow::bail!("the Kafka variant runs on a Rill deployment");
        };
        let topics = RillDriver::connect(deployment, Acks::All, 3, true).await?;
        Ok(Self { topics, bootstrap: cluster.kafka_bootstrap().join(",") })
    }
}

impl Driver for KafkaDriver {
    fn create_topic<'a>(&'a self, topic: &'a str, partitions: u32) -> BoxFuture<'a, anyhow::Result<()>> {
        self.topics.create_topic(topic, partitions)
    }

    fn producer<'a>(&'a self, topic: &'a str) -> BoxFuture<'a, anyhow::Result<Box<dyn BenchProducer>>> {
        async move {
            let producer: FutureProducer = ClientConfig::new()
                .set("bootstrap.servers", &self.bootstrap)
                .set("acks", "all")
                .set("enable.idempotence", "true")
                .set("linger.ms", "1")
                .set("batch.size", "1048576")
                .set("queue.buffering.max.kbytes", "65536")
                .set("compression.type", "none")
                .create()
                .context("cannot create a librdkafka producer")?;
            Ok(Box::new(KafkaProducer { producer, topic: topic.to_string() }) as Box<dyn BenchProducer>)
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
            let partitions = self.topics.client().partition_count(topic).await?;
            let consumer: StreamConsumer = ClientConfig::new()
                .set("bootstrap.servers", &self.bootstrap)
                // Assigned partitions, no group: the id is only librdkafka's requirement.
                .set("group.id", format!("bench-{topic}-{member}"))
                .set("enable.auto.commit", "false")
                .set("fetch.wait.max.ms", "100")
                .create()
                .context("cannot create a librdkafka consumer")?;
            let mut assignment = TopicPartitionList::new();
            for p in (0..partitions).filter(|p| p % members == member) {
                let p = i32::try_from(p).context("partition number")?;
                assignment.add_partition_offset(topic, p, Offset::Beginning)?;
            }
            consumer.assign(&assignment)?;
            Ok(Box::new(KafkaConsumer(consumer)) as Box<dyn BenchConsumer>)
        }
        .boxed()
    }
}

struct KafkaProducer {
    producer: FutureProducer,
    topic: String,
}

impl BenchProducer for KafkaProducer {
    fn send(&self, key: Option<Bytes>, payload: Bytes) -> BoxFuture<'_, anyhow::Result<AckFuture>> {
        async move {
            loop {
                let mut record = FutureRecord::to(&self.topic).payload(&payload[..]);
                if let Some(k) = &key {
                    record = record.key(&k[..]);
                }
                // librdkafka copies the message; a full queue is offered again shortly (it has
                // no way to wake a waiter when space frees up).
                match self.producer.send_result(record) {
                    Ok(delivery) => {
                        let ack = async move {
                            match delivery.await {
                                Ok(Ok(_)) => Ok(()),
                                Ok(Err((e, _))) => Err(anyhow::Error::from(e)),
                                Err(_) => Err(anyhow::anyhow!("the producer dropped the message")),
                            }
                        };
                        return Ok(ack.boxed());
                    }
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                        tokio::time::sleep(QUEUE_FULL_BACKOFF).await;
                    }
                    Err((e, _)) => return Err(e.into()),
                }
            }
        }
        .boxed()
    }

    fn close(self: Box<Self>) -> BoxFuture<'static, ()> {
        async move {
            let producer = self.producer.clone();
            // `flush` blocks its thread until everything is acknowledged.
            let flushed = tokio::task::spawn_blocking(move || producer.flush(FLUSH_TIMEOUT)).await;
            if let Ok(Err(e)) = flushed {
                tracing::warn!("librdkafka producer flush: {e}");
            }
        }
        .boxed()
    }
}

struct KafkaConsumer(StreamConsumer);

impl BenchConsumer for KafkaConsumer {
    fn poll(&mut self) -> BoxFuture<'_, anyhow::Result<Vec<Bytes>>> {
        async move {
            let mut out = Vec::new();
            let first = match tokio::time::timeout(Duration::from_millis(200), self.0.recv()).await {
                Err(_) => return Ok(out),
                Ok(message) => message?,
            };
            out.push(Bytes::copy_from_slice(first.payload().unwrap_or_default()));
            // What librdkafka has buffered already, without waiting.
            while out.len() < MAX_POLL_RECORDS {
                match self.0.recv().now_or_never() {
                    Some(message) => out.push(Bytes::copy_from_slice(message?.payload().unwrap_or_default())),
                    None => break,
                }
            }
            Ok(out)
        }
        .boxed()
    }
}
