//! The systems the bench measures: Rill in three set-ups and each peer in the set-ups that
//! compare like with like. A [`Variant`] names one; its [`DeploymentKind`] says which processes
//! it needs, so variants that share a deployment run back to back on the same processes.

#[cfg(feature = "kafka")]
pub mod kafka;
pub mod nats;
pub mod rabbitmq;
pub mod redis;
pub mod rill;

use std::path::PathBuf;

use anyhow::{bail, Context};
use rill_client::Acks;

use rill_launcher::{ChildProcess, LocalCluster};

use crate::driver::Driver;

/// One system set-up, as reported.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Variant {
    /// Rill, 3 nodes, replication factor 3, min.insync.replicas 2, acks=all.
    RillAcksAllRf3,
    /// Rill, 3 nodes, replication factor 3, acks=1 (the leader's own sync).
    RillAcksLeaderRf3,
    /// Rill, one node, replication factor 1, acks=all.
    RillRf1,
    /// `RillAcksAllRf3` with plain TCP between the nodes (the insecure setting): what mutual TLS
    /// on the internal listener costs.
    RillAcksAllRf3Insecure,
    /// `RillAcksAllRf3` through the Kafka listener with librdkafka (the `kafka` feature), on the
    /// same processes: what the Kafka protocol costs against gRPC.
    RillKafkaAcksAllRf3,
    /// NATS JetStream, 3 nodes, stream replicas 3, file storage, default lazy sync.
    NatsR3Lazy,
    /// NATS JetStream, 3 nodes, stream replicas 3, file storage, `sync_interval: always`.
    NatsR3SyncAlways,
    /// RabbitMQ, 3 nodes, quorum queue, publisher confirms.
    RabbitMqQuorum,
    /// RabbitMQ, 3 nodes, stream queue with 3 replicas, publisher confirms.
    RabbitMqStream,
    /// Redis Streams, one node, AOF `appendfsync everysec`.
    RedisEverysec,
    /// Redis Streams, one node, AOF `appendfsync always`.
    RedisAlways,
}

/// The processes a variant runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeploymentKind {
    /// `rill-server` processes.
    Rill {
        /// Node count.
        nodes: u64,
        /// Mutual TLS between the nodes (the default); `false`: the insecure setting.
        internal_tls: bool,
    },
    /// `nats-server` processes.
    Nats {
        /// `sync_interval: always`.
        sync_always: bool,
    },
    /// Three RabbitMQ nodes.
    RabbitMq,
    /// One `redis-server`.
    Redis {
        /// `appendfsync always` (else `everysec`).
        always: bool,
    },
}

/// Peer families accepted by `--peers`.
pub const PEERS: [&str; 3] = ["nats", "rabbitmq", "redis"];

impl Variant {
    /// Rill's variants, best durability first.
    pub const RILL: [Variant; 3] = [Variant::RillAcksAllRf3, Variant::RillAcksLeaderRf3, Variant::RillRf1];

    /// Every variant in report order.
    pub const ALL: [Variant; 11] = [
        Variant::RillAcksAllRf3,
        Variant::RillAcksLeaderRf3,
        Variant::RillRf1,
        Variant::RillAcksAllRf3Insecure,
        Variant::RillKafkaAcksAllRf3,
        Variant::NatsR3Lazy,
        Variant::NatsR3SyncAlways,
        Variant::RabbitMqQuorum,
        Variant::RabbitMqStream,
        Variant::RedisEverysec,
        Variant::RedisAlways,
    ];

