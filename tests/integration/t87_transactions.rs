//! Transactions at their coordinator, over raw gRPC stubs generated from `proto/`: adding
//! partitions, ending transactions, the markers every partition gets, fencing, aborts forced by
//! a new instance and by the transaction timeout, and bad requests.

use std::time::Duration;

use rill_client::{Client, Coordinator, ErrorCode};
use rill_proto::records::records_client::RecordsClient;
use rill_proto::records::{
    FetchPartition, FetchRequest, FetchTopic, IsolationLevel, PartitionProduce, PartitionProduceResult, ProduceRequest,
    TopicProduce,
};
use rill_proto::transactions::transactions_client::TransactionsClient;
use rill_proto::transactions::{
    AddPartitionsToTxnRequest, DescribeTransactionsRequest, EndTxnRequest, TransactionDescription, TxnTopic,
};
use rill_records::{BatchBuilder, Compression, ControlKind, ControlMarker, Record};

use crate::harness::{init_logs, wait_for, wait_for_ok, TestCluster, READY_TIMEOUT};

const TRANSACTIONS: &str = "__transaction_state";
/// Long enough for a coordinator to write every marker of a transaction.
const MARKERS_TIMEOUT: Duration = Duration::from_secs(20);

fn code(c: i32) -> ErrorCode {
    ErrorCode::try_from(c).unwrap_or(ErrorCode::UnknownServerError)
}

/// A stub of the Transactions service at the coordinator of `id`.
async fn coordinator(client: &Client, id: &str) -> anyhow::Result<TransactionsClient<tonic::transport::Channel>> {
    let (_, addr) = client.find_coordinator(Coordinator::Transaction, id).await?;
    Ok(TransactionsClient::connect(format!("http://{addr}")).await?)
}

fn add(id: &str, pid: i64, epoch: i16, topic: &str, partitions: &[u32]) -> AddPartitionsToTxnRequest {
    AddPartitionsToTxnRequest {
        transactional_id: id.into(),
        producer_id: pid,
        producer_epoch: i32::from(epoch),
        topics: vec![TxnTopic { topic: topic.into(), partitions: partitions.to_vec() }],
    }
}

async fn describe(client: &Client, id: &str) -> anyhow::Result<TransactionDescription> {
    let mut c = coordinator(client, id).await?;
    let mut r =
        c.describe_transactions(DescribeTransactionsRequest { transactional_ids: vec![id.into()] }).await?.into_inner();
    r.transactions.pop().ok_or_else(|| anyhow::anyhow!("no description"))
}

/// Waits until `id`'s transaction is in `state` (its markers written, for the Complete states).
async fn wait_for_state(client: &Client, id: &str, state: &str) -> anyhow::Result<TransactionDescription> {
    wait_for(MARKERS_TIMEOUT, &format!("{id} to be {state}"), || async {
        describe(client, id).await.ok().filter(|d| d.state == state)
    })
    .await
}

/// The control markers of a partition, read uncommitted from its leader: (offset, commit?,
/// coordinator epoch, the transaction it names).
async fn markers(client: &Client, topic: &str, partition: u32) -> anyhow::Result<Vec<(u64, ControlKind, i32, u64)>> {
    let p = raw_fetch(client, topic, partition, IsolationLevel::ReadUncommitted).await?;
    let mut out = Vec::new();
    for b in &p.batches {
        let decoded = rill_records::decode(&b.data, 1 << 20)?;
        if decoded.info.is_control() {
            let m = ControlMarker::parse(&decoded.records[0])?;
            out.push((b.base_offset as u64, m.kind, m.coordinator_epoch, m.transaction));
        }
    }
    Ok(out)
}

/// `topic`/`partition` from offset 0 at `isolation`, fetched from its leader over a raw stub.
async fn raw_fetch(
    client: &Client,
    topic: &str,
    partition: u32,
    isolation: IsolationLevel,
) -> anyhow::Result<rill_proto::records::FetchPartitionResult> {
    let addr = leader_addr(client, topic, partition).await?;
    let mut raw = RecordsClient::connect(format!("http://{addr}")).await?;
    let resp = raw
        .fetch(FetchRequest {
            topics: vec![FetchTopic {
                topic: topic.into(),
                partitions: vec![FetchPartition { partition, fetch_offset: 0, max_bytes: 0 }],
                topic_id: Default::default(),
            }],
            isolation_level: isolation as i32,
            ..Default::default()
        })
        .await?
        .into_inner();
    let p = resp.topics.into_iter().next().and_then(|t| t.partitions.into_iter().next());
    let p = p.ok_or_else(|| anyhow::anyhow!("no partition in the answer"))?;
    anyhow::ensure!(p.error_code == 0, "fetch: {}", p.error_message);
    Ok(p)
}

/// The address of `topic`/`partition`'s leader.
async fn leader_addr(client: &Client, topic: &str, partition: u32) -> anyhow::Result<String> {
    let desc = client.describe_topic(topic).await?;
    let leader = desc.partitions[partition as usize].leader.ok_or_else(|| anyhow::anyhow!("no leader"))?;
    desc_node_addr(client, leader).await
}

/// A transactional batch of one record sent as a transactional producer of `version` sends it.
#[allow(clippy::too_many_arguments)]
async fn txn_produce(
    client: &Client,
    id: &str,
    version: u32,
    partition: u32,
    (pid, epoch, seq): (i64, i16, i32),
    value: &str,
) -> anyhow::Result<PartitionProduceResult> {
    let mut b = BatchBuilder::new(Compression::None).producer(pid, epoch, seq).transactional(true);
    b.push(Record { value: Some(bytes::Bytes::from(value.to_string())), timestamp_ms: 1, ..Record::default() })?;
    let addr = leader_addr(client, "orders", partition).await?;
    let mut raw = RecordsClient::connect(format!("http://{addr}")).await?;
    let resp = raw
        .produce(ProduceRequest {
            acks: 0,
            timeout_ms: 10_000,
            topics: vec![TopicProduce {
                topic: "orders".into(),
                partitions: vec![PartitionProduce { partition, batch: b.build()? }],
                topic_id: Default::default(),
            }],
            transactional_id: id.into(),
            transaction_version: version,
        })
        .await?
        .into_inner();
    Ok(resp.topics[0].partitions[0].clone())
}

/// The values of `orders`/`partition` a reader at `isolation` gets, from offset 0.
async fn values(client: &Client, partition: u32, isolation: IsolationLevel) -> anyhow::Result<Vec<String>> {
    let p = raw_fetch(client, "orders", partition, isolation).await?;
    let mut out = Vec::new();
    for b in &p.batches {
        let decoded = rill_records::decode(&b.data, 1 << 20)?;
        if !decoded.info.is_control() {
            for r in decoded.records {
                out.push(String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned());
            }
        }
    }
    Ok(out)
}

