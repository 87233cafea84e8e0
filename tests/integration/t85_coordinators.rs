//! Internal topics and coordinators: the cluster creates `__consumer_offsets` and
//! `__transaction_state` at start; they are hidden from listings, closed to client writes,
//! reads and deletes, and routable with FindCoordinator. A group's committed offsets live in
//! its coordinator's state partition and survive its leader's death and a full restart; a
//! re-created topic does not inherit the old one's offsets, and a consumer pinned to the old
//! topic is told. A transactional id's InitProducerId fences the older instance.

use std::time::Duration;

use rill_client::client::build_batch_for;
use rill_client::{
    Acks, Compression, Consumer, ConsumerConfig, Coordinator, ErrorCode, OffsetSpec, Record, TopicPartition,
};
use rill_proto::records::records_client::RecordsClient;
use rill_proto::records::{FetchPartition, FetchRequest, FetchTopic};

use crate::harness::{init_logs, text, wait_for_ok, TestCluster, READY_TIMEOUT};

const OFFSETS: &str = "__consumer_offsets";
const TRANSACTIONS: &str = "__transaction_state";

/// Java's `String.hashCode`, as Kafka's coordinator placement uses it.
fn java_hash(s: &str) -> i32 {
    s.encode_utf16().fold(0i32, |h, u| h.wrapping_mul(31).wrapping_add(i32::from(u)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn internal_topics_and_committed_offsets() -> anyhow::Result<()> {
    init_logs();
    let mut cluster = TestCluster::start(3).await?;
    let client = cluster.client().await?;

    tracing::info!("--- the internal topics exist, hidden from listings, with their kinds");
    let offsets = cluster.wait_for_leaders(&client, OFFSETS).await?;
    let transactions = cluster.wait_for_leaders(&client, TRANSACTIONS).await?;
    assert_eq!((offsets.partitions.len(), transactions.partitions.len()), (16, 16));
    assert_eq!((offsets.kind.as_str(), offsets.internal), ("consumer-offsets", true));
    assert_eq!(transactions.kind, "transaction-state");
    cluster.create_topic(&client, "orders", 4, 3, &[]).await?;
    let names = |ts: Vec<rill_client::TopicSummary>| ts.into_iter().map(|t| t.name).collect::<Vec<_>>();
    assert_eq!(names(client.list_topics().await?), vec!["orders"]);
    assert_eq!(names(client.list_topics_with(true).await?), vec![OFFSETS, TRANSACTIONS, "orders"]);

    tracing::info!("--- closed to client writes, reads, deletes, growth and their names");
    let err = client.produce(OFFSETS, 0, vec![Record::new("x")], Acks::All).await.expect_err("no client writes");
    assert_eq!(err.code(), Some(ErrorCode::InvalidTopic), "{err}");
    let leader = offsets.partitions[0].leader.expect("a leader");
    let mut raw = RecordsClient::connect(format!("http://{}", cluster.addr(leader))).await?;
    let fetched = raw
        .fetch(FetchRequest {
            max_wait_ms: 0,
            max_bytes: 0,
            topics: vec![FetchTopic {
                topic: OFFSETS.into(),
                partitions: vec![FetchPartition { partition: 0, fetch_offset: 0, max_bytes: 0 }],
                topic_id: Default::default(),
            }],
            ..Default::default()
        })
        .await?
        .into_inner();
    assert_eq!(fetched.topics[0].partitions[0].error_code, ErrorCode::InvalidTopic as i32);
    assert_eq!(client.delete_topic(OFFSETS).await.expect_err("no deletes").code(), Some(ErrorCode::InvalidTopic));
    assert_eq!(
        client.create_partitions(TRANSACTIONS, 32).await.expect_err("no growth").code(),
        Some(ErrorCode::InvalidPartitions)
    );
    assert_eq!(
        client.create_topic(OFFSETS, 1, 3, &[]).await.expect_err("reserved").code(),
        Some(ErrorCode::InvalidTopic)
    );

    tracing::info!("--- FindCoordinator names the leader of the partition the id hashes to");
    let group = "billing";
    let (node, addr) =
        wait_for_ok(READY_TIMEOUT, "a coordinator", || client.find_coordinator(Coordinator::Group, group)).await?;
    let partition = ((java_hash(group) & 0x7fff_ffff) % 16) as usize;
    let offsets = client.describe_topic(OFFSETS).await?;
    assert_eq!(
        offsets.partitions[partition].leader,
        Some(node),
        "coordinator of {group} = leader of {OFFSETS}/{partition}"
    );
    assert_eq!(addr, cluster.addr(node));

    tracing::info!("--- commit and read back; bad commits are refused per partition");
    let tp = |p| TopicPartition::new("orders", p);
    client.commit_offsets(group, &[(tp(0), 5, "after batch 5".into()), (tp(1), 7, String::new())]).await?;
    let got = client.committed_offsets(group, &[tp(0), tp(1), tp(2)]).await?;
    assert_eq!(got[&tp(0)].as_ref().map(|c| (c.offset, c.metadata.as_str())), Some((5, "after batch 5")));
    assert_eq!(got[&tp(1)].as_ref().map(|c| c.offset), Some(7));
    assert_eq!(got[&tp(2)], None, "nothing committed there");
    let bad = client.commit_offsets(group, &[(TopicPartition::new("nope", 0), 1, String::new())]).await;
    assert_eq!(bad.expect_err("unknown topic").code(), Some(ErrorCode::UnknownTopicOrPartition));
    let bad = client.commit_offsets(group, &[(tp(9), 1, String::new())]).await;
    assert_eq!(bad.expect_err("no partition 9").code(), Some(ErrorCode::UnknownTopicOrPartition));
    let bad = client.commit_offsets(group, &[(tp(0), 1, "m".repeat(5000))]).await;
    assert_eq!(bad.expect_err("metadata too large").code(), Some(ErrorCode::OffsetMetadataTooLarge));
    let bad = client.commit_offsets("", &[(tp(0), 1, String::new())]).await;
    assert_eq!(bad.expect_err("empty group").code(), Some(ErrorCode::InvalidGroupId));

    tracing::info!("--- a consumer of the group starts where it committed, and commits what it read");
    for p in 0..2 {
        let values: Vec<Record> = (0..10).map(|i| Record::new(format!("p{p}-{i}"))).collect();
        client.produce("orders", p, values, Acks::All).await?;
    }
    let config = ConsumerConfig { group_id: Some(group.into()), start: OffsetSpec::Earliest, ..Default::default() };
    let mut consumer = Consumer::new(client.clone(), config.clone());
    consumer.assign([tp(0), tp(1)]);
    let mut read = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while read.len() < 8 && tokio::time::Instant::now() < deadline {
        read.extend(consumer.poll(Duration::from_millis(500)).await?.into_iter().map(|r| (r.partition, r.offset)));
    }
    read.sort_unstable();
    let want: Vec<(u32, u64)> = (5..10).map(|o| (0, o)).chain((7..10).map(|o| (1, o))).collect();
    assert_eq!(read, want, "from the committed offsets 5 and 7");
    consumer.commit().await?;
    consumer.close();
    let got = client.committed_offsets(group, &[tp(0), tp(1)]).await?;
    assert_eq!((got[&tp(0)].as_ref().map(|c| c.offset), got[&tp(1)].as_ref().map(|c| c.offset)), (Some(10), Some(10)));

    tracing::info!("--- the coordinator's leader dies: the next coordinator has the offsets");
    cluster.kill(node)?;
    let survivor = wait_for_ok(READY_TIMEOUT, "the offsets from a new coordinator", || async {
        let got = client.committed_offsets(group, &[tp(0)]).await?;
        got[&tp(0)].clone().ok_or_else(|| rill_client::Error::InvalidArgument("no offset".into()))
    })
    .await?;
    assert_eq!(survivor.offset, 10);
    let (new_node, _) = client.find_coordinator(Coordinator::Group, group).await?;
    assert_ne!(new_node, node);

    tracing::info!("--- every node restarts: the offsets are still there");
    cluster.start_node(node)?;
    for id in 1..=3 {
        cluster.terminate(id)?;
    }
    for id in 1..=3 {
        cluster.start_node(id)?;
    }
    let client = cluster.client().await?;
    let after_restart = wait_for_ok(READY_TIMEOUT, "the offsets after a restart", || async {
        let got = client.committed_offsets(group, &[tp(1)]).await?;
        got[&tp(1)].clone().ok_or_else(|| rill_client::Error::InvalidArgument("no offset".into()))
    })
    .await?;
    assert_eq!(after_restart.offset, 10);

    tracing::info!("--- a re-created topic inherits no offsets; a consumer pinned to the old one is told");
    cluster.wait_for_leaders(&client, "orders").await?;
    let mut pinned = Consumer::new(client.clone(), config);
    pinned.assign([tp(0)]);
    pinned.poll(Duration::from_millis(200)).await?;
    client.delete_topic("orders").await?;
    cluster.create_topic(&client, "orders", 4, 3, &[]).await?;
    client.produce("orders", 0, vec![Record::new("new")], Acks::All).await?;
    let got = client.committed_offsets(group, &[tp(0)]).await?;
    assert_eq!(got[&tp(0)], None, "the offsets of the deleted topic are not the new topic's");
    let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
    let err = loop {
        match pinned.poll(Duration::from_millis(200)).await {
            Err(e) => break e,
            Ok(r) => assert!(r.is_empty(), "the pinned consumer read the new topic: {r:?}"),
        }
        assert!(tokio::time::Instant::now() < deadline, "the pinned consumer never noticed the topic was re-created");
    };
    assert_eq!(err.code(), Some(ErrorCode::UnknownTopicId), "{err}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transactional_id_fences_its_older_instance() -> anyhow::Result<()> {
    init_logs();
    let cluster = TestCluster::start(3).await?;
    let client = cluster.client().await?;
    cluster.create_topic(&client, "ledger", 1, 3, &[]).await?;
    cluster.wait_for_leaders(&client, TRANSACTIONS).await?;

    tracing::info!("--- the first instance gets a producer id at epoch 0 and writes");
    let (pid, epoch) =
        wait_for_ok(READY_TIMEOUT, "a transactional producer id", || client.init_transactional_producer("payments", 0))
            .await?;
    assert_eq!(epoch, 0);
    let batch = |v: &str, e: i16, seq: i32| {
        build_batch_for(vec![Record::new(v.to_string())], Compression::None, Some((pid, e, seq)))
    };
    let timeout = Duration::from_secs(10);
    client.produce_batch("ledger", 0, batch("old-1", epoch, 0)?, Acks::All, timeout).await?;

    tracing::info!("--- a restarted instance gets the same producer id one epoch up; the old one is fenced");
    let (pid2, epoch2) = client.init_transactional_producer("payments", 0).await?;
    assert_eq!((pid2, epoch2), (pid, 1));
    client.produce_batch("ledger", 0, batch("new-1", epoch2, 0)?, Acks::All, timeout).await?;
    let zombie = client.produce_batch("ledger", 0, batch("old-2", epoch, 1)?, Acks::All, timeout).await;
    assert_eq!(zombie.expect_err("fenced").code(), Some(ErrorCode::InvalidProducerEpoch));
    let values: Vec<String> =
        crate::harness::read_all(&client, "ledger", 0).await?.iter().map(|r| text(&r.value)).collect();
    assert_eq!(values, vec!["old-1", "new-1"]);

    tracing::info!("--- another id gets another producer id; bad timeouts are refused");
    let (other, _) = client.init_transactional_producer("refunds", 30_000).await?;
    assert_ne!(other, pid);
    let err = client.init_transactional_producer("payments", 16 * 60_000).await.expect_err("timeout too long");
    assert_eq!(err.code(), Some(ErrorCode::InvalidTransactionTimeout));
    Ok(())
}
