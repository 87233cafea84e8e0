//! Topic administration: alter config (takes effect), grow partitions, delete (data gone, name
//! reusable, producers told).

use rill_client::{Acks, ErrorCode, Record};

use std::time::Duration;

use crate::harness::{init_logs, read_all, wait_for, TestCluster};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alter_grow_and_delete_topics() -> anyhow::Result<()> {
    init_logs();
    let cluster = TestCluster::start(3).await?;
    let client = cluster.client().await?;
    cluster.create_topic(&client, "admin", 2, 3, &[]).await?;
    client.produce("admin", 0, vec![Record::new("x".repeat(500))], Acks::All).await?;

    // A config change is committed in the metadata group before the call returns; each partition
    // leader applies it when its node applies that metadata entry (moments later, as in Kafka).
    tracing::info!("--- alter: a smaller max.message.bytes takes effect on the partition leader");
    let d = client.alter_topic_config("admin", &[("max.message.bytes".into(), "200".into())], &[]).await?;
    assert!(d.configs.iter().any(|c| c.key == "max.message.bytes" && c.value == "200"));
    let refused = wait_for(Duration::from_secs(10), "max.message.bytes=200 to refuse 500 bytes", || async {
        client.produce("admin", 0, vec![Record::new("x".repeat(500))], Acks::All).await.err()
    })
    .await?;
    assert_eq!(refused.code(), Some(ErrorCode::MessageTooLarge), "{refused}");
    let d = client.alter_topic_config("admin", &[], &["max.message.bytes".into()]).await?;
    assert!(d.configs.iter().any(|c| c.key == "max.message.bytes" && c.value == "1048588"));
    let accepted =
        wait_for(Duration::from_secs(10), "the default max.message.bytes to take 500 bytes again", || async {
            match client.produce("admin", 0, vec![Record::new("x".repeat(500))], Acks::All).await {
                Err(e) if e.code() == Some(ErrorCode::MessageTooLarge) => None,
                other => Some(other),
            }
        })
        .await?;
    accepted?;
    let err = client
        .alter_topic_config("admin", &[("min.insync.replicas".into(), "5".into())], &[])
        .await
        .expect_err("invalid");
    assert_eq!(err.code(), Some(ErrorCode::InvalidConfig));

    tracing::info!("--- grow to 4 partitions; never shrink");
    let d = client.create_partitions("admin", 4).await?;
    assert_eq!(d.partitions.len(), 4);
    cluster.wait_for_leaders(&client, "admin").await?;
    client.refresh_metadata(&["admin".into()]).await?;
    let ack = client.produce("admin", 3, vec![Record::new("in the new partition")], Acks::All).await?;
    assert_eq!(ack.base_offset, Some(0));
    let err = client.create_partitions("admin", 2).await.expect_err("cannot shrink");
    assert_eq!(err.code(), Some(ErrorCode::InvalidPartitions), "{err}");

    tracing::info!("--- delete: producers get UNKNOWN_TOPIC_OR_PARTITION, the name is reusable and empty");
    client.delete_topic("admin").await?;
    let err = client.produce("admin", 0, vec![Record::new("gone")], Acks::All).await.expect_err("deleted");
    assert_eq!(err.code(), Some(ErrorCode::UnknownTopicOrPartition), "{err}");
    let err = client.delete_topic("admin").await.expect_err("already deleted");
    assert_eq!(err.code(), Some(ErrorCode::UnknownTopicOrPartition));
    cluster.create_topic(&client, "admin", 1, 3, &[]).await?;
    client.refresh_metadata(&["admin".into()]).await?;
    assert!(read_all(&client, "admin", 0).await?.is_empty(), "a recreated topic starts empty");
    client.produce("admin", 0, vec![Record::new("fresh")], Acks::All).await?;
    assert_eq!(read_all(&client, "admin", 0).await?.len(), 1);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_are_placed_on_live_nodes_only() -> anyhow::Result<()> {
    init_logs();
    let mut cluster = TestCluster::start(3).await?;
    let client = cluster.client().await?;
    tracing::info!("--- node 3 down: RF 3 is refused, RF 2 avoids node 3");
    cluster.kill(3)?;
    let err = client.create_topic("wide", 1, 3, &[]).await.expect_err("only 2 live nodes");
    assert_eq!(err.code(), Some(ErrorCode::InvalidReplicationFactor), "{err}");
    assert!(err.to_string().contains("only 2 of 3 are reachable"), "{err}");
    let d = cluster.create_topic(&client, "narrow", 4, 2, &[]).await?;
    for p in &d.partitions {
        assert!(!p.replicas.contains(&3), "partition {} placed on the dead node: {:?}", p.partition, p.replicas);
    }
    Ok(())
}