async fn desc_node_addr(client: &Client, node: u64) -> anyhow::Result<String> {
    let cluster = client.describe_cluster().await?;
    cluster
        .nodes
        .iter()
        .find(|n| n.node_id == node)
        .map(|n| n.address.clone())
        .ok_or_else(|| anyhow::anyhow!("node {node} unknown"))
}

#[tokio::test]
async fn transactions_commit_abort_and_fence_at_their_coordinator() -> anyhow::Result<()> {
    init_logs();
    let cluster = TestCluster::start(3).await?;
    let client = cluster.client().await?;
    cluster.create_topic(&client, "orders", 2, 3, &[]).await?;
    cluster.wait_for_leaders(&client, TRANSACTIONS).await?;
    let id = "invoicer";
    let (pid, epoch) =
        wait_for_ok(READY_TIMEOUT, "a transactional producer id", || client.init_transactional_producer(id, 0)).await?;

    tracing::info!("--- a transaction over two partitions commits: each partition gets a commit marker");
    let mut c = coordinator(&client, id).await?;
    let r = c.add_partitions_to_txn(add(id, pid, epoch, "orders", &[0, 1])).await?.into_inner();
    assert_eq!(code(r.error_code), ErrorCode::None, "{}", r.error_message);
    let d = describe(&client, id).await?;
    assert_eq!((d.state.as_str(), d.producer_id, d.topics.len()), ("Ongoing", pid, 1));
    assert!(d.transaction_start_ms > 0);
    let ended = c
        .end_txn(EndTxnRequest {
            transactional_id: id.into(),
            producer_id: pid,
            producer_epoch: epoch.into(),
            commit: true,
            transaction_version: 1,
        })
        .await?
        .into_inner();
    assert_eq!(code(ended.error_code), ErrorCode::None, "{}", ended.error_message);
    assert_eq!((ended.producer_id, ended.producer_epoch), (pid, i32::from(epoch)), "v1 keeps the epoch");
    wait_for_state(&client, id, "CompleteCommit").await?;
    let mut named = Vec::new();
    for p in 0..2 {
        let m = markers(&client, "orders", p).await?;
        assert_eq!(m.len(), 1, "partition {p}: {m:?}");
        assert_eq!(m[0].1, ControlKind::Commit);
        assert!(m[0].2 >= 1, "the marker carries the coordinator's epoch (its term)");
        named.push(m[0].3);
    }
    assert!(named[0] > 0 && named[0] == named[1], "both markers name the transaction they end: {named:?}");
    // The retry of a commit that already took effect succeeds; the other decision does not.
    let again = c
        .end_txn(EndTxnRequest {
            transactional_id: id.into(),
            producer_id: pid,
            producer_epoch: epoch.into(),
            commit: true,
            transaction_version: 1,
        })
        .await?
        .into_inner();
    assert_eq!(code(again.error_code), ErrorCode::None, "{}", again.error_message);
    let flip = c
        .end_txn(EndTxnRequest {
            transactional_id: id.into(),
            producer_id: pid,
            producer_epoch: epoch.into(),
            commit: false,
            transaction_version: 1,
        })
        .await?
        .into_inner();
    assert_eq!(code(flip.error_code), ErrorCode::InvalidTxnState, "{}", flip.error_message);

    tracing::info!("--- a read_committed fetch moves past the markers without returning them");
    let fetched = client.fetch("orders", 0, Some(0), Duration::ZERO).await?;
    assert!(fetched.records.is_empty());
    assert_eq!((fetched.next_offset, fetched.last_stable_offset, fetched.high_watermark), (1, 1, 1));

    tracing::info!("--- a new instance over an open transaction aborts it first and fences the old one");
    let r = c.add_partitions_to_txn(add(id, pid, epoch, "orders", &[1])).await?.into_inner();
    assert_eq!(code(r.error_code), ErrorCode::None, "{}", r.error_message);
    let (pid2, epoch2) = wait_for_ok(MARKERS_TIMEOUT, "a new instance after the abort", || async {
        match client.init_transactional_producer(id, 0).await {
            Err(e) if e.code() == Some(ErrorCode::ConcurrentTransactions) => Err(e),
            other => Ok(other),
        }
    })
    .await??;
    assert_eq!((pid2, epoch2), (pid, epoch + 2), "one bump to fence the open transaction, one for the new instance");
    let d = describe(&client, id).await?;
    assert_eq!((d.state.as_str(), d.producer_epoch), ("Empty", i32::from(epoch2)));
    let m = markers(&client, "orders", 1).await?;
    assert_eq!(m.iter().map(|m| m.1).collect::<Vec<_>>(), vec![ControlKind::Commit, ControlKind::Abort]);
    assert!(m[1].3 > m[0].3, "the next transaction has a later name: {m:?}");
    let zombie = c.add_partitions_to_txn(add(id, pid, epoch, "orders", &[0])).await?.into_inner();
    assert_eq!(code(zombie.error_code), ErrorCode::ProducerFenced, "{}", zombie.error_message);
    let stranger = c.add_partitions_to_txn(add(id, pid + 1000, epoch2, "orders", &[0])).await?.into_inner();
    assert_eq!(code(stranger.error_code), ErrorCode::InvalidProducerIdMapping, "{}", stranger.error_message);

    tracing::info!("--- a transaction open past its timeout is aborted under a bumped epoch");
    let short = "short-lived";
    let (spid, sepoch) = client.init_transactional_producer(short, 1_000).await?;
    let mut s = coordinator(&client, short).await?;
    let r = s.add_partitions_to_txn(add(short, spid, sepoch, "orders", &[0])).await?.into_inner();
    assert_eq!(code(r.error_code), ErrorCode::None, "{}", r.error_message);
    let d = wait_for_state(&client, short, "CompleteAbort").await?;
    assert_eq!(d.producer_epoch, i32::from(sepoch) + 1);
    let late = s
        .end_txn(EndTxnRequest {
            transactional_id: short.into(),
            producer_id: spid,
            producer_epoch: sepoch.into(),
            commit: true,
            transaction_version: 1,
        })
        .await?
        .into_inner();
    assert_eq!(code(late.error_code), ErrorCode::ProducerFenced, "{}", late.error_message);

    tracing::info!("--- bad requests get clear errors");
    let unknown = describe(&client, "never-initialised").await?;
    assert_eq!(code(unknown.error_code), ErrorCode::TransactionalIdNotFound, "{}", unknown.error_message);
    for (req, want) in [
        (add(id, pid2, epoch2, "no-such-topic", &[0]), ErrorCode::UnknownTopicOrPartition),
        (add(id, pid2, epoch2, "orders", &[9]), ErrorCode::UnknownTopicOrPartition),
        (add(id, pid2, epoch2, TRANSACTIONS, &[0]), ErrorCode::InvalidTopic),
        (add(id, pid2, epoch2, "orders", &[0, 0]), ErrorCode::InvalidRequest),
        (
            AddPartitionsToTxnRequest { producer_epoch: 70_000, ..add(id, pid2, epoch2, "orders", &[0]) },
            ErrorCode::InvalidRequest,
        ),
    ] {
        let r = c.add_partitions_to_txn(req).await?.into_inner();
        assert_eq!(code(r.error_code), want, "{}", r.error_message);
        assert!(!r.error_message.is_empty());
    }
    let d = describe(&client, id).await?;
    assert_eq!((d.state.as_str(), d.topics.len()), ("Empty", 0), "a refused request added nothing");

    tracing::info!("--- an operator lists the open transaction and aborts it; its producer is fenced");
    let r = c.add_partitions_to_txn(add(id, pid2, epoch2, "orders", &[0, 1])).await?.into_inner();
    assert_eq!(code(r.error_code), ErrorCode::None, "{}", r.error_message);
    let open = client.list_transactions(&["Ongoing".to_string()], None).await?;
    assert_eq!(open.iter().map(|t| t.transactional_id.as_str()).collect::<Vec<_>>(), vec![id]);
    assert_eq!((open[0].partitions, open[0].producer_epoch), (2, i32::from(epoch2)));
    let all = client.list_transactions(&[], None).await?;
    assert_eq!(all.len(), 2, "both ids: {all:?}");
    let out = crate::t70_cli::rill(&cluster, &["txn", "list", "--open-longer-than", "0s"], None)?;
    assert!(String::from_utf8_lossy(&out.stdout).contains(id), "{out:?}");
    let out = crate::t70_cli::rill(&cluster, &["txn", "abort", id], None)?;
    assert!(out.status.success(), "{out:?}");
    let d = wait_for_state(&client, id, "CompleteAbort").await?;
    assert_eq!(d.producer_epoch, i32::from(epoch2) + 1, "the abort fenced the producer");
    let fenced = c
        .end_txn(EndTxnRequest {
            transactional_id: id.into(),
            producer_id: pid2,
            producer_epoch: epoch2.into(),
            commit: true,
            transaction_version: 1,
        })
        .await?
        .into_inner();
    assert_eq!(code(fenced.error_code), ErrorCode::ProducerFenced, "{}", fenced.error_message);
    let out = crate::t70_cli::rill(&cluster, &["txn", "abort", id], None)?;
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("INVALID_TXN_STATE"), "{out:?}");
    Ok(())
}

