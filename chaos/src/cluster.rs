//! [`SimCluster`]: a simulated Rill cluster under madsim.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use madsim::runtime::{Handle, NodeHandle};
use rill_client::Client;
use rill_raft::NodeId;
use rill_server::{Config, Node};
use rill_storage::MemEngine;

/// The gRPC port every simulated node listens on (each node has its own IP).
pub const PORT: u16 = 7001;

fn ip_of(id: NodeId) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, id as u8))
}

type LiveNodes = Arc<Mutex<BTreeMap<NodeId, Arc<Node>>>>;

/// A simulated cluster: nodes 1..=n at 10.0.0.<id>:7001 and a client host at 10.0.1.1.
pub struct SimCluster {
    handle: Handle,
    nodes: BTreeMap<NodeId, NodeHandle>,
    disks: BTreeMap<NodeId, MemEngine>,
    live: LiveNodes,
    client_host: NodeHandle,
}

impl SimCluster {
    /// Boots `n` nodes through `rill_server::start`.
    pub fn start(n: u64) -> Self {
        let handle = Handle::current();
        let members: BTreeMap<NodeId, String> = (1..=n).map(|id| (id, format!("{}:{PORT}", ip_of(id)))).collect();
        let live: LiveNodes = Arc::default();
        let mut nodes = BTreeMap::new();
        let mut disks = BTreeMap::new();
        for id in 1..=n {
            let disk = MemEngine::new();
            disks.insert(id, disk.clone());
            let members = members.clone();
            let live = live.clone();
            let node = handle
                .create_node()
                .name(format!("node-{id}"))
                .ip(ip_of(id))
                .init(move || {
                    let disk = disk.clone();
                    let members = members.clone();
                    let live = live.clone();
                    async move {
                        let config = match Config::for_member(id, members, format!("/sim/node-{id}").into()) {
                            Ok(c) => c,
                            Err(e) => panic!("bad simulated config: {e}"),
                        };
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
        let client_host = handle.create_node().name("client").ip(IpAddr::V4(Ipv4Addr::new(10, 0, 1, 1))).build();
        Self { handle, nodes, disks, live, client_host }
    }

    /// Bootstrap addresses of every node.
    pub fn bootstrap(&self) -> Vec<String> {
        self.nodes.keys().map(|id| format!("{}:{PORT}", ip_of(*id))).collect()
    }

    /// Node ids.
    pub fn ids(&self) -> Vec<NodeId> {
        self.nodes.keys().copied().collect()
    }

    /// Runs `f` on the client host (simulated RPCs must come from a node with an address).
    pub async fn on_client<F, T>(&self, f: F) -> T
    where
        F: std::future::Future<Output = T> + Send + 'static,
        T: Send + 'static,
    {
        match self.client_host.spawn(f).await {
            Ok(v) => v,
            Err(e) => panic!("client task failed: {e}"),
        }
    }

    /// A connected client (retries until the cluster answers).
    pub async fn client(&self) -> Client {
        let bootstrap = self.bootstrap();
        self.on_client(async move {
            loop {
                match Client::connect(&bootstrap).await {
                    Ok(c) => return c,
                    Err(_) => madsim::time::sleep(Duration::from_millis(100)).await,
                }
            }
        })
        .await
    }

    /// The running node `id`, if it is up and serving.
    pub fn node(&self, id: NodeId) -> Option<Arc<Node>> {
        self.live.lock().unwrap_or_else(|p| p.into_inner()).get(&id).cloned()
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
}

/// Installs a log subscriber once (`RUST_LOG` filter, default warnings only).
pub fn init_logs() {
    let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| "warn".into());
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).try_init();
}
