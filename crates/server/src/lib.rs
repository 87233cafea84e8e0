//! A Rill node.
//!
//! ```text
//!   main.rs ──► Args::load ──► open RocksDB ──► start(config, engine, shutdown)
//!   chaos/  ──────────────────► MemEngine  ──┘        │
//!                                                     ├─ Node::start: group 0 + reconciler
//!                                                     ├─ failover, balance: the node's loops
//!                                                     ├─ Coordinators::start: coordinator shards
//!                                                     └─ api::serve: Records, Admin, Groups,
//!                                                          Transactions (public) → service::Service
//!                                                          Kafka listener (kafka::) → service::Service
//!                                                          RaftTransport, Cluster (internal)
//! ```
//!
//! * [`config`]: the typed configuration (TOML, `RILL_*` environment, flags).
//! * [`node`]: [`Node`] — metadata group, partition replicas, reconciler, metadata proposals.
//! * [`join`]: adding a node to a running cluster (`--join`).
//! * [`balance`]: preferred-leader balancing.
//! * [`coordinators`]: the coordinator shards — for each internal partition this node leads, its
//!   coordinator's leader-local state and timers (group sessions and held heartbeats; the
//!   transactions being finished, their timeouts, idle ids).
//! * [`txn_verify`]: a partition leader verifying a transactional batch with the coordinator
//!   (KIP-890) before appending it.
//! * [`txn_markers`]: finishing a transaction — markers into every partition, then completion —
//!   and writing markers on a partition's leader.
//! * [`dead_letters`]: where record partitions send share groups' dead-letter copies (the
//!   dead-letter partition's leader, here or over `Cluster.WriteDeadLetter`).
//! * [`failover`]: a designated follower stands for election as soon as a silent leader's lease
//!   has run out.
//! * [`service`]: the service layer — every public operation once, for every listener, with
//!   the request context and authorization decided per resource.
//! * [`api`]: the gRPC listeners: public handlers that translate to and from [`service`], and
//!   the internal services.
//! * [`kafka`]: the Kafka wire-protocol listener, translating Kafka's requests to and from
//!   [`service`].
//! * [`errors`]: the one mapping from internal errors to Rill's error codes (and gRPC statuses).
//! * [`recovery`]: after a storage failure, waiting until the data directory takes writes again
//!   (the binary then restarts itself from its durable state).
//!
//! The simulation boots nodes through the same [`start`] the binary uses; only the engine differs.

pub mod api;
pub mod balance;
pub mod config;
pub mod coordinators;
pub mod dead_letters;
pub mod error;
pub mod errors;
pub mod failover;
pub mod join;
pub mod kafka;
pub mod node;
#[cfg(not(madsim))]
pub mod recovery;
pub mod service;
pub mod txn_markers;
pub mod txn_verify;

use std::future::Future;
use std::sync::Arc;

pub use config::{Args, Config};
pub use error::{Error, Result};
pub use node::Node;
use rill_storage::Engine;

/// Runs a node until `shutdown` completes: starts its Raft groups, serves gRPC, then hands the
/// partitions it leads to in-sync replicas (while still serving, so they can win their
/// elections), stops accepting requests, lets in-flight ones finish and stops the groups.
///
/// `on_ready` receives the node once it is serving (tests and the simulation use it to look
/// inside); pass `|_| {}` otherwise.
pub async fn start(
    config: Config,
    engine: Arc<dyn Engine>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    on_ready: impl FnOnce(Arc<Node>),
) -> Result<()> {
    let node = Node::start(config, engine).await?;
    // The node's own loops, beside it rather than inside `Node` (which they use): elections
    // after a silent leader's lease, and handing leadership back to preferred replicas.
    rill_rt::spawn(failover::run(Arc::downgrade(&node)));
    if node.config().auto_leader_rebalance {
        rill_rt::spawn(balance::run(Arc::downgrade(&node)));
    }
    let coordinators = coordinators::Coordinators::start(&node);
    on_ready(node.clone());
    // A joining node stops again when the cluster refuses it for good.
    let refused = Arc::new(std::sync::Mutex::new(None::<String>));
    let stop = {
        // Boxed: the join future is large, and this one is polled inside the server's future.
        let join = node.config().join.then(|| Box::pin(join::join_cluster(Arc::downgrade(&node))));
        let refused = refused.clone();
        let node = node.clone();
        async move {
            match join {
                None => shutdown.await,
                Some(join) => {
                    tokio::pin!(shutdown);
                    tokio::select! {
                        _ = &mut shutdown => {}
                        outcome = join => match outcome {
                            Ok(()) => shutdown.await,
                            Err(reason) => {
                                *refused.lock().unwrap_or_else(|p| p.into_inner()) = Some(reason);
                                return;
                            }
                        },
                    }
                }
            }
            balance::hand_over_all(&node).await;
        }
    };
    let served = api::serve(node.clone(), coordinators, stop).await;
    tracing::info!(node = node.id(), "stopped serving; stopping raft groups");
    node.stop().await;
    let refused = refused.lock().unwrap_or_else(|p| p.into_inner()).take();
    match refused {
        Some(reason) => Err(Error::JoinRefused(reason)),
        None => served,
    }
}

/// Opens the node's RocksDB engine in `config.data_dir`, tuned by `[storage]`.
#[cfg(all(not(madsim), feature = "rocksdb"))]
pub fn open_engine(config: &Config) -> Result<Arc<dyn Engine>> {
    std::fs::create_dir_all(&config.data_dir)
        .map_err(|e| Error::Config(format!("cannot create data-dir {}: {e}", config.data_dir.display())))?;
    let mut engine_config = match config.storage.segment_bytes {
        Some(segment_bytes) => rill_storage_rocks::EngineConfig::with_segment_bytes(segment_bytes),
        None => rill_storage_rocks::EngineConfig::default(),
    };
    if let Some(rate) = config.storage.gc_bytes_per_second {
        engine_config.gc_bytes_per_second = rate;
    }
    let engine = rill_storage_rocks::RocksEngine::open_with(config.data_dir.join("db"), engine_config)?;
    Ok(Arc::new(engine))
}