#[tokio::test]
async fn transactional_records_are_read_committed_only_once_committed() -> anyhow::Result<()> {
    init_logs();
    let cluster = TestCluster::start(3).await?;
    let client = cluster.client().await?;
    cluster.create_topic(&client, "orders", 2, 3, &[]).await?;
    cluster.wait_for_leaders(&client, TRANSACTIONS).await?;
    let id = "flow";
    let (pid, epoch) =
        wait_for_ok(READY_TIMEOUT, "a transactional producer id", || client.init_transactional_producer(id, 0)).await?;
    let mut c = coordinator(&client, id).await?;
    let end = |commit: bool, epoch: i16| EndTxnRequest {
        transactional_id: id.into(),
        producer_id: pid,
        producer_epoch: epoch.into(),
        commit,
        transaction_version: 1,
    };
    let (rc, ru) = (IsolationLevel::ReadCommitted, IsolationLevel::ReadUncommitted);

    tracing::info!("--- v1: a batch for a partition not added to the transaction is refused");
    let r = txn_produce(&client, id, 1, 0, (pid, epoch, 0), "early").await?;
    assert_eq!(code(r.error_code), ErrorCode::InvalidTxnState, "{}", r.error_message);

    tracing::info!("--- an open transaction is invisible to read_committed, visible to read_uncommitted");
    let r = c.add_partitions_to_txn(add(id, pid, epoch, "orders", &[0, 1])).await?.into_inner();
    assert_eq!(code(r.error_code), ErrorCode::None, "{}", r.error_message);
    for (partition, value) in [(0, "order-1"), (1, "order-2")] {
        let r = txn_produce(&client, id, 1, partition, (pid, epoch, 0), value).await?;
        assert_eq!(code(r.error_code), ErrorCode::None, "{}", r.error_message);
    }
    let r = txn_produce(&client, id, 1, 0, (pid, epoch, 1), "order-3").await?;
    assert_eq!(code(r.error_code), ErrorCode::None, "{}", r.error_message);
    assert_eq!(values(&client, 0, ru).await?, vec!["order-1", "order-3"]);
    assert!(values(&client, 0, rc).await?.is_empty(), "nothing of an open transaction");
    let fetched = client.fetch("orders", 0, Some(0), Duration::ZERO).await?;
    assert_eq!((fetched.last_stable_offset, fetched.high_watermark), (0, 2), "the LSO holds at the open transaction");

    tracing::info!("--- once committed, read_committed sees all of it on every partition");
    let r = c.end_txn(end(true, epoch)).await?.into_inner();
    assert_eq!(code(r.error_code), ErrorCode::None, "{}", r.error_message);
    wait_for_state(&client, id, "CompleteCommit").await?;
    assert_eq!(values(&client, 0, rc).await?, vec!["order-1", "order-3"]);
    assert_eq!(values(&client, 1, rc).await?, vec!["order-2"]);

    tracing::info!("--- an aborted transaction is never returned to read_committed, and readers move past it");
    let r = c.add_partitions_to_txn(add(id, pid, epoch, "orders", &[0])).await?.into_inner();
    assert_eq!(code(r.error_code), ErrorCode::None, "{}", r.error_message);
    let r = txn_produce(&client, id, 1, 0, (pid, epoch, 2), "cancelled").await?;
    assert_eq!(code(r.error_code), ErrorCode::None, "{}", r.error_message);
    let r = c.end_txn(end(false, epoch)).await?.into_inner();
    assert_eq!(code(r.error_code), ErrorCode::None, "{}", r.error_message);
    wait_for_state(&client, id, "CompleteAbort").await?;
    assert_eq!(values(&client, 0, rc).await?, vec!["order-1", "order-3"]);
    assert_eq!(values(&client, 0, ru).await?, vec!["order-1", "order-3", "cancelled"]);
    // From inside the aborted range: nothing returned, and the next offset is past it.
    let aborted_at = 3;
    let fetched = client.fetch("orders", 0, Some(aborted_at), Duration::ZERO).await?;
    assert!(fetched.records.is_empty());
    assert_eq!(fetched.next_offset, fetched.high_watermark, "past the aborted record and its marker");
    assert_eq!(fetched.last_stable_offset, fetched.high_watermark);

    tracing::info!("--- v2: the first batch adds its partition; EndTxn bumps the epoch and fences late batches");
    let r = txn_produce(&client, id, 2, 1, (pid, epoch, 1), "v2-order").await?;
    assert_eq!(code(r.error_code), ErrorCode::None, "{}", r.error_message);
    let d = describe(&client, id).await?;
    assert_eq!((d.state.as_str(), d.protocol_version), ("Ongoing", 2));
    let r = c.end_txn(end(true, epoch)).await?.into_inner();
    assert_eq!(code(r.error_code), ErrorCode::None, "{}", r.error_message);
    assert_eq!(r.producer_epoch, i32::from(epoch) + 1, "v2 bumps the epoch at every EndTxn");
    wait_for_state(&client, id, "CompleteCommit").await?;
    assert_eq!(values(&client, 1, rc).await?, vec!["order-2", "v2-order"]);
    let late = txn_produce(&client, id, 2, 1, (pid, epoch, 2), "late").await?;
    assert!(
        [ErrorCode::InvalidProducerEpoch, ErrorCode::ProducerFenced].contains(&code(late.error_code)),
        "a batch of the old epoch after its transaction ended: {:?} {}",
        code(late.error_code),
        late.error_message
    );
    let next = txn_produce(&client, id, 2, 1, (pid, epoch + 1, 0), "next-txn").await?;
    assert_eq!(code(next.error_code), ErrorCode::None, "{}", next.error_message);
    assert_eq!(values(&client, 1, rc).await?, vec!["order-2", "v2-order"], "the next transaction is still open");
    assert!(!values(&client, 1, ru).await?.contains(&"late".to_string()));
    Ok(())
}

