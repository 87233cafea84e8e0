//! RabbitMQ: three nodes on loopback joined into one cluster; a quorum queue (Raft, fsync) or a
//! stream queue with 3 replicas per topic; persistent messages with publisher confirms.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context};
use bytes::Bytes;
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions, ConfirmSelectOptions,
    QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection, ConnectionProperties};

use super::{Deployment, Env, Nodes};
use crate::driver::{AckFuture, BenchConsumer, BenchProducer, Driver};
use crate::process::{run, wait_for_port};
use rill_launcher::ChildProcess;

const AMQP_OFFSET: u16 = 40;
const DIST_OFFSET: u16 = 50;
const EPMD_OFFSET: u16 = 60;
const NODES: u16 = 3;
const SBIN: &str = "/usr/lib/rabbitmq/bin";
/// Consumer prefetch (messages delivered but not yet acknowledged).
const PREFETCH: u16 = 1000;

fn node_name(i: u16) -> String {
    format!("rill-bench-r{i}@localhost")
}

/// The environment every RabbitMQ command of this deployment runs with: private Erlang cookie
/// (in `HOME`), private epmd port, node's own ports and directories.
fn node_env(cmd: &mut Command, env: &Env, dir: &Path, i: u16) {
    cmd.env("HOME", dir.join("home"))
        .env("ERL_EPMD_PORT", (env.base_port + EPMD_OFFSET).to_string())
        .env("RABBITMQ_CONF_ENV_FILE", dir.join("rabbitmq-env.conf"))
        .env("RABBITMQ_NODENAME", node_name(i))
        .env("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1")
        .env("RABBITMQ_NODE_PORT", (env.base_port + AMQP_OFFSET + i).to_string())
        .env("RABBITMQ_DIST_PORT", (env.base_port + DIST_OFFSET + i).to_string())
        .env("RABBITMQ_MNESIA_BASE", dir.join("mnesia"))
        .env("RABBITMQ_LOG_BASE", dir.join("log"))
        .env("RABBITMQ_CONFIG_FILE", dir.join(format!("r{i}")))
        .env("RABBITMQ_ENABLED_PLUGINS_FILE", dir.join("enabled_plugins"))
        .env("RABBITMQ_PID_FILE", dir.join(format!("r{i}.pid")))
        // Co-located nodes: no busy-waiting schedulers stealing the other nodes' CPU.
        .env("RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS", "+sbwt none +sbwtdcpu none +sbwtdio none");
}

fn ctl(env: &Env, dir: &Path, i: u16, args: &[&str]) -> anyhow::Result<String> {
    let mut cmd = Command::new(PathBuf::from(SBIN).join("rabbitmqctl"));
    node_env(&mut cmd, env, dir, i);
    cmd.arg("-n").arg(node_name(i)).args(args);
    run(&mut cmd)
}

/// Starts three RabbitMQ nodes and joins nodes 2 and 3 to node 1.
pub async fn start(env: &Env) -> anyhow::Result<Deployment> {
    let server = PathBuf::from(SBIN).join("rabbitmq-server");
    if !server.is_file() {
        bail!("{} not found (apt-get install rabbitmq-server)", server.display());
    }
    let dir = env.fresh_dir("rabbitmq")?;
    let home = dir.join("home");
    std::fs::create_dir_all(&home)?;
    let cookie = home.join(".erlang.cookie");
    std::fs::write(&cookie, "RILLBENCHCOOKIE")?;
    run(Command::new("chmod").arg("400").arg(&cookie))?;
    std::fs::write(dir.join("rabbitmq-env.conf"), "")?;
    std::fs::write(dir.join("enabled_plugins"), "[].\n")?;
    let mut processes = Vec::new();
    let mut endpoints = Vec::new();
    for i in 1..=NODES {
        std::fs::write(dir.join(format!("r{i}.conf")), "loopback_users = none\n")?;
        let mut cmd = Command::new(&server);
        node_env(&mut cmd, env, &dir, i);
        processes.push(ChildProcess::spawn(&format!("rabbitmq-{i}"), cmd, &dir.join(format!("r{i}.out")))?);
        endpoints.push(format!("127.0.0.1:{}", env.base_port + AMQP_OFFSET + i));
    }
    let mut deployment = Deployment { nodes: Nodes::Processes(processes), endpoints, dir: dir.clone() };
    for i in 1..=NODES {
        wait_for_port(env.base_port + AMQP_OFFSET + i, Duration::from_secs(120), "rabbitmq-server").await.inspect_err(
            |_| {
                let _ = deployment.check_running();
            },
        )?;
    }
    let (env2, dir2) = (env.clone(), dir.clone());
    tokio::task::spawn_blocking(move || -> anyhow::Result<()> {
        for i in 1..=NODES {
            ctl(&env2, &dir2, i, &["await_startup"])?;
        }
        for i in 2..=NODES {
            ctl(&env2, &dir2, i, &["stop_app"])?;
            ctl(&env2, &dir2, i, &["join_cluster", &node_name(1)])?;
            ctl(&env2, &dir2, i, &["start_app"])?;
        }
        Ok(())
    })
    .await
    .context("the RabbitMQ set-up task failed")??;
    for i in 2..=NODES {
        wait_for_port(env.base_port + AMQP_OFFSET + i, Duration::from_secs(120), "rabbitmq-server").await?;
    }
    deployment.check_running()?;
    Ok(deployment)
}

