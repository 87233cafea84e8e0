//! [`SimCluster`]: a simulated Rill cluster under madsim — nodes, their disks, client hosts, and
//! the levers faults pull.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use madsim::net::NetSim;
use madsim::runtime::{Handle, NodeHandle};
use rill_client::Client;
use rill_raft::NodeId;
use rill_server::config::{RebalanceTiming, TransactionalIdExpiration};
use rill_server::{Config, Node};
use rill_storage::MemEngine;

/// The client port every simulated node listens on (each node has its own IP).
pub const PORT: u16 = 7001;
/// The internal (node-to-node) port every simulated node listens on.
pub const INTERNAL_PORT: u16 = 7101;

fn server_ip(id: NodeId) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, id as u8))
}

type LiveNodes = Arc<Mutex<BTreeMap<NodeId, Arc<Node>>>>;

/// Options for [`SimCluster::start_with`].
#[derive(Debug, Clone, Copy)]
pub struct SimOptions {
    /// Nodes 1..=n.
    pub nodes: u64,
    /// Client hosts (workload processes each get their own).
    pub client_hosts: u32,
    /// Simulated fsync time of every disk.
    pub sync_latency: Duration,
    /// `[transactions] transactional-id-expiration`, checked every half of it (`None`: the
    /// server's default, 7 days).
    pub transactional_id_expiration: Option<Duration>,
    /// Consumer group members' session timeout and heartbeat interval (`None`: 6 s and 500 ms,
    /// so members expire within a run's fault phase).
    pub groups: Option<rill_coordinator::groups::Timeouts>,
    /// `[limits]` producer table settings (`None`: the server's defaults).
    pub producer_limits: Option<rill_broker::producers::ProducerLimits>,
    /// Partitions of `__transaction_state` (`None`: 2).
    pub transaction_state_partitions: Option<u32>,
}

/// A simulated cluster: nodes at 10.0.0.<id> (clients on :7001, nodes on :7101), client hosts at
/// 10.0.1.<n>.
pub struct SimCluster {
    handle: Handle,
    nodes: BTreeMap<NodeId, NodeHandle>,
    disks: BTreeMap<NodeId, MemEngine>,
    live: LiveNodes,
    incarnations: Arc<Mutex<BTreeMap<NodeId, u32>>>,
    clients: Vec<NodeHandle>,
}

impl SimCluster {
    /// Boots `n` nodes with one client host and instant disks.
    pub fn start(n: u64) -> Self {
        Self::start_with(SimOptions {
            nodes: n,
            client_hosts: 1,
            sync_latency: Duration::ZERO,
            transactional_id_expiration: None,
            groups: None,
            producer_limits: None,
            transaction_state_partitions: None,
        })
    }