/// Every value of `topic` a reader at `isolation` gets, over all its partitions, sorted.
async fn all_values(
    client: &Client,
    topic: &str,
    isolation: rill_client::IsolationLevel,
) -> anyhow::Result<Vec<String>> {
    let count = client.partition_count(topic).await?;
    let mut consumer = rill_client::Consumer::new(
        client.clone(),
        rill_client::ConsumerConfig { isolation_level: isolation, ..Default::default() },
    );
    consumer.assign((0..count).map(|p| rill_client::TopicPartition::new(topic, p)));
    let mut out = Vec::new();
    // Read until every partition's position reached the end this isolation level reads to.
    let ends: Vec<u64> = {
        let mut v = Vec::new();
        for p in 0..count {
            v.push(client.list_offset_at(topic, p, rill_client::OffsetSpec::Latest, isolation).await?);
        }
        v
    };
    let deadline = tokio::time::Instant::now() + MARKERS_TIMEOUT;
    loop {
        for r in consumer.poll(Duration::from_millis(200)).await? {
            out.push(String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned());
        }
        let mut at_end = true;
        for p in 0..count {
            let position = consumer.position(&rill_client::TopicPartition::new(topic, p)).unwrap_or(0);
            at_end &= position >= ends[p as usize];
        }
        if at_end {
            break;
        }
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "a reader did not reach the end: {out:?}");
    }
    out.sort();
    Ok(out)
}

