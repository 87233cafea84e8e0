//! Admin operations on [`Client`]: topics and the cluster. Any node takes them; metadata changes
//! are forwarded to the metadata leader by the server.

use rill_proto::admin::{
    AdmitNodeRequest, AlterTopicConfigRequest, CreatePartitionsRequest, CreateTopicRequest, DeleteTopicRequest,
    DescribeClusterRequest, DescribeClusterResponse, DescribeTopicRequest, ListTopicsRequest, TopicConfigEntry,
    TopicDescription, TopicSummary,
};
use std::time::Duration;

use rill_proto::common::ErrorCode;

use crate::error::{self, Error, Result};

/// Pause between two looks of the waits below.
const WAIT_POLL: Duration = Duration::from_millis(100);
use crate::Client;

fn check(code: i32, message: String) -> Result<()> {
    if code == ErrorCode::None as i32 {
        Ok(())
    } else {
        Err(error::server(code, message))
    }
}

fn entries(configs: &[(String, String)]) -> Vec<TopicConfigEntry> {
    configs.iter().map(|(k, v)| TopicConfigEntry { key: k.clone(), value: v.clone() }).collect()
}

fn described(topic: Option<TopicDescription>) -> Result<TopicDescription> {
    topic.ok_or_else(|| Error::Transport("the server sent no topic description".into()))
}

impl Client {
    /// Creates a topic. `configs` are `key=value` topic settings (`min.insync.replicas`,
    /// `max.message.bytes`, `replica.lag.time.max.ms`).
    pub async fn create_topic(
        &self,
        name: &str,
        partitions: u32,
        replication_factor: u32,
        configs: &[(String, String)],
    ) -> Result<TopicDescription> {
        let req =
            CreateTopicRequest { name: name.to_string(), partitions, replication_factor, configs: entries(configs) };
        let resp = self
            .on_any_node(|mut c| {
                let req = req.clone();
                async move { c.create_topic(req).await }
            })
            .await?;
        check(resp.error_code, resp.error_message)?;
        let _ = self.refresh_metadata(&[name.to_string()]).await;
        described(resp.topic)
    }

    /// Deletes a topic: its data is removed and the name can be reused.
    pub async fn delete_topic(&self, name: &str) -> Result<()> {
        let req = DeleteTopicRequest { name: name.to_string() };
        let resp = self
            .on_any_node(|mut c| {
                let req = req.clone();
                async move { c.delete_topic(req).await }
            })
            .await?;
        check(resp.error_code, resp.error_message)?;
        let _ = self.refresh_metadata(&[name.to_string()]).await;
        Ok(())
    }

    /// Sets (`set`) or resets to defaults (`reset`) topic settings.
    pub async fn alter_topic_config(
        &self,
        name: &str,
        set: &[(String, String)],
        reset: &[String],
    ) -> Result<TopicDescription> {
        let req = AlterTopicConfigRequest { name: name.to_string(), set: entries(set), reset: reset.to_vec() };
        let resp = self
            .on_any_node(|mut c| {
                let req = req.clone();
                async move { c.alter_topic_config(req).await }
            })
            .await?;
        check(resp.error_code, resp.error_message)?;
        described(resp.topic)
    }

    /// Grows `name` to `total` partitions. Keyed records map to partitions by
    /// `murmur2(key) % count`, so growing a topic moves keys to other partitions from then on.
    pub async fn create_partitions(&self, name: &str, total: u32) -> Result<TopicDescription> {
        let req = CreatePartitionsRequest { name: name.to_string(), total };
        let resp = self
            .on_any_node(|mut c| {
                let req = req.clone();
                async move { c.create_partitions(req).await }
            })
            .await?;
        check(resp.error_code, resp.error_message)?;
        let _ = self.refresh_metadata(&[name.to_string()]).await;
        described(resp.topic)
    }

    /// Describes a topic: per partition leader, replicas, ISR and offsets.
    pub async fn describe_topic(&self, name: &str) -> Result<TopicDescription> {
        let req = DescribeTopicRequest { name: name.to_string() };
        let resp = self
            .on_any_node(|mut c| {
                let req = req.clone();
                async move { c.describe_topic(req).await }
            })
            .await?;
        check(resp.error_code, resp.error_message)?;
        described(resp.topic)
    }

