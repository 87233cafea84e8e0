//! The Kafka listener seen by a Kafka client no one here wrote: Debian's `kcat` (librdkafka
//! 2.0.2) lists the cluster through each node's Kafka listener, with the brokers at their Kafka
//! addresses and each partition's leader, replicas and in-sync replicas as Rill describes them.

use std::process::Command;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use serde_json::Value;

use crate::harness::{init_logs, wait_for, TestCluster};

/// `kcat -L -J` against `broker`, for `topic`: the JSON it prints.
fn kcat_list(broker: &str, topic: &str) -> Result<Value> {
    let output = Command::new("kcat")
        .args(["-b", broker, "-L", "-J", "-t", topic, "-m", "10"])
        .output()
        .context("running kcat (Debian's `kcat` package; scripts/test.sh installs it)")?;
    if !output.status.success() {
        bail!("kcat -L failed: {}", String::from_utf8_lossy(&output.stderr));
    }
    serde_json::from_slice(&output.stdout).context("kcat's JSON")
}

/// The ids in a kcat list of `{"id": n}`.
fn ids(list: &Value) -> Vec<u64> {
    list.as_array().into_iter().flatten().filter_map(|r| r["id"].as_u64()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kcat_lists_the_cluster_through_every_nodes_kafka_listener() -> Result<()> {
    init_logs();
    let mut cluster = TestCluster::start(3).await?;
    let client = cluster.client().await?;
    cluster.create_topic(&client, "kmeta", 3, 3, &[]).await?;
    let kafka = cluster.local().kafka_bootstrap();
    assert_eq!(kafka.len(), 3);

    for broker in &kafka {
        // Leaders settle (and move back to preferred replicas) after creation: wait until kcat's
        // view and Rill's own agree, partition by partition.
        let listed = wait_for(Duration::from_secs(30), "kcat's leaders to match Rill's", || async {
            let listed = kcat_list(broker, "kmeta").ok()?;
            let described = client.describe_topic("kmeta").await.ok()?;
            let partitions = listed["topics"][0]["partitions"].as_array()?.clone();
            let agree = partitions.len() == described.partitions.len()
                && described.partitions.iter().all(|d| {
                    partitions.iter().any(|p| {
                        p["partition"].as_u64() == Some(u64::from(d.partition))
                            && p["leader"].as_u64() == d.leader
                            && ids(&p["replicas"]) == d.replicas
                    })
                });
            agree.then_some(listed)
        })
        .await?;
        let mut brokers: Vec<(u64, String)> = listed["brokers"]
            .as_array()
            .context("brokers")?
            .iter()
            .map(|b| (b["id"].as_u64().unwrap_or_default(), b["name"].as_str().unwrap_or_default().to_string()))
            .collect();
        brokers.sort();
        let expected: Vec<(u64, String)> = (1..=3).map(|id| (id, kafka[(id - 1) as usize].clone())).collect();
        assert_eq!(brokers, expected, "through {broker}: every node at its Kafka address");
        let topic = &listed["topics"][0];
        assert_eq!(topic["topic"], "kmeta");
        assert!(topic.get("error").is_none(), "{topic}");
        for p in topic["partitions"].as_array().context("partitions")? {
            assert!(p.get("error").is_none(), "{p}");
            let isrs = ids(&p["isrs"]);
            let leader = p["leader"].as_u64().context("leader")?;
            assert!(isrs.contains(&leader), "the leader is in sync: {p}");
        }
        assert!(listed["controllerid"].as_u64().is_some_and(|id| (1..=3).contains(&id)), "{listed}");
    }
    Ok(())
}