/// Transactions from real processes: `rill produce --transactional-id` commits and aborts,
/// consumers read at both isolation levels; a transactional producer SIGKILLed mid-transaction
/// is aborted on its timeout and read_committed readers move past it; a zombie instance of the
/// Rust client's transactional producer is fenced and none of its records become visible.
#[tokio::test]
async fn committed_and_aborted_transactions_from_real_producers() -> anyhow::Result<()> {
    use rill_client::{IsolationLevel as Iso, ProducerConfig, Record, TransactionErrorKind, TransactionalProducer};
    init_logs();
    let cluster = TestCluster::start(3).await?;
    let client = cluster.client().await?;
    cluster.create_topic(&client, "orders", 3, 3, &[]).await?;
    cluster.wait_for_leaders(&client, TRANSACTIONS).await?;

    tracing::info!("--- rill produce commits transactions of 3 and aborts others, interleaved over 3 partitions");
    let committed: Vec<String> = (0..7).map(|i| format!("paid-{i}")).collect();
    let aborted: Vec<String> = (0..4).map(|i| format!("void-{i}")).collect();
    let lines = |v: &[String]| v.iter().map(|s| format!("{s}\n")).collect::<String>();
    let out = crate::t70_cli::rill(
        &cluster,
        &["produce", "orders", "--transactional-id", "cli-paid", "--transaction-size", "3"],
        Some(&lines(&committed)),
    )?;
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("7 record(s) in 3 transaction(s) committed"), "{out:?}");
    let out = crate::t70_cli::rill(
        &cluster,
        &["produce", "orders", "--transactional-id", "cli-void", "--transaction-size", "2", "--abort"],
        Some(&lines(&aborted)),
    )?;
    assert!(out.status.success(), "{out:?}");
    let mut want_committed = committed.clone();
    want_committed.sort();
    let mut everything = [committed.clone(), aborted.clone()].concat();
    everything.sort();
    // Each commit was answered once decided; the last one's markers land just after.
    wait_for_state(&client, "cli-paid", "CompleteCommit").await?;
    wait_for_state(&client, "cli-void", "CompleteAbort").await?;
    assert_eq!(all_values(&client, "orders", Iso::ReadCommitted).await?, want_committed);
    assert_eq!(all_values(&client, "orders", Iso::ReadUncommitted).await?, everything);
    let out = crate::t70_cli::rill(
        &cluster,
        &["consume", "orders", "--from-beginning", "--timeout-ms", "2000", "--isolation-level", "read_uncommitted"],
        None,
    )?;
    let mut printed: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect();
    printed.sort();
    assert_eq!(printed, everything, "{out:?}");
    let out = crate::t70_cli::rill(&cluster, &["txn", "describe", "cli-void", "--output", "json"], None)?;
    assert!(out.status.success(), "{out:?}");
    let d: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(d["state"], "CompleteAbort", "{d}");

    tracing::info!("--- a transactional producer SIGKILLed mid-transaction is aborted on its timeout");
    use std::io::Write;
    let mut child = std::process::Command::new(crate::harness::bin("rill"))
        .args(["--bootstrap", &cluster.bootstrap_arg(), "produce", "orders", "--partition", "1"])
        .args(["--transactional-id", "crashing", "--transaction-size", "1000", "--transaction-timeout-ms", "2000"])
        .args(["--linger-ms", "0"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let before = client.list_offset_at("orders", 1, rill_client::OffsetSpec::Latest, Iso::ReadUncommitted).await?;
    {
        let stdin = child.stdin.as_mut().ok_or_else(|| anyhow::anyhow!("no stdin"))?;
        stdin.write_all(b"lost-1\nlost-2\n")?;
        stdin.flush()?;
    }
    wait_for(READY_TIMEOUT, "the open transaction's records to be written", || async {
        let hw =
            client.list_offset_at("orders", 1, rill_client::OffsetSpec::Latest, Iso::ReadUncommitted).await.ok()?;
        (hw >= before + 2).then_some(())
    })
    .await?;
    let lso = client.list_offset_at("orders", 1, rill_client::OffsetSpec::Latest, Iso::ReadCommitted).await?;
    assert_eq!(lso, before, "the open transaction holds the last stable offset");
    child.kill()?;
    child.wait()?;
    wait_for_state(&client, "crashing", "CompleteAbort").await?;
    wait_for(MARKERS_TIMEOUT, "the last stable offset to reach the high watermark", || async {
        let f = client.fetch("orders", 1, Some(before), Duration::ZERO).await.ok()?;
        (f.last_stable_offset == f.high_watermark && f.next_offset == f.high_watermark).then_some(f)
    })
    .await?;
    assert_eq!(all_values(&client, "orders", Iso::ReadCommitted).await?, want_committed, "nothing of it, ever");

    tracing::info!("--- a zombie is fenced by a new instance: nothing it sent becomes visible");
    let config = ProducerConfig { linger: Duration::ZERO, ..ProducerConfig::default() };
    let zombie = TransactionalProducer::new(client.clone(), config, "shop", Duration::from_secs(60));
    zombie.init_transactions().await?;
    zombie.begin_transaction()?;
    zombie.send_to("orders", 2, Record::new("zombie-1")).await?.await?;
    let successor = TransactionalProducer::new(client.clone(), config, "shop", Duration::from_secs(60));
    successor.init_transactions().await?;
    successor.begin_transaction()?;
    successor.send_to("orders", 2, Record::new("successor-1")).await?.await?;
    successor.commit_transaction().await?;
    let e = zombie.commit_transaction().await.expect_err("the zombie is fenced");
    assert_eq!(e.transaction_kind(), TransactionErrorKind::Fatal, "{e}");
    // A commit is answered once decided; its markers land just after.
    wait_for_state(&client, "shop", "CompleteCommit").await?;
    let mut want = [want_committed, vec!["successor-1".to_string()]].concat();
    want.sort();
    assert_eq!(all_values(&client, "orders", Iso::ReadCommitted).await?, want);
    Ok(())
}

/// The offsets `group` has committed for `orders`/0, as a plain `FetchOffsets` and as one with
/// `require_stable` answer them: (offset, the stable answer's code).
async fn group_offset(client: &Client, group: &str) -> anyhow::Result<(Option<u64>, ErrorCode)> {
    use rill_proto::groups::groups_client::GroupsClient;
    use rill_proto::groups::{FetchOffsetsRequest, FetchOffsetsTopic};
    let tp = rill_client::TopicPartition::new("orders", 0);
    let plain = client.committed_offsets(group, std::slice::from_ref(&tp)).await?;
    let (_, addr) = client.find_coordinator(Coordinator::Group, group).await?;
    let mut raw = GroupsClient::connect(format!("http://{addr}")).await?;
    let stable = raw
        .fetch_offsets(FetchOffsetsRequest {
            group_id: group.into(),
            topics: vec![FetchOffsetsTopic { topic: "orders".into(), partitions: vec![0] }],
            require_stable: true,
        })
        .await?
        .into_inner();
    anyhow::ensure!(stable.error_code == 0, "{}", stable.error_message);
    let stable_code = code(stable.topics[0].partitions[0].error_code);
    Ok((plain.get(&tp).cloned().flatten().map(|c| c.offset), stable_code))
}

#[tokio::test]
async fn consumed_offsets_commit_with_the_transaction_and_only_then() -> anyhow::Result<()> {
    use rill_client::{Consumer, ConsumerConfig, OffsetSpec, Producer, ProducerConfig, Record, TransactionalProducer};
    init_logs();
    let cluster = TestCluster::start(3).await?;
    let client = cluster.client().await?;
    cluster.create_topic(&client, "orders", 1, 3, &[]).await?;
    cluster.create_topic(&client, "invoices", 1, 3, &[]).await?;
    cluster.wait_for_leaders(&client, TRANSACTIONS).await?;
    cluster.wait_for_leaders(&client, "__consumer_offsets").await?;
    let config = ProducerConfig { linger: Duration::ZERO, ..ProducerConfig::default() };
    let orders = Producer::new(client.clone(), config);
    for i in 0..6 {
        orders.send_to("orders", 0, Record::new(format!("order-{i}"))).await?.await?;
    }
    orders.close().await;

    tracing::info!("--- a subscribed consumer reads the orders");
    let consumer_config =
        ConsumerConfig { group_id: Some("billing".into()), start: OffsetSpec::Earliest, ..ConsumerConfig::default() };
    let mut consumer = Consumer::new(client.clone(), consumer_config.clone());
    consumer.subscribe(&["orders"])?;
    let mut read = Vec::new();
    let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
    while read.len() < 6 {
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "read only {} orders", read.len());
        read.extend(consumer.poll(Duration::from_millis(500)).await?);
    }
    let group = consumer.group_metadata()?;
    assert!(group.member.is_some(), "a subscribed consumer commits as its member");
    let tp = rill_client::TopicPartition::new("orders", 0);

    tracing::info!("--- offsets sent in a transaction are pending until it commits");
    let invoicer = TransactionalProducer::new(client.clone(), config, "billing-1", Duration::from_secs(60));
    invoicer.init_transactions().await?;
    invoicer.begin_transaction()?;
    for r in &read[..3] {
        invoicer.send_to("invoices", 0, Record::new(format!("invoice-for-{}", r.offset))).await?;
    }
    invoicer.send_offsets_to_transaction(&[(tp.clone(), 3)], &group).await?;
    assert_eq!(
        group_offset(&client, "billing").await?,
        (None, ErrorCode::UnstableOffsetCommit),
        "pending: not committed, and unstable to a consumer that requires stable offsets"
    );
    invoicer.commit_transaction().await?;
    wait_for_state(&client, "billing-1", "CompleteCommit").await?;
    assert_eq!(group_offset(&client, "billing").await?, (Some(3), ErrorCode::None), "committed with the output");

    tracing::info!("--- offsets sent in an aborted transaction are dropped with it");
    invoicer.begin_transaction()?;
    for r in &read[3..] {
        invoicer.send_to("invoices", 0, Record::new(format!("invoice-for-{}", r.offset))).await?;
    }
    invoicer.send_offsets_to_transaction(&[(tp.clone(), 6)], &group).await?;
    invoicer.abort_transaction().await?;
    wait_for_state(&client, "billing-1", "CompleteAbort").await?;
    assert_eq!(group_offset(&client, "billing").await?, (Some(3), ErrorCode::None), "the abort dropped them");

    tracing::info!("--- offsets alone (no record) commit too");
    invoicer.begin_transaction()?;
    invoicer.send_offsets_to_transaction(&[(tp.clone(), 5)], &group).await?;
    invoicer.commit_transaction().await?;
    wait_for_state(&client, "billing-1", "CompleteCommit").await?;
    assert_eq!(group_offset(&client, "billing").await?, (Some(5), ErrorCode::None));

    tracing::info!("--- offsets that could not be sent keep the transaction from committing");
    invoicer.begin_transaction()?;
    invoicer.send_to("invoices", 0, Record::new("never-visible")).await?;
    let stranger = rill_client::ConsumerGroupMetadata { group_id: "billing".into(), member: Some(("x".into(), 1)) };
    let e = invoicer.send_offsets_to_transaction(&[(tp.clone(), 6)], &stranger).await.expect_err("not a member");
    assert_eq!(e.transaction_kind(), rill_client::TransactionErrorKind::Abortable, "{e}");
    let e = invoicer.commit_transaction().await.expect_err("no commit without the offsets");
    assert_eq!(e.transaction_kind(), rill_client::TransactionErrorKind::Abortable, "{e}");
    invoicer.abort_transaction().await?;
    wait_for_state(&client, "billing-1", "CompleteAbort").await?;
    assert_eq!(group_offset(&client, "billing").await?, (Some(5), ErrorCode::None));

    tracing::info!("--- refused: a group not in the transaction (v1), a committer that is not a member");
    let identity = invoicer.producer_id_and_epoch().ok_or_else(|| anyhow::anyhow!("no identity"))?;
    let offsets = [(tp.clone(), 6, String::new())];
    let member = group.member.as_ref().map(|(id, epoch)| (id.as_str(), *epoch));
    // A v1 TxnCommitOffsets needs AddOffsetsToTxn first; v2's (the Rust client's) adds the group.
    let (_, group_addr) = client.find_coordinator(Coordinator::Group, "billing").await?;
    let mut raw = rill_proto::groups::groups_client::GroupsClient::connect(format!("http://{group_addr}")).await?;
    let v1 = raw
        .txn_commit_offsets(rill_proto::groups::TxnCommitOffsetsRequest {
            transactional_id: "billing-1".into(),
            group_id: "billing".into(),
            producer_id: identity.0,
            producer_epoch: i32::from(identity.1),
            member_id: member.map(|(id, _)| id.to_string()).unwrap_or_default(),
            generation_id: member.map_or(-1, |(_, epoch)| epoch),
            topics: vec![rill_proto::groups::CommitTopic {
                topic: tp.topic.clone(),
                partitions: vec![rill_proto::groups::CommitPartition {
                    partition: tp.partition,
                    offset: 6,
                    metadata: String::new(),
                }],
            }],
            transaction_version: 1,
        })
        .await?
        .into_inner();
    assert_eq!(code(v1.error_code), ErrorCode::InvalidTxnState, "{}", v1.error_message);
    client.add_offsets_to_transaction("billing-1", identity, "billing").await?;
    let e = client
        .txn_commit_offsets("billing-1", identity, "billing", Some(("stranger", 1)), &offsets)
        .await
        .expect_err("not a member");
    assert_eq!(e.code(), Some(ErrorCode::UnknownMemberId), "{e}");
    let e = client
        .txn_commit_offsets("billing-1", (identity.0, identity.1 - 1), "billing", member, &offsets)
        .await
        .expect_err("an older epoch");
    assert!(matches!(e.code(), Some(ErrorCode::ProducerFenced | ErrorCode::InvalidProducerEpoch)), "{e}");
    client.end_transaction("billing-1", identity, false).await?;
    wait_for_state(&client, "billing-1", "CompleteAbort").await?;
    assert_eq!(group_offset(&client, "billing").await?, (Some(5), ErrorCode::None));

    tracing::info!("--- the group's next consumer starts where the last committed transaction left off");
    consumer.shutdown().await?;
    let mut next = Consumer::new(client.clone(), consumer_config);
    next.subscribe(&["orders"])?;
    let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
    let first = loop {
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "the next consumer read nothing");
        if let Some(r) = next.poll(Duration::from_millis(500)).await?.first() {
            break r.offset;
        }
    };
    assert_eq!(first, 5);

    tracing::info!("--- a read_committed reader of offsets a transaction holds pending: polls return by their timeout");
    let group = next.group_metadata()?;
    let orders = Producer::new(client.clone(), config);
    orders.send_to("orders", 0, Record::new("order-6")).await?.await?;
    orders.close().await;
    // The raw EndTxn above moved "billing-1" to an epoch this producer does not hold.
    invoicer.close().await;
    let invoicer = TransactionalProducer::new(client.clone(), config, "billing-2", Duration::from_secs(60));
    invoicer.init_transactions().await?;
    invoicer.begin_transaction()?;
    invoicer.send_offsets_to_transaction(&[(tp.clone(), 6)], &group).await?;
    let reader_config = ConsumerConfig {
        group_id: Some("billing".into()),
        start: OffsetSpec::Earliest,
        isolation_level: rill_client::IsolationLevel::ReadCommitted,
        ..ConsumerConfig::default()
    };
    let mut reader = Consumer::new(client.clone(), reader_config);
    // The group committed nothing for the invoices: that partition starts at once, at the
    // earliest offset, while the orders' start waits for the transaction.
    let invoices = rill_client::TopicPartition::new("invoices", 0);
    reader.assign([tp.clone(), invoices.clone()]);
    let (mut polls, mut invoices_read) = (0, 0);
    let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
    while polls < 3 || invoices_read == 0 {
        polls += 1;
        anyhow::ensure!(
            tokio::time::Instant::now() < deadline,
            "no invoice read while the orders' offsets were pending"
        );
        // A poll must not wait out the transaction (it once did, up to the client's retry budget).
        let polled = tokio::time::timeout(Duration::from_secs(10), reader.poll(Duration::from_millis(200))).await;
        let polled = polled.map_err(|_| anyhow::anyhow!("a 200 ms poll still running after 10 s"))??;
        assert!(polled.iter().all(|r| r.topic == "invoices"), "no order before its offsets settle: {polled:?}");
        invoices_read += polled.len();
    }
    assert_eq!(reader.position(&tp), None, "no position for the orders while their offsets are pending");
    invoicer.commit_transaction().await?;
    let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
    let first = loop {
        anyhow::ensure!(tokio::time::Instant::now() < deadline, "the reader read nothing");
        if let Some(r) = reader.poll(Duration::from_millis(500)).await?.iter().find(|r| r.topic == "orders") {
            break r.offset;
        }
    };
    assert_eq!(first, 6, "the reader starts at the offsets the transaction committed");
    reader.close();
    next.shutdown().await?;
    invoicer.close().await;
    Ok(())
}

