//! Redis Streams: one `redis-server` with the append-only file on, `XADD` to produce,
//! `XREADGROUP … NOACK` to consume (a group per subscription, like a consumer group that does
//! not commit; Rill's consumers do not commit either).

use std::process::Command;
use std::time::Duration;

use anyhow::Context;
use bytes::Bytes;
use futures::future::BoxFuture;
use futures::FutureExt;
use redis::aio::MultiplexedConnection;
use redis::streams::StreamReadReply;
use redis::Value;

use super::{Deployment, Env, Nodes};
use crate::driver::{AckFuture, BenchConsumer, BenchProducer, Driver};
use crate::process::{find_program, wait_for_port};
use rill_launcher::ChildProcess;

/// Port offset from `Env::base_port`.
const PORT_OFFSET: u16 = 30;

/// Starts `redis-server` with AOF `always` or `everysec`.
pub async fn start(env: &Env, always: bool) -> anyhow::Result<Deployment> {
    let policy = if always { "always" } else { "everysec" };
    let dir = env.fresh_dir(&format!("redis-{policy}"))?;
    let bin = find_program("redis-server", &[]).context("redis-server not found (apt-get install redis-server)")?;
    let port = env.base_port + PORT_OFFSET;
    let mut cmd = Command::new(bin);
    cmd.args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--protected-mode", "no"])
        .args(["--appendonly", "yes", "--appendfsync", policy, "--save", ""])
        .arg("--dir")
        .arg(&dir);
    let process = ChildProcess::spawn("redis", cmd, &dir.join("redis.log"))?;
    wait_for_port(port, Duration::from_secs(30), "redis-server").await?;
    Ok(Deployment { nodes: Nodes::Processes(vec![process]), endpoints: vec![format!("127.0.0.1:{port}")], dir })
}

/// Redis Streams.
pub struct RedisDriver {
    client: redis::Client,
}

impl RedisDriver {
    /// Connects to the deployment's server.
    pub async fn connect(deployment: &Deployment) -> anyhow::Result<Self> {
        let endpoint = deployment.endpoints.first().context("no redis endpoint")?;
        let client = redis::Client::open(format!("redis://{endpoint}/"))?;
        Ok(Self { client })
    }

    async fn connection(&self) -> anyhow::Result<MultiplexedConnection> {
        self.client.get_multiplexed_async_connection().await.context("cannot connect to redis")
    }
}

impl Driver for RedisDriver {
    fn create_topic<'a>(&'a self, topic: &'a str, _partitions: u32) -> BoxFuture<'a, anyhow::Result<()>> {
        async move {
            let mut conn = self.connection().await?;
            redis::cmd("DEL").arg(topic).query_async::<Value>(&mut conn).await?;
            Ok(())
        }
        .boxed()
    }

    fn producer<'a>(&'a self, topic: &'a str) -> BoxFuture<'a, anyhow::Result<Box<dyn BenchProducer>>> {
        async move {
            let conn = self.connection().await?;
            Ok(Box::new(RedisProducer { conn, key: topic.to_string() }) as Box<dyn BenchProducer>)
        }
        .boxed()
    }

    fn consumer<'a>(
        &'a self,
        topic: &'a str,
        subscription: u32,
        member: u32,
        _members: u32,
    ) -> BoxFuture<'a, anyhow::Result<Box<dyn BenchConsumer>>> {
        async move {
            let mut conn = self.connection().await?;
            let group = format!("sub-{subscription}");
            let created = redis::cmd("XGROUP")
                .arg("CREATE")
                .arg(topic)
                .arg(&group)
                .arg("0")
                .arg("MKSTREAM")
                .query_async::<Value>(&mut conn)
                .await;
            if let Err(e) = created {
                // Another member of the subscription created it first.
                if e.code() != Some("BUSYGROUP") {
                    return Err(e.into());
                }
            }
            Ok(Box::new(RedisConsumer { conn, key: topic.to_string(), group, name: format!("c{member}") })
                as Box<dyn BenchConsumer>)
        }
        .boxed()
    }
}

struct RedisProducer {
    conn: MultiplexedConnection,
    key: String,
}

impl BenchProducer for RedisProducer {
    fn send(&self, _key: Option<Bytes>, payload: Bytes) -> BoxFuture<'_, anyhow::Result<AckFuture>> {
        // The multiplexed connection pipelines concurrent commands on one socket.
        let mut conn = self.conn.clone();
        let key = self.key.clone();
        let ack = async move {
            redis::cmd("XADD")
                .arg(&key)
                .arg("*")
                .arg("d")
                .arg(payload.as_ref())
                .query_async::<Value>(&mut conn)
                .await?;
            Ok(())
        }
        .boxed();
        async move { Ok(ack) }.boxed()
    }

    fn close(self: Box<Self>) -> BoxFuture<'static, ()> {
        async {}.boxed()
    }
}

struct RedisConsumer {
    conn: MultiplexedConnection,
    key: String,
    group: String,
    name: String,
}

impl BenchConsumer for RedisConsumer {
    fn poll(&mut self) -> BoxFuture<'_, anyhow::Result<Vec<Bytes>>> {
        async move {
            let reply: Option<StreamReadReply> = redis::cmd("XREADGROUP")
                .arg("GROUP")
                .arg(&self.group)
                .arg(&self.name)
                .arg("COUNT")
                .arg(2000)
                .arg("BLOCK")
                .arg(100)
                .arg("NOACK")
                .arg("STREAMS")
                .arg(&self.key)
                .arg(">")
                .query_async(&mut self.conn)
                .await?;
            let mut out = Vec::new();
            for stream in reply.map(|r| r.keys).unwrap_or_default() {
                for entry in stream.ids {
                    if let Some(Value::BulkString(data)) = entry.map.get("d") {
                        out.push(Bytes::from(data.clone()));
                    }
                }
            }
            Ok(out)
        }
        .boxed()
    }
}