    /// Boots a cluster through `rill_server::start`, as the binary does.
    pub fn start_with(opts: SimOptions) -> Self {
        let handle = Handle::current();
        let members: BTreeMap<NodeId, String> =
            (1..=opts.nodes).map(|id| (id, format!("{}:{INTERNAL_PORT}", server_ip(id)))).collect();
        let live: LiveNodes = Arc::default();
        let incarnations: Arc<Mutex<BTreeMap<NodeId, u32>>> = Arc::default();
        let mut nodes = BTreeMap::new();
        let mut disks = BTreeMap::new();
        for id in 1..=opts.nodes {
            let disk = MemEngine::new();
            disks.insert(id, disk.clone());
            let members = members.clone();
            let live = live.clone();
            let incarnations = incarnations.clone();
            let sync_latency = opts.sync_latency;
            let transactional_id_expiration = opts.transactional_id_expiration;
            let producer_limits = opts.producer_limits;
            let transaction_state_partitions = opts.transaction_state_partitions.unwrap_or(2);
            let group_timeouts = opts.groups;
            let node = handle
                .create_node()
                .name(format!("node-{id}"))
                .ip(server_ip(id))
                .init(move || {
                    let disk = disk.clone();
                    let members = members.clone();
                    let live = live.clone();
                    *incarnations.lock().unwrap_or_else(|p| p.into_inner()).entry(id).or_insert(0) += 1;
                    async move {
                        let listen = std::net::SocketAddr::new(server_ip(id), PORT);
                        let mut config = match Config::for_member(id, listen, members, format!("/sim/node-{id}").into())
                        {
                            Ok(c) => c,
                            Err(e) => panic!("bad simulated config: {e}"),
                        };
                        config.sync_latency = sync_latency;
                        // Fault phases last 15-20 s: balance leaders often enough to hand over
                        // under faults.
                        config.rebalance_timing = RebalanceTiming {
                            check_every: Duration::from_secs(1),
                            min_leadership: Duration::from_secs(2),
                        };
                        // Workloads pause between operations for well under a second: quiesce
                        // idle partitions after 500 ms so the fault phase exercises quiescence,
                        // waking and failover from it.
                        config.raft.quiesce_after_ms = 500;
                        // Two partitions per internal topic keep each run's groups few; state
                        // partitions snapshot every 20 entries and purge their logs behind it
                        // but 5, so runs purge and install their snapshots.
                        config.consumer_offsets_partitions = 2;
                        config.transaction_state_partitions = transaction_state_partitions;
                        config.state_snapshot_every_entries = 20;
                        config.state_log_kept_entries = 5;
                        // Record partitions snapshot and purge below their log start as soon
                        // as it moves, so runs install snapshots that carry records.
                        config.record_purge_every = Duration::from_millis(500);
                        // Consumer group members expire within a run's fault phase.
                        config.groups = group_timeouts.unwrap_or(rill_coordinator::groups::Timeouts {
                            session_ms: 6_000,
                            heartbeat_interval_ms: 500,
                        });
                        if let Some(limits) = producer_limits {
                            config.producer_limits = limits;
                        }
                        if let Some(expiration) = transactional_id_expiration {
                            config.transactional_id_expiration =
                                TransactionalIdExpiration { expiration, check_every: expiration / 2 };
                        }
                        let on_ready = move |node: Arc<Node>| {
                            live.lock().unwrap_or_else(|p| p.into_inner()).insert(id, node);
                        };
                        if let Err(e) =
                            rill_server::start(config, Arc::new(disk), std::future::pending(), on_ready).await
                        {
                            tracing::error!(node = id, error = %e, "simulated node failed");
                        }
                    }
                })
                .build();
            nodes.insert(id, node);
        }
        let clients = (1..=opts.client_hosts.max(1))
            .map(|n| {
                handle
                    .create_node()
                    .name(format!("client-{n}"))
                    .ip(IpAddr::V4(Ipv4Addr::new(10, 0, 1, n as u8)))
                    .build()
            })
            .collect();
        Self { handle, nodes, disks, live, incarnations, clients }
    }

    /// Bootstrap addresses of every node.
    pub fn bootstrap(&self) -> Vec<String> {
        self.nodes.keys().map(|id| self.address(*id)).collect()
    }

    /// Client address of node `id` (for a client that must reach only some nodes).
    pub fn address(&self, id: NodeId) -> String {
        format!("{}:{PORT}", server_ip(id))
    }

    /// Node ids.
    pub fn ids(&self) -> Vec<NodeId> {
        self.nodes.keys().copied().collect()
    }

    /// Client host `n` (0-based), for running workload processes.
    pub fn client_host(&self, n: usize) -> &NodeHandle {
        &self.clients[n % self.clients.len()]
    }