/// The coordinator's leader dies after `PrepareCommit` is written and before every marker is:
/// one partition of the transaction (replication factor 1) is on a node frozen with SIGSTOP, so
/// its marker cannot be written, and the coordinator's node is SIGKILLed while the transaction
/// is `PrepareCommit`. Once the frozen node continues, the next leader of the coordinator's
/// partition finds the prepared record, writes the markers and completes the commit.
///
/// A marker is an `acks=all` write: the killed node stays in the ISR of `orders` (replication
/// factor 3) until `replica.lag.time.max.ms` passes, so the topic sets it short, as the other
/// tests that kill a follower do; with the 30 s default the marker would wait that long.
#[tokio::test]
async fn a_commit_prepared_when_its_coordinator_dies_is_completed_by_the_next_leader() -> anyhow::Result<()> {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    use rill_client::{IsolationLevel as Iso, ProducerConfig, Record, TransactionalProducer};
    init_logs();
    let mut cluster = TestCluster::start(3).await?;
    let client = cluster.client().await?;
    cluster.create_topic(&client, "solo", 1, 1, &[]).await?;
    cluster.create_topic(&client, "orders", 1, 3, &[("replica.lag.time.max.ms", "2000")]).await?;
    cluster.wait_for_leaders(&client, TRANSACTIONS).await?;
    let frozen =
        client.describe_topic("solo").await?.partitions[0].leader.ok_or_else(|| anyhow::anyhow!("no leader"))?;
    // A transactional id whose coordinator is on another node.
    let mut chosen = None;
    for i in 0..200 {
        let id = format!("prepared-{i}");
        let (node, _) = client.find_coordinator(Coordinator::Transaction, &id).await?;
        if node != frozen {
            chosen = Some((id, node));
            break;
        }
    }
    let (id, coordinator_node) = chosen.ok_or_else(|| anyhow::anyhow!("every id's coordinator is on node {frozen}"))?;

    let config = ProducerConfig { linger: Duration::ZERO, ..ProducerConfig::default() };
    let producer = TransactionalProducer::new(client.clone(), config, &id, Duration::from_secs(60));
    producer.init_transactions().await?;
    producer.begin_transaction()?;
    producer.send_to("solo", 0, Record::new("solo-1")).await?.await?;
    producer.send_to("orders", 0, Record::new("orders-1")).await?.await?;

    tracing::info!(frozen, coordinator_node, "--- freeze solo's only replica, commit: the commit is prepared");
    let pid = cluster.local().pid(frozen).ok_or_else(|| anyhow::anyhow!("node {frozen} has no process"))?;
    let pid = Pid::from_raw(i32::try_from(pid)?);
    kill(pid, Signal::SIGSTOP)?;
    let committed = producer.commit_transaction().await;
    let prepared = wait_for_state(&client, &id, "PrepareCommit").await;
    tracing::info!("--- SIGKILL the coordinator's node, continue the frozen one");
    cluster.kill(coordinator_node)?;
    kill(pid, Signal::SIGCONT)?;
    committed?;
    prepared?;

    if let Err(e) = wait_for_state(&client, &id, "CompleteCommit").await {
        let d = describe(&client, &id).await;
        anyhow::bail!("{e}: {d:?}\n{}", cluster.log_tails());
    }
    assert_eq!(all_values(&client, "solo", Iso::ReadCommitted).await?, ["solo-1"]);
    assert_eq!(all_values(&client, "orders", Iso::ReadCommitted).await?, ["orders-1"]);
    Ok(())
}