    /// Lists the topics clients create (not the internal ones).
    pub async fn list_topics(&self) -> Result<Vec<TopicSummary>> {
        self.list_topics_with(false).await
    }

    /// Lists topics, the internal ones (`__consumer_offsets`, `__transaction_state`) too when
    /// `include_internal`.
    pub async fn list_topics_with(&self, include_internal: bool) -> Result<Vec<TopicSummary>> {
        let req = ListTopicsRequest { include_internal };
        Ok(self.on_any_node(|mut c| async move { c.list_topics(req).await }).await?.topics)
    }

    /// Describes the cluster's nodes, their liveness and the metadata leader.
    /// Admits node `node_id` to join the cluster (`revoke`: withdraws an admission not used
    /// yet). A node joins only when admitted; the admission is used up when it registers.
    pub async fn admit_node(&self, node_id: u64, revoke: bool) -> Result<()> {
        let req = AdmitNodeRequest { node_id, revoke };
        let resp = self.on_any_node(|mut c| async move { c.admit_node(req).await }).await?;
        check(resp.error_code, resp.error_message)
    }

    /// The cluster's nodes, addresses and liveness.
    pub async fn describe_cluster(&self) -> Result<DescribeClusterResponse> {
        self.on_any_node(|mut c| async move { c.describe_cluster(DescribeClusterRequest {}).await }).await
    }

    /// Waits until the cluster is usable: the metadata group has a leader, and at least `nodes`
    /// nodes are registered and every registered node answers. Fails after `timeout`, saying
    /// what was still missing.
    pub async fn wait_for_cluster(&self, nodes: usize, timeout: Duration) -> Result<DescribeClusterResponse> {
        let deadline = rill_rt::now() + timeout;
        loop {
            let missing = match self.describe_cluster().await {
                Ok(c) => match cluster_missing(&c, nodes) {
                    None => return Ok(c),
                    Some(m) => m,
                },
                Err(e) => e.to_string(),
            };
            if rill_rt::now() >= deadline {
                return Err(Error::TimedOut(format!("the cluster was not ready within {timeout:?}: {missing}")));
            }
            rill_rt::sleep(WAIT_POLL).await;
        }
    }

    /// Waits until every partition of `topic` has a leader, then loads the leaders into this
    /// client's metadata (so the next request goes straight to them). Fails after `timeout`,
    /// naming the partitions still without one.
    pub async fn wait_for_leaders(&self, topic: &str, timeout: Duration) -> Result<TopicDescription> {
        let deadline = rill_rt::now() + timeout;
        loop {
            let missing = match self.describe_topic(topic).await {
                Ok(d) => {
                    let leaderless: Vec<u32> =
                        d.partitions.iter().filter(|p| p.leader.is_none()).map(|p| p.partition).collect();
                    if !d.partitions.is_empty() && leaderless.is_empty() {
                        self.refresh_metadata(&[topic.to_string()]).await?;
                        return Ok(d);
                    }
                    format!("partitions {leaderless:?} have no leader")
                }
                Err(e) => e.to_string(),
            };
            if rill_rt::now() >= deadline {
                return Err(Error::TimedOut(format!("topic {topic}: {missing} after {timeout:?}")));
            }
            rill_rt::sleep(WAIT_POLL).await;
        }
    }
}

/// What keeps a described cluster from being ready with `nodes` nodes, if anything.
fn cluster_missing(c: &DescribeClusterResponse, nodes: usize) -> Option<String> {
    if c.metadata_leader.is_none() {
        return Some("no metadata leader elected yet".into());
    }
    if c.nodes.len() < nodes {
        return Some(format!("{} of {nodes} nodes registered", c.nodes.len()));
    }
    let unannounced: Vec<u64> = c.nodes.iter().filter(|n| n.address.is_empty()).map(|n| n.node_id).collect();
    if !unannounced.is_empty() {
        return Some(format!("nodes {unannounced:?} have not announced their client address yet"));
    }
    let down: Vec<u64> = c.nodes.iter().filter(|n| !n.alive).map(|n| n.node_id).collect();
    (!down.is_empty()).then(|| format!("nodes {down:?} do not answer"))
}