    /// Report name.
    pub fn name(self) -> &'static str {
        match self {
            Variant::RillAcksAllRf3 => "rill-acks-all-rf3",
            Variant::RillAcksLeaderRf3 => "rill-acks-1-rf3",
            Variant::RillRf1 => "rill-rf1",
            Variant::RillAcksAllRf3Insecure => "rill-acks-all-rf3-insecure",
            Variant::RillKafkaAcksAllRf3 => "rill-kafka-acks-all-rf3",
            Variant::NatsR3Lazy => "nats-r3-lazy",
            Variant::NatsR3SyncAlways => "nats-r3-sync",
            Variant::RabbitMqQuorum => "rabbitmq-quorum",
            Variant::RabbitMqStream => "rabbitmq-stream-r3",
            Variant::RedisEverysec => "redis-aof-everysec",
            Variant::RedisAlways => "redis-aof-always",
        }
    }

    /// What an acknowledgement means, for the reader of a report.
    pub fn durability(self) -> &'static str {
        match self {
            Variant::RillAcksAllRf3 => "3 replicas, fsync on a majority before ack",
            Variant::RillAcksLeaderRf3 => "fsync on the leader before ack, replicated after",
            Variant::RillRf1 => "1 replica, fsync before ack",
            Variant::RillAcksAllRf3Insecure => "as rill-acks-all-rf3, plain TCP between nodes (no mTLS)",
            Variant::RillKafkaAcksAllRf3 => "as rill-acks-all-rf3, through the Kafka listener (librdkafka)",
            Variant::NatsR3Lazy => "3 replicas in memory on a majority, fsync every 2 min (lazy)",
            Variant::NatsR3SyncAlways => "3 replicas, fsync on a majority before ack",
            Variant::RabbitMqQuorum => "3 replicas (Raft), fsync on a majority before confirm",
            Variant::RabbitMqStream => "3 replicas, written to the OS (no fsync) on a majority before confirm",
            Variant::RedisEverysec => "1 node, fsync every second",
            Variant::RedisAlways => "1 node, fsync before reply",
        }
    }

    /// The peer family (`nats`, `rabbitmq`, `redis`), or `rill`.
    pub fn family(self) -> &'static str {
        match self.deployment() {
            DeploymentKind::Rill { .. } => "rill",
            DeploymentKind::Nats { .. } => "nats",
            DeploymentKind::RabbitMq => "rabbitmq",
            DeploymentKind::Redis { .. } => "redis",
        }
    }

    /// The processes it runs on.
    pub fn deployment(self) -> DeploymentKind {
        match self {
            Variant::RillAcksAllRf3 | Variant::RillAcksLeaderRf3 | Variant::RillKafkaAcksAllRf3 => {
                DeploymentKind::Rill { nodes: 3, internal_tls: true }
            }
            Variant::RillRf1 => DeploymentKind::Rill { nodes: 1, internal_tls: true },
            Variant::RillAcksAllRf3Insecure => DeploymentKind::Rill { nodes: 3, internal_tls: false },
            Variant::NatsR3Lazy => DeploymentKind::Nats { sync_always: false },
            Variant::NatsR3SyncAlways => DeploymentKind::Nats { sync_always: true },
            Variant::RabbitMqQuorum | Variant::RabbitMqStream => DeploymentKind::RabbitMq,
            Variant::RedisEverysec => DeploymentKind::Redis { always: false },
            Variant::RedisAlways => DeploymentKind::Redis { always: true },
        }
    }

    /// Parses a report name.
    pub fn parse(name: &str) -> anyhow::Result<Variant> {
        Variant::ALL.into_iter().find(|v| v.name() == name).with_context(|| {
            let names: Vec<&str> = Variant::ALL.iter().map(|v| v.name()).collect();
            format!("unknown system {name}; known: {}", names.join(", "))
        })
    }

    /// The variants of the peer families in `peers` (`nats`, `rabbitmq`, `redis`).
    pub fn of_peers(peers: &[String]) -> anyhow::Result<Vec<Variant>> {
        for p in peers {
            if !PEERS.contains(&p.as_str()) {
                bail!("unknown peer {p}; known: {}", PEERS.join(", "));
            }
        }
        Ok(Variant::ALL.into_iter().filter(|v| v.family() != "rill" && peers.iter().any(|p| p == v.family())).collect())
    }

    /// Connects a driver for this variant to a running deployment of its kind.
    pub async fn connect(self, deployment: &Deployment, env: &Env) -> anyhow::Result<Box<dyn Driver>> {
        let idem = env.rill_idempotence;
        Ok(match self {
            Variant::RillAcksAllRf3 => Box::new(rill::RillDriver::connect(deployment, Acks::All, 3, idem).await?),
            Variant::RillAcksLeaderRf3 => Box::new(rill::RillDriver::connect(deployment, Acks::Leader, 3, idem).await?),
            Variant::RillRf1 => Box::new(rill::RillDriver::connect(deployment, Acks::All, 1, idem).await?),
            Variant::RillAcksAllRf3Insecure => {
                Box::new(rill::RillDriver::connect(deployment, Acks::All, 3, idem).await?)
            }
            #[cfg(feature = "kafka")]
            Variant::RillKafkaAcksAllRf3 => Box::new(kafka::KafkaDriver::connect(deployment).await?),
            #[cfg(not(feature = "kafka"))]
            Variant::RillKafkaAcksAllRf3 => bail!(
                "{} needs librdkafka: build rill-bench with `cargo build --release -p rill-bench --features kafka`",
                self.name()
            ),
            Variant::NatsR3Lazy | Variant::NatsR3SyncAlways => Box::new(nats::NatsDriver::connect(deployment).await?),
            Variant::RabbitMqQuorum => Box::new(rabbitmq::RabbitDriver::connect(deployment, "quorum").await?),
            Variant::RabbitMqStream => Box::new(rabbitmq::RabbitDriver::connect(deployment, "stream").await?),
            Variant::RedisEverysec | Variant::RedisAlways => Box::new(redis::RedisDriver::connect(deployment).await?),
        })
    }
}