/// RabbitMQ with quorum queues or stream queues.
pub struct RabbitDriver {
    endpoints: Vec<String>,
    /// `quorum` or `stream`.
    queue_type: &'static str,
}

impl RabbitDriver {
    /// Remembers where the cluster is (each producer and consumer gets its own connection).
    pub async fn connect(deployment: &Deployment, queue_type: &'static str) -> anyhow::Result<Self> {
        Ok(Self { endpoints: deployment.endpoints.clone(), queue_type })
    }

    /// A channel on node `n % 3`'s connection (producers and consumers spread over the nodes;
    /// the queue leader forwards as needed, as a real client fleet would see).
    async fn channel(&self, n: usize) -> anyhow::Result<(Connection, Channel)> {
        let endpoint = &self.endpoints[n % self.endpoints.len()];
        let conn = Connection::connect(&format!("amqp://guest:guest@{endpoint}/%2f"), ConnectionProperties::default())
            .await
            .with_context(|| format!("cannot connect to RabbitMQ at {endpoint}"))?;
        let channel = conn.create_channel().await?;
        Ok((conn, channel))
    }
}

impl Driver for RabbitDriver {
    fn create_topic<'a>(&'a self, topic: &'a str, _partitions: u32) -> BoxFuture<'a, anyhow::Result<()>> {
        async move {
            let (_conn, channel) = self.channel(0).await?;
            let mut args = FieldTable::default();
            args.insert("x-queue-type".into(), AMQPValue::LongString(self.queue_type.into()));
            if self.queue_type == "quorum" {
                args.insert("x-quorum-initial-group-size".into(), AMQPValue::LongInt(3));
            } else {
                args.insert("x-initial-cluster-size".into(), AMQPValue::LongInt(3));
            }
            let options = QueueDeclareOptions { durable: true, ..QueueDeclareOptions::default() };
            channel.queue_declare(topic.into(), options, args).await?;
            Ok(())
        }
        .boxed()
    }

    fn producer<'a>(&'a self, topic: &'a str) -> BoxFuture<'a, anyhow::Result<Box<dyn BenchProducer>>> {
        async move {
            // Producers connect to the node that leads the queue: node 1 declared it.
            let (conn, channel) = self.channel(0).await?;
            channel.confirm_select(ConfirmSelectOptions::default()).await?;
            Ok(Box::new(RabbitProducer { _conn: conn, channel, queue: topic.to_string() }) as Box<dyn BenchProducer>)
        }
        .boxed()
    }

    fn consumer<'a>(
        &'a self,
        topic: &'a str,
        subscription: u32,
        member: u32,
        members: u32,
    ) -> BoxFuture<'a, anyhow::Result<Box<dyn BenchConsumer>>> {
        async move {
            if subscription > 0 {
                bail!("the RabbitMQ driver reads each queue with one subscription");
            }
            if self.queue_type == "stream" && members > 1 {
                bail!("a RabbitMQ stream gives every consumer every message: use one consumer per subscription");
            }
            let (conn, channel) = self.channel(member as usize).await?;
            channel.basic_qos(PREFETCH, BasicQosOptions::default()).await?;
            let mut args = FieldTable::default();
            if self.queue_type == "stream" {
                args.insert("x-stream-offset".into(), AMQPValue::LongString("first".into()));
            }
            let deliveries = channel
                .basic_consume(topic.into(), format!("c{member}").into(), BasicConsumeOptions::default(), args)
                .await?;
            Ok(Box::new(RabbitConsumer { _conn: conn, deliveries }) as Box<dyn BenchConsumer>)
        }
        .boxed()
    }
}

struct RabbitProducer {
    _conn: Connection,
    channel: Channel,
    queue: String,
}

impl BenchProducer for RabbitProducer {
    fn send(&self, _key: Option<Bytes>, payload: Bytes) -> BoxFuture<'_, anyhow::Result<AckFuture>> {
        async move {
            let confirm = self
                .channel
                .basic_publish(
                    "".into(),
                    self.queue.as_str().into(),
                    BasicPublishOptions::default(),
                    &payload,
                    BasicProperties::default().with_delivery_mode(2),
                )
                .await?;
            Ok(async move {
                let confirmation = confirm.await?;
                if !confirmation.is_ack() {
                    bail!("the broker refused the message (nack)");
                }
                Ok(())
            }
            .boxed())
        }
        .boxed()
    }

    fn close(self: Box<Self>) -> BoxFuture<'static, ()> {
        async move {
            let _ = self.channel.wait_for_confirms().await;
        }
        .boxed()
    }
}

struct RabbitConsumer {
    _conn: Connection,
    deliveries: lapin::Consumer,
}

impl BenchConsumer for RabbitConsumer {
    fn poll(&mut self) -> BoxFuture<'_, anyhow::Result<Vec<Bytes>>> {
        async move {
            let mut batch = Vec::new();
            match tokio::time::timeout(Duration::from_millis(200), self.deliveries.next()).await {
                Err(_) | Ok(None) => return Ok(Vec::new()),
                Ok(Some(d)) => batch.push(d?),
            }
            while batch.len() < usize::from(PREFETCH) {
                match self.deliveries.next().now_or_never() {
                    Some(Some(d)) => batch.push(d?),
                    _ => break,
                }
            }
            // One acknowledgement covers the batch.
            if let Some(last) = batch.last() {
                last.ack(BasicAckOptions { multiple: true }).await?;
            }
            Ok(batch.into_iter().map(|d| Bytes::from(d.data)).collect())
        }
        .boxed()
    }
}