#[tokio::test]
async fn an_idle_transactional_id_expires_and_its_producer_id_is_retired() -> anyhow::Result<()> {
    init_logs();
    // One __transaction_state partition: both ids are checked by the same leader at the same
    // moment, so the open one is shown to stay while the idle one goes.
    let env = [
        ("RILL_TRANSACTION_STATE_PARTITIONS", "1"),
        ("RILL_TRANSACTIONAL_ID_EXPIRATION", "3s"),
        ("RILL_TRANSACTIONAL_ID_EXPIRATION_CHECK_INTERVAL", "1s"),
    ];
    let cluster = TestCluster::start_with(3, &env, None).await?;
    let client = cluster.client().await?;
    cluster.create_topic(&client, "orders", 1, 3, &[]).await?;
    cluster.wait_for_leaders(&client, TRANSACTIONS).await?;

    tracing::info!("--- an id with a transaction open, and one whose transaction committed after it");
    let busy = "busy";
    let (bpid, bepoch) =
        wait_for_ok(READY_TIMEOUT, "a transactional producer id", || client.init_transactional_producer(busy, 0))
            .await?;
    let mut b = coordinator(&client, busy).await?;
    let r = b.add_partitions_to_txn(add(busy, bpid, bepoch, "orders", &[0])).await?.into_inner();
    assert_eq!(code(r.error_code), ErrorCode::None, "{}", r.error_message);
    let id = "retired";
    let (pid, epoch) = client.init_transactional_producer(id, 0).await?;
    let r = txn_produce(&client, id, 2, 0, (pid, epoch, 0), "before").await?;
    assert_eq!(code(r.error_code), ErrorCode::None, "{}", r.error_message);
    let mut c = coordinator(&client, id).await?;
    let end = |commit: bool| EndTxnRequest {
        transactional_id: id.into(),
        producer_id: pid,
        producer_epoch: epoch.into(),
        commit,
        transaction_version: 2,
    };
    let ended = c.end_txn(end(true)).await?.into_inner();
    assert_eq!(code(ended.error_code), ErrorCode::None, "{}", ended.error_message);
    wait_for_state(&client, id, "CompleteCommit").await?;

    tracing::info!("--- the idle id is removed; the open one, idle longer, stays");
    wait_for(MARKERS_TIMEOUT, "the idle transactional id to expire", || async {
        let d = describe(&client, id).await.ok()?;
        (code(d.error_code) == ErrorCode::TransactionalIdNotFound).then_some(())
    })
    .await?;
    let d = describe(&client, busy).await?;
    assert_eq!((d.state.as_str(), d.producer_id), ("Ongoing", bpid), "an open transaction's id is kept");

    tracing::info!("--- its old producer is refused everywhere; the id starts afresh under a new producer id");
    let zombie = c.end_txn(end(true)).await?.into_inner();
    assert_eq!(code(zombie.error_code), ErrorCode::InvalidProducerIdMapping, "{}", zombie.error_message);
    let zombie = c.add_partitions_to_txn(add(id, pid, epoch + 1, "orders", &[0])).await?.into_inner();
    assert_eq!(code(zombie.error_code), ErrorCode::InvalidProducerIdMapping, "{}", zombie.error_message);
    let late = txn_produce(&client, id, 2, 0, (pid, epoch + 1, 0), "zombie").await?;
    // A partition answers a refusal of its verification as fencing: the instance is done.
    assert_eq!(code(late.error_code), ErrorCode::ProducerFenced, "{}", late.error_message);
    assert!(late.error_message.contains("has producer id -1"), "{}", late.error_message);
    let (pid2, epoch2) = client.init_transactional_producer(id, 0).await?;
    assert!(pid2 != pid && epoch2 == 0, "a new producer id at epoch 0, got ({pid2}, {epoch2}) after ({pid}, {epoch})");
    let r = txn_produce(&client, id, 2, 0, (pid2, epoch2, 0), "after").await?;
    assert_eq!(code(r.error_code), ErrorCode::None, "{}", r.error_message);
    let ended =
        c.end_txn(EndTxnRequest { producer_id: pid2, producer_epoch: epoch2.into(), ..end(true) }).await?.into_inner();
    assert_eq!(code(ended.error_code), ErrorCode::None, "{}", ended.error_message);
    let ended = b
        .end_txn(EndTxnRequest {
            transactional_id: busy.into(),
            producer_id: bpid,
            producer_epoch: bepoch.into(),
            commit: false,
            transaction_version: 1,
        })
        .await?
        .into_inner();
    assert_eq!(code(ended.error_code), ErrorCode::None, "{}", ended.error_message);
    let committed = wait_for(MARKERS_TIMEOUT, "both transactions' records read committed", || async {
        let v = values(&client, 0, IsolationLevel::ReadCommitted).await.ok()?;
        (v.len() == 2).then_some(v)
    })
    .await?;
    assert_eq!(committed, vec!["before", "after"], "the retired producer's batch was never written");
    Ok(())
}