/// Where deployments put their data and which ports they use.
#[derive(Debug, Clone)]
pub struct Env {
    /// Parent of every deployment's data (on disk, not tmpfs: fsync must cost what it costs).
    pub data_dir: PathBuf,
    /// First loopback port; each system takes ports from here.
    pub base_port: u16,
    /// The `rill-server` binary.
    pub rill_server: PathBuf,
    /// Rill producers deduplicate retries (the client's default; applies with acks=all).
    pub rill_idempotence: bool,
    /// The directories this run created under `data_dir` (removed if it stops early).
    pub created: crate::disk::CreatedDirs,
}

impl Env {
    /// An empty directory `data_dir/name` (removed first if it exists).
    pub fn fresh_dir(&self, name: &str) -> anyhow::Result<PathBuf> {
        let dir = self.data_dir.join(name);
        if dir.exists() {
            std::fs::remove_dir_all(&dir).with_context(|| format!("cannot clear {}", dir.display()))?;
        }
        std::fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        self.created.record(&dir);
        Ok(dir)
    }
}

/// The processes of a deployment.
pub enum Nodes {
    /// A Rill cluster, started by the launcher.
    Rill(LocalCluster),
    /// A peer's server processes, in node order (stopped when dropped).
    Processes(Vec<ChildProcess>),
}

/// Running server processes and where clients reach them.
pub struct Deployment {
    /// The processes.
    pub nodes: Nodes,
    /// Client endpoints (`host:port`), in node order.
    pub endpoints: Vec<String>,
    /// Data and logs.
    pub dir: PathBuf,
}

impl Deployment {
    /// Starts the processes of `kind`.
    pub async fn start(kind: DeploymentKind, env: &Env) -> anyhow::Result<Deployment> {
        match kind {
            DeploymentKind::Rill { nodes, internal_tls } => {
                let name = if internal_tls { format!("rill-{nodes}n") } else { format!("rill-{nodes}n-insecure") };
                rill::start(env, &name, nodes, internal_tls).await
            }
            DeploymentKind::Nats { sync_always } => nats::start(env, sync_always).await,
            DeploymentKind::RabbitMq => rabbitmq::start(env).await,
            DeploymentKind::Redis { always } => redis::start(env, always).await,
        }
    }

    /// CPU seconds used so far by each process (and its children), in node order.
    pub fn cpu_seconds(&self) -> Vec<(String, f64)> {
        let cpu = |p: &ChildProcess| (p.name().to_string(), p.pid().map_or(0.0, crate::process::tree_cpu_seconds));
        match &self.nodes {
            Nodes::Rill(cluster) => cluster.processes().map(|(_, p)| cpu(p)).collect(),
            Nodes::Processes(processes) => processes.iter().map(cpu).collect(),
        }
    }

    /// Fails when a process has exited.
    pub fn check_running(&mut self) -> anyhow::Result<()> {
        match &mut self.nodes {
            Nodes::Rill(cluster) => cluster.check_running(),
            Nodes::Processes(processes) => processes.iter_mut().try_for_each(ChildProcess::check_running),
        }
    }

    /// The Rill cluster of a Rill deployment.
    pub fn rill(&mut self) -> anyhow::Result<&mut LocalCluster> {
        match &mut self.nodes {
            Nodes::Rill(cluster) => Ok(cluster),
            Nodes::Processes(_) => bail!("not a Rill deployment"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_peers_select_their_variants() -> anyhow::Result<()> {
        for v in Variant::ALL {
            assert_eq!(Variant::parse(v.name())?, v);
        }
        let peers = Variant::of_peers(&["redis".to_string(), "nats".to_string()])?;
        assert_eq!(
            peers,
            vec![Variant::NatsR3Lazy, Variant::NatsR3SyncAlways, Variant::RedisEverysec, Variant::RedisAlways]
        );
        assert!(Variant::of_peers(&["kafka".to_string()]).is_err());
        Ok(())
    }
}