    /// Runs `f` on the first client host (simulated RPCs must come from a node with an address).
    pub async fn on_client<F, T>(&self, f: F) -> T
    where
        F: std::future::Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        match self.clients[0].spawn(f).await {
            Ok(v) => v,
            Err(e) => panic!("client task failed: {e}"),
        }
    }

    /// Runs `f` on node `id`'s simulated host, as node code (for work a test does inside a node,
    /// such as appending what only the cluster writes).
    pub async fn on_node<F, T>(&self, id: NodeId, f: F) -> T
    where
        F: std::future::Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        let Some(node) = self.nodes.get(&id) else { panic!("no node {id}") };
        match node.spawn(f).await {
            Ok(v) => v,
            Err(e) => panic!("task on node {id} failed: {e}"),
        }
    }

    /// Creates `topic` (RF 3) from client host 0, retrying until the cluster takes it, then
    /// waits until it and the internal topic `internal` have a leader for every partition.
    pub async fn create_topic_and_wait(&self, topic: &'static str, partitions: u32, internal: &'static str) {
        let admin = self.client().await;
        self.on_client(async move {
            loop {
                match admin.create_topic(topic, partitions, 3, &[]).await {
                    Ok(_) => break,
                    Err(e) if e.code() == Some(rill_client::ErrorCode::TopicAlreadyExists) => break,
                    Err(_) => rill_rt::sleep(Duration::from_millis(200)).await,
                }
            }
            for t in [topic, internal] {
                admin
                    .wait_for_leaders(t, crate::run::LIVENESS_BOUND)
                    .await
                    .expect("setup: every partition has a leader");
            }
        })
        .await;
    }

    /// A connected client, made on the first client host (retries until the cluster answers).
    pub async fn client(&self) -> Client {
        let bootstrap = self.bootstrap();
        self.on_client(connect(bootstrap)).await
    }

    /// The running node `id`, if it is up and serving.
    pub fn node(&self, id: NodeId) -> Option<Arc<Node>> {
        self.live.lock().unwrap_or_else(|p| p.into_inner()).get(&id).cloned()
    }

    /// How many times node `id` has been started.
    pub fn incarnation(&self, id: NodeId) -> u32 {
        self.incarnations.lock().unwrap_or_else(|p| p.into_inner()).get(&id).copied().unwrap_or(0)
    }

    /// Node `id`'s disk.
    pub fn disk(&self, id: NodeId) -> Option<&MemEngine> {
        self.disks.get(&id)
    }

    /// Crashes node `id` (its process dies; the OS keeps its unsynced writes).
    pub fn kill(&self, id: NodeId) {
        self.live.lock().unwrap_or_else(|p| p.into_inner()).remove(&id);
        if let Some(n) = self.nodes.get(&id) {
            self.handle.kill(n.id());
        }
    }

    /// Crashes node `id` and cuts its power: of its unsynced writes only the first `keep`
    /// batches reach the disk.
    pub fn power_fail(&self, id: NodeId, keep: usize) {
        self.kill(id);
        if let Some(d) = self.disks.get(&id) {
            d.power_fail(keep);
        }
    }

    /// Unsynced batches on node `id`'s disk.
    pub fn unsynced_batches(&self, id: NodeId) -> usize {
        self.disks.get(&id).map_or(0, MemEngine::unsynced_batches)
    }

    /// Starts node `id` again on its disk.
    pub fn restart(&self, id: NodeId) {
        if let Some(n) = self.nodes.get(&id) {
            self.handle.restart(n.id());
        }
    }

    /// Freezes node `id` (no task of it runs) until [`SimCluster::resume`].
    pub fn pause(&self, id: NodeId) {
        if let Some(n) = self.nodes.get(&id) {
            self.handle.pause(n.id());
        }
    }

    /// Unfreezes node `id`.
    pub fn resume(&self, id: NodeId) {
        if let Some(n) = self.nodes.get(&id) {
            self.handle.resume(n.id());
        }
    }

    /// Freezes client host `n` (every task on it, a consumer's heartbeats too) until
    /// [`SimCluster::resume_client`].
    pub fn pause_client(&self, n: usize) {
        self.handle.pause(self.client_host(n).id());
    }

    /// Unfreezes client host `n`.
    pub fn resume_client(&self, n: usize) {
        self.handle.resume(self.client_host(n).id());
    }

    /// Drops every message from server `from` to server `to`.
    pub fn cut_link(&self, from: NodeId, to: NodeId) {
        if let (Some(a), Some(b)) = (self.nodes.get(&from), self.nodes.get(&to)) {
            NetSim::current().clog_link(a.id(), b.id());
        }
    }

    /// Drops every message between every client host and server `id`, both ways.
    pub fn cut_clients(&self, id: NodeId) {
        if let Some(n) = self.nodes.get(&id) {
            let net = NetSim::current();
            for c in &self.clients {
                net.clog_link(c.id(), n.id());
                net.clog_link(n.id(), c.id());
            }
        }
    }

    /// Sets the share of messages dropped.
    pub fn set_packet_loss(&self, rate: f64) {
        NetSim::current().update_config(|c| c.packet_loss_rate = rate);
    }

    /// Sets the range of message latency.
    pub fn set_latency(&self, range: std::ops::Range<Duration>) {
        NetSim::current().update_config(|c| c.send_latency = range);
    }

    /// Removes every network fault: all links open, no loss, default latency.
    pub fn heal_network(&self) {
        let net = NetSim::current();
        let hosts: Vec<_> = self.nodes.values().chain(self.clients.iter()).map(|h| h.id()).collect();
        for a in &hosts {
            for b in &hosts {
                net.unclog_link(*a, *b);
            }
        }
        net.update_config(|c| {
            c.packet_loss_rate = 0.0;
            c.send_latency = Duration::from_millis(1)..Duration::from_millis(10);
        });
    }
}

/// Connects a client, retrying until the cluster answers.
pub async fn connect(bootstrap: Vec<String>) -> Client {
    loop {
        match Client::connect(&bootstrap).await {
            Ok(c) => return c,
            Err(_) => madsim::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Installs a log subscriber once (`RUST_LOG` filter, default warnings only).
pub fn init_logs() {
    let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into());
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
}