/// The `__transaction_state` partition of `id`: Java's `String.hashCode` made non-negative,
/// modulo `partitions` (Kafka's rule, which Rill follows), computed here on its own so the test
/// does not borrow the server's code.
fn state_partition(id: &str, partitions: u32) -> u32 {
    let hash = id.encode_utf16().fold(0i32, |h, unit| h.wrapping_mul(31).wrapping_add(i32::from(unit)));
    (hash & 0x7fff_ffff) as u32 % partitions.max(1)
}

#[tokio::test]
async fn describing_many_ids_answers_each_in_its_place_from_its_coordinator() -> anyhow::Result<()> {
    init_logs();
    let cluster = TestCluster::start(3).await?;
    let client = cluster.client().await?;
    cluster.create_topic(&client, "orders", 1, 3, &[]).await?;
    cluster.wait_for_leaders(&client, TRANSACTIONS).await?;
    let partitions = u32::try_from(client.describe_topic(TRANSACTIONS).await?.partitions.len())?;

    tracing::info!("--- one id on every {TRANSACTIONS} partition, every other one with a transaction open");
    let mut ids = Vec::new();
    let mut covered = std::collections::BTreeSet::new();
    for i in 0..10_000 {
        let id = format!("many-{i}");
        if covered.insert(state_partition(&id, partitions)) {
            ids.push(id);
        }
        if covered.len() == partitions as usize {
            break;
        }
    }
    assert_eq!(covered.len(), partitions as usize);
    let mut expected = std::collections::BTreeMap::new();
    // Transactions that outlast the test: none is aborted on its timeout meanwhile.
    let timeout_ms = 900_000;
    for (i, id) in ids.iter().enumerate() {
        let (pid, epoch) = wait_for_ok(READY_TIMEOUT, "a transactional producer id", || {
            client.init_transactional_producer(id, timeout_ms)
        })
        .await?;
        let state = if i % 2 == 0 {
            let r = coordinator(&client, id).await?.add_partitions_to_txn(add(id, pid, epoch, "orders", &[0])).await?;
            let r = r.into_inner();
            assert_eq!(code(r.error_code), ErrorCode::None, "{id}: {}", r.error_message);
            "Ongoing"
        } else {
            "Empty"
        };
        expected.insert(id.clone(), (pid, state));
    }
    // Asked in another order than created, an unknown id among them.
    let mut asked: Vec<String> = ids.iter().rev().cloned().collect();
    asked.insert(asked.len() / 2, "many-unknown".to_string());

    tracing::info!("--- every node, asked for all of them at once, answers each id in its place");
    // Sixteen partitions over three nodes: a node leads several, and answers for all of them in
    // one request. Retried only while leadership moves between the three requests (an id
    // answered by two nodes or by none, or a leader still loading); a description out of place
    // fails at once.
    wait_for_ok(READY_TIMEOUT, "one answer for every id from its coordinator", || async {
        let mut answered_by = std::collections::BTreeMap::new();
        for node in 1..=3u64 {
            let mut stub = TransactionsClient::connect(format!("http://{}", cluster.addr(node))).await?;
            let r = stub
                .describe_transactions(DescribeTransactionsRequest { transactional_ids: asked.clone() })
                .await?
                .into_inner();
            assert_eq!(r.transactions.len(), asked.len(), "node {node}: one description per id asked");
            for (d, id) in r.transactions.iter().zip(&asked) {
                assert_eq!(&d.transactional_id, id, "node {node}: descriptions in the order asked");
                match (code(d.error_code), expected.get(id)) {
                    (ErrorCode::NotCoordinator, _) => continue,
                    (ErrorCode::None, Some(&(pid, state))) => {
                        assert_eq!((d.producer_id, d.state.as_str()), (pid, state), "node {node}: {id}");
                    }
                    (ErrorCode::TransactionalIdNotFound, None) => {}
                    (other, _) => anyhow::bail!("node {node}: {id}: {other:?} {}", d.error_message),
                }
                if let Some(before) = answered_by.insert(id.clone(), node) {
                    anyhow::bail!("{id} answered by nodes {before} and {node}");
                }
            }
        }
        anyhow::ensure!(answered_by.len() == asked.len(), "answered {} of {} ids", answered_by.len(), asked.len());
        anyhow::Ok(())
    })
    .await?;
    Ok(())
}

#[tokio::test]
async fn offsets_sent_to_a_transaction_end_the_linger_of_its_records() -> anyhow::Result<()> {
    use rill_client::{ConsumerGroupMetadata, ProducerConfig, Record, TopicPartition, TransactionalProducer};
    init_logs();
    let cluster = TestCluster::start(3).await?;
    let client = cluster.client().await?;
    cluster.create_topic(&client, "orders", 2, 3, &[]).await?;
    cluster.wait_for_leaders(&client, TRANSACTIONS).await?;
    cluster.wait_for_leaders(&client, "__consumer_offsets").await?;
    // A linger far longer than this test may take: only an early send delivers in time.
    let config = ProducerConfig { linger: Duration::from_secs(600), ..ProducerConfig::default() };
    let producer = TransactionalProducer::new(client.clone(), config, "lingering", Duration::from_secs(60));
    producer.init_transactions().await?;

    tracing::info!("--- records sent in a transaction linger until its offsets are sent");
    producer.begin_transaction()?;
    let first = producer.send_to("orders", 0, Record::new("first")).await?;
    let second = producer.send_to("orders", 1, Record::new("second")).await?;
    for p in 0..2 {
        assert!(values(&client, p, IsolationLevel::ReadUncommitted).await?.is_empty(), "partition {p} lingers");
    }
    let group = ConsumerGroupMetadata { group_id: "lingering-readers".into(), member: None };
    producer.send_offsets_to_transaction(&[(TopicPartition::new("orders", 0), 1)], &group).await?;
    let acknowledged = tokio::time::timeout(MARKERS_TIMEOUT, async { (first.await, second.await) }).await;
    let (first, second) = acknowledged.map_err(|_| anyhow::anyhow!("the records still lingered"))?;
    assert_eq!((first?.offset, second?.offset), (Some(0), Some(0)));

    tracing::info!("--- a record sent after the offsets lingers again, until the commit sends it");
    let third = producer.send_to("orders", 0, Record::new("third")).await?;
    assert_eq!(values(&client, 0, IsolationLevel::ReadUncommitted).await?, vec!["first"]);
    producer.commit_transaction().await?;
    assert_eq!(third.await?.offset, Some(1));
    let committed = wait_for(MARKERS_TIMEOUT, "the transaction read committed", || async {
        let v = values(&client, 0, IsolationLevel::ReadCommitted).await.ok()?;
        (v.len() == 2).then_some(v)
    })
    .await?;
    assert_eq!(committed, vec!["first", "third"]);
    producer.close().await;
    Ok(())
}
