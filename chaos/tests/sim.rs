//! Simulation scenarios (one test binary). Build with `--cfg madsim`; see `chaos/run`.
//!
//! Every scenario prints its seed first; `MADSIM_TEST_SEED=<seed>` replays it exactly and the
//! printed trace hash must match. The generated scenarios live in `rill_chaos::scenarios`; each
//! has a test of the same name here. `smoke_leader_power_failure_and_rejoin`,
//! `woken_quiescent_group_keeps_its_leader`, `concurrent_batches_share_entries`,
//! `control_batches_take_offsets_and_are_skipped`,
//! `state_partition_purges_and_installs_snapshots`,
//! `a_deposed_offsets_coordinator_never_answers_a_stale_offset`,
//! `a_late_copy_of_a_marker_never_decides_the_next_transaction`,
//! `a_groups_owed_marker_comes_before_the_next_transactions_offsets`,
//! `record_partition_installs_a_snapshot_with_its_records`,
//! `a_long_snapshot_transfer_keeps_its_leader`,
//! `a_leader_dying_with_its_last_entry_on_one_follower_is_replaced_by_that_follower`,
//! `a_failed_disk_takes_its_node_out`,
//! `an_acks_0_flood_waits_for_the_log`, `consumer_group_members_never_share_a_partition`,
//! `an_owner_hears_at_once_that_a_joining_member_needs_its_partitions`,
//! `held_heartbeats_keep_a_short_session`, `a_group_of_fifty_settles_and_takes_new_partitions_within_seconds`,
//! `a_lone_member_hears_at_once_that_its_topic_grew`
//! are scripted.

#![cfg(madsim)]
// Test code: a failed expectation is a failed test.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rill_broker::{PartitionError, ReplicaState};
use rill_chaos::checkers::group_delivery;
use rill_chaos::classic_run;
use rill_chaos::cluster::{init_logs, SimCluster, SimOptions};
use rill_chaos::group_run::{self, CRASH, LEAVE, RUN};
use rill_chaos::scenarios;
use rill_chaos::share_run;
use rill_chaos::trace::Trace;
use rill_chaos::{ctp_run, txn_run};
use rill_client::{Acks, Client, Record};
use rill_server::node::Hosted;

/// Simulated time allowed for elections and catch-up.
const SETTLE: Duration = Duration::from_secs(30);

async fn wait_until<T, F, Fut>(what: &str, f: F) -> T
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = rill_rt::now() + SETTLE;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(rill_rt::now() < deadline, "timed out (simulated {SETTLE:?}) waiting for {what}");
        madsim::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Produces `n` single-record batches `"{prefix}-{i}"` with acks=all; returns value → offset for
/// the acknowledged ones (others have an unknown outcome).
async fn produce(
    client: Client,
    trace: Trace,
    topic: &'static str,
    prefix: &'static str,
    n: usize,
) -> Vec<(String, Option<u64>)> {
    let mut out = Vec::new();
    for i in 0..n {
        let v = format!("{prefix}-{i}");
        let r = client.produce(topic, 0, vec![Record::new(v.clone())], Acks::All).await;
        trace.record(format!(
            "send {v} -> {:?} at {:?}",
            r.as_ref().map(|a| a.base_offset).map_err(|e| e.code()),
            elapsed()
        ));
        out.push((v, r.ok().and_then(|a| a.base_offset)));
    }
    out
}

/// Reads partition 0 of `topic` from the start with a fresh client and checks that every
/// acknowledged write (value, offset) is there exactly once at its offset and that no write of
/// unknown outcome is there twice. Each record read goes into `trace` when one is given.
async fn check_read_once(
    cluster: &SimCluster,
    topic: &'static str,
    acked: &[(String, Option<u64>)],
    trace: Option<&Trace>,
) {
    let fresh = cluster.client().await;
    let read = cluster
        .on_client(async move {
            let mut out = Vec::new();
            let mut offset = 0;
            loop {
                let f = fresh.fetch(topic, 0, Some(offset), Duration::ZERO).await.expect("fetch");
                if f.records.is_empty() {
                    break out;
                }
                offset = f.next_offset;
                out.extend(f.records);
            }
        })
        .await;
    let mut at: HashMap<String, Vec<u64>> = HashMap::new();
    for r in &read {
        let value = String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned();
        if let Some(trace) = trace {
            trace.record(format!("read {value}@{}", r.offset));
        }
        at.entry(value).or_default().push(r.offset);
    }
    for (v, offset) in acked {
        match offset {
            Some(o) => assert_eq!(at.get(v), Some(&vec![*o]), "acknowledged {v} must be read once at offset {o}"),
            None => assert!(at.get(v).is_none_or(|o| o.len() <= 1), "{v} stored twice"),
        }
    }
}

/// Simulated time since the simulation started (part of the trace: any divergence shifts it).
fn elapsed() -> Duration {
    madsim::time::TimeHandle::current().elapsed()
}

/// The start of every scripted scenario: logs, the seed printed first (for replay), a trace.
fn begin_scripted() -> Trace {
    init_logs();
    println!("seed: {}", madsim::runtime::Handle::current().seed());
    if let Some(m) = rill_chaos::run::arm_mutation() {
        println!("mutation: {m}");
    }
    Trace::new()
}

/// The state of every node's replica of the cluster's single partition, when every node has one.
fn replica_states(cluster: &SimCluster) -> Option<Vec<ReplicaState>> {
    cluster.ids().iter().map(|id| cluster.node(*id).and_then(|n| n.partitions().first().map(|p| p.state()))).collect()
}

/// Smoke: 3 nodes elect, commit, lose their leader to a crash with power failure, elect a new
/// one, take the old one back, and converge to identical logs with every acknowledged write.
#[madsim::test]
async fn smoke_leader_power_failure_and_rejoin() {
    let trace = begin_scripted();
    let cluster = SimCluster::start(3);
    let client = cluster.client().await;

    let c = client.clone();
    cluster.on_client(async move { c.create_topic("smoke", 1, 3, &[]).await.map(|_| ()) }).await.expect("create topic");
    let c = client.clone();
    let leader = cluster
        .on_client(async move {
            wait_until("a leader", || async { c.describe_topic("smoke").await.ok()?.partitions[0].leader }).await
        })
        .await;
    trace.record(format!("first leader {leader}"));

    // --- commit writes
    let mut acked: Vec<(String, Option<u64>)> =
        cluster.on_client(produce(client.clone(), trace.clone(), "smoke", "a", 20)).await;
    assert!(acked.iter().all(|(_, o)| o.is_some()), "a healthy cluster acknowledges every write");

    // --- crash and power-fail the leader, losing some of its unsynced writes
    let keep = (rill_rt::random_u64() as usize) % (cluster.unsynced_batches(leader) + 1);
    trace.record(format!("power-fail {leader} keep {keep}"));
    cluster.power_fail(leader, keep);

    // --- a new leader takes over and commits more
    let c = client.clone();
    let new_leader = cluster
        .on_client(async move {
            wait_until("a new leader", || async {
                let l = c.describe_topic("smoke").await.ok()?.partitions[0].leader?;
                (l != leader).then_some(l)
            })
            .await
        })
        .await;
    trace.record(format!("new leader {new_leader}"));
    acked.extend(cluster.on_client(produce(client.clone(), trace.clone(), "smoke", "b", 20)).await);

    // --- the old leader rejoins and converges
    cluster.restart(leader);
    let ids = cluster.ids();
    let hw = wait_until("every replica at the same high watermark", || {
        let states = replica_states(&cluster);
        async move {
            let states = states?;
            let hw = states[0].high_watermark;
            states.iter().all(|s| s.high_watermark == hw && s.log_end_offset == hw && hw > 0).then_some(hw)
        }
    })
    .await;
    trace.record(format!("converged at {hw} at {:?}", elapsed()));

    // Replicas agree byte for byte on every committed entry.
    let logs: BTreeMap<u64, Vec<(u64, u64, bytes::Bytes)>> = ids
        .iter()
        .map(|id| {
            let node = cluster.node(*id).expect("node up");
            let p = node.partitions().into_iter().next().expect("replica");
            (*id, p.entry_bodies().expect("read log"))
        })
        .collect();
    let first = logs.values().next().expect("a log").clone();
    for (id, log) in &logs {
        assert_eq!(log, &first, "node {id}'s log differs from node {}'s", ids[0]);
    }

    // --- a fresh client reads every acknowledged write exactly once at its offset
    check_read_once(&cluster, "smoke", &acked, Some(&trace)).await;
    println!("trace-hash: {:016x} events={}", trace.hash(), trace.len());
}

/// Scripted: the partition leader's disk starts failing its syncs (an injected I/O error). Its
/// node stops every Raft group and answers pings as unhealthy, so another replica leads,
/// acks=all writes go on, the cluster reports the node down, and every acknowledged write is
/// read back once at its offset.
#[madsim::test]
async fn a_failed_disk_takes_its_node_out() {
    let trace = begin_scripted();
    let cluster = SimCluster::start(3);
    let client = cluster.client().await;
    let c = client.clone();
    cluster.on_client(async move { c.create_topic("disk", 1, 3, &[]).await.map(|_| ()) }).await.expect("create topic");
    let c = client.clone();
    let leader = cluster
        .on_client(async move {
            wait_until("a leader", || async { c.describe_topic("disk").await.ok()?.partitions[0].leader }).await
        })
        .await;
    let mut acked = cluster.on_client(produce(client.clone(), trace.clone(), "disk", "a", 10)).await;
    assert!(acked.iter().all(|(_, o)| o.is_some()), "a healthy cluster acknowledges every write");

    trace.record(format!("disk of {leader} fails"));
    cluster.disk(leader).expect("the leader's disk").set_failure(Some("EIO (injected)".into()));
    // The failure shows at the leader's next write: these writes' outcome is unknown.
    acked.extend(cluster.on_client(produce(client.clone(), trace.clone(), "disk", "x", 3)).await);
    let c = client.clone();
    let new_leader = cluster
        .on_client(async move {
            wait_until("a leader on a healthy node", || async {
                let l = c.describe_topic("disk").await.ok()?.partitions[0].leader?;
                (l != leader).then_some(l)
            })
            .await
        })
        .await;
    trace.record(format!("new leader {new_leader} at {:?}", elapsed()));
    let more = cluster.on_client(produce(client.clone(), trace.clone(), "disk", "b", 10)).await;
    assert!(more.iter().all(|(_, o)| o.is_some()), "the two healthy replicas acknowledge every write");
    acked.extend(more);
    let c = client.clone();
    cluster
        .on_client(async move {
            wait_until("the failed node reported down", || async {
                let nodes = c.describe_cluster().await.ok()?.nodes;
                nodes.iter().any(|n| n.node_id == leader && !n.alive).then_some(())
            })
            .await
        })
        .await;
    assert!(
        cluster.node(leader).is_some_and(|n| n.multi().group_ids().is_empty()),
        "the failed node must run no Raft group any more"
    );

    check_read_once(&cluster, "disk", &acked, None).await;
    println!("trace-hash: {:016x} events={}", trace.hash(), trace.len());
}

/// Scripted: 100 acks=0 produce requests of about 1 MB each reach one partition at once, on
/// disks that take 50 ms per sync. acks=0 is answered as soon as the batch is queued, so
/// without a bound the leader would queue all 100 MB; with the 32 MiB bound on a partition's
/// write queue (`rill_broker::propose`), sampled every 10 ms on every replica throughout, it
/// never holds more, every request is answered, the partition then takes an acks=all write,
/// and no batch is stored twice.
#[madsim::test]
async fn an_acks_0_flood_waits_for_the_log() {
    const REQUESTS: usize = 100;
    let trace = begin_scripted();
    let (cluster, client) = slow_disk_cluster(Duration::from_millis(50), "flood").await;
    let c = client.clone();
    let flood = cluster.on_client(async move {
        let sends: Vec<_> = (0..REQUESTS)
            .map(|i| {
                let c = c.clone();
                rill_rt::spawn(async move {
                    let value = vec![i as u8; 1_000_000];
                    (i, c.produce("flood", 0, vec![Record::new(value)], Acks::None).await.map(|_| ()))
                })
            })
            .collect();
        for send in sends {
            let (i, r) = send.await.expect("send task");
            r.unwrap_or_else(|e| panic!("request {i} failed: {e}"));
        }
        elapsed()
    });
    // Watch every replica's queue while the requests are in flight.
    let watch = async {
        let mut peak = 0;
        loop {
            for id in cluster.ids() {
                if let Some(node) = cluster.node(id) {
                    for p in node.partitions() {
                        peak = peak.max(p.queued_bytes());
                    }
                }
            }
            madsim::time::sleep(Duration::from_millis(10)).await;
            if peak > 0
                && cluster
                    .ids()
                    .iter()
                    .all(|id| cluster.node(*id).is_none_or(|n| n.partitions().iter().all(|p| p.queued_bytes() == 0)))
            {
                return peak;
            }
        }
    };
    let (answered, peak) = tokio::join!(flood, watch);
    let summary = format!("every acks=0 request answered by {answered:?}; the write queue peaked at {peak} bytes");
    println!("{summary}");
    trace.record(summary);
    assert!(peak > 10_000_000, "the flood never filled the queue ({peak} bytes): the test shows nothing");
    assert!(peak <= rill_broker::propose::MAX_QUEUED_BYTES, "the write queue held {peak} bytes");

    // The partition still takes acks=all writes; acks=0 batches are stored at most once (a
    // leader change may lose queued ones: acks=0 promises nothing).
    let fresh = cluster.client().await;
    let (after, end) = cluster
        .on_client(async move {
            let after = wait_until("an acks=all write after the flood", || {
                let fresh = fresh.clone();
                async move { fresh.produce("flood", 0, vec![Record::new("after")], Acks::All).await.ok()?.base_offset }
            })
            .await;
            let end = fresh.list_offset("flood", 0, rill_client::OffsetSpec::Latest).await.expect("log end");
            (after, end)
        })
        .await;
    trace.record(format!("acks=all write after the flood at {after}, log end {end}"));
    assert!(end <= REQUESTS as u64 + 1, "{end} records from {REQUESTS} batches and one write");
    println!("trace-hash: {:016x} events={}", trace.hash(), trace.len());
}

/// Three nodes whose disks take `sync_latency` per sync, with `topic` (one partition, RF 3)
/// created and led.
async fn slow_disk_cluster(sync_latency: Duration, topic: &'static str) -> (SimCluster, Client) {
    let cluster = SimCluster::start_with(SimOptions {
        nodes: 3,
        client_hosts: 1,
        sync_latency,
        transactional_id_expiration: None,
        groups: None,
        producer_limits: None,
        transaction_state_partitions: None,
    });
    let client = cluster.client().await;
    let c = client.clone();
    cluster
        .on_client(async move {
            // The metadata group elects on slow disks too: retry until the cluster takes it.
            wait_until("the topic created", || async { c.create_topic(topic, 1, 3, &[]).await.ok() }).await;
            wait_until("a leader", || async { c.describe_topic(topic).await.ok()?.partitions[0].leader }).await
        })
        .await;
    (cluster, client)
}

/// Three nodes with `topic` (`partitions` partitions, RF 3, `configs`) created and led, and
/// every partition of the topics in `also_led` led too.
async fn cluster_with_topic(
    topic: &'static str,
    partitions: u32,
    configs: &[(String, String)],
    also_led: &'static [&'static str],
) -> (SimCluster, Client) {
    let cluster = SimCluster::start(3);
    let client = cluster.client().await;
    let c = client.clone();
    let configs = configs.to_vec();
    cluster
        .on_client(async move {
            wait_until("the topic created", || async { c.create_topic(topic, partitions, 3, &configs).await.ok() })
                .await;
            for t in std::iter::once(topic).chain(also_led.iter().copied()) {
                c.wait_for_leaders(t, SETTLE).await.unwrap_or_else(|e| panic!("{t} has no leaders: {e}"));
            }
        })
        .await;
    (cluster, client)
}

/// The single partition's (leader, term) when every replica agrees on them.
fn agreed_leader(cluster: &SimCluster) -> Option<(u64, u64)> {
    let states = replica_states(cluster)?;
    let leader = states.iter().find(|s| s.is_leader)?;
    let agreed = states.iter().all(|s| s.leader == leader.leader && s.term == leader.term);
    agreed.then_some((leader.leader?, leader.term))
}

/// Scripted: a quiescent group woken by a write keeps its leader. Disks sync slowly (150 ms), so
/// the append that wakes a follower is answered long after the wake; meanwhile the follower
/// must judge its leader's silence by the leader's node (heard every ping), not by the group's
/// last heartbeat from before it quiesced — or its failover check deposes a live leader and the
/// write in flight fails.
#[madsim::test]
async fn woken_quiescent_group_keeps_its_leader() {
    let trace = begin_scripted();
    let (cluster, client) = slow_disk_cluster(Duration::from_millis(150), "quiet").await;
    for round in 0..3 {
        wait_until("the group quiescent on every replica", || {
            let quiet = replica_states(&cluster).is_some_and(|states| states.iter().all(|s| s.quiescent));
            async move { quiet.then_some(()) }
        })
        .await;
        // Quiescent well past the leader lease: the group's own last heartbeat is stale.
        madsim::time::sleep(Duration::from_secs(3)).await;
        let before = agreed_leader(&cluster).expect("a leader every replica agrees on");
        let written = cluster.on_client(produce(client.clone(), trace.clone(), "quiet", "w", 1)).await;
        assert!(written.iter().all(|(_, o)| o.is_some()), "round {round}: the write that woke the group failed");
        // Time for every failover check to have looked at the woken group.
        madsim::time::sleep(Duration::from_secs(2)).await;
        let after = wait_until("a leader every replica agrees on", || async { agreed_leader(&cluster) }).await;
        trace.record(format!("round {round}: leader/term {before:?} -> {after:?} at {:?}", elapsed()));
        assert_eq!(after, before, "round {round}: waking the group changed its leader or term");
    }
    println!("trace-hash: {:016x} events={}", trace.hash(), trace.len());
}

/// Scripted: batches that reach a partition while its previous entry is being synced go to Raft
/// together, as one entry, and each still lands at its own offset. Disks sync slowly (20 ms) and
/// 48 single-record batches (acks=all and acks=1 alternating) are sent at once: the log must hold
/// fewer entries than batches, every batch must be acknowledged at a distinct offset, and a read
/// from the beginning must find each value exactly at the offset it was acknowledged with.
#[madsim::test]
async fn concurrent_batches_share_entries() {
    const BATCHES: usize = 48;
    let trace = begin_scripted();
    let (cluster, client) = slow_disk_cluster(Duration::from_millis(20), "merged").await;
    let c = client.clone();
    let acked: Vec<(String, u64)> = cluster
        .on_client(async move {
            let sends: Vec<_> = (0..BATCHES)
                .map(|i| {
                    let c = c.clone();
                    let acks = if i % 2 == 0 { Acks::All } else { Acks::Leader };
                    rill_rt::spawn(async move {
                        let v = format!("m-{i}");
                        (v.clone(), c.produce("merged", 0, vec![Record::new(v)], acks).await)
                    })
                })
                .collect();
            let mut out = Vec::new();
            for send in sends {
                let (v, r) = send.await.expect("send task");
                let offset = r.unwrap_or_else(|e| panic!("{v} was not acknowledged: {e}")).base_offset;
                out.push((v.clone(), offset.unwrap_or_else(|| panic!("{v} acknowledged without an offset"))));
            }
            out
        })
        .await;
    let mut offsets: Vec<u64> = acked.iter().map(|(_, o)| *o).collect();
    offsets.sort_unstable();
    assert_eq!(offsets, (0..BATCHES as u64).collect::<Vec<_>>(), "every batch at its own offset, densely");

    let leader = agreed_leader(&cluster).expect("a leader every replica agrees on").0;
    let entries = cluster.node(leader).expect("leader up").partitions()[0].entry_bodies().expect("read log");
    let merged = format!("{BATCHES} batches in {} entries at {:?}", entries.len(), elapsed());
    println!("{merged}");
    trace.record(merged);
    assert!(entries.len() < BATCHES, "{BATCHES} concurrent batches took {} entries: none were merged", entries.len());

    let fresh = cluster.client().await;
    let read =
        cluster
            .on_client(async move {
                let (mut out, mut offset) = (Vec::new(), 0);
                while out.len() < BATCHES {
                    // acks=1 batches may be acknowledged before they commit: wait for them.
                    let f = fresh.fetch("merged", 0, Some(offset), Duration::from_secs(1)).await.expect("fetch");
                    offset = f.next_offset;
                    out.extend(f.records.into_iter().map(|r| {
                        (String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned(), r.offset)
                    }));
                }
                out
            })
            .await;
    let read: HashMap<String, u64> = read.into_iter().collect();
    for (v, offset) in &acked {
        assert_eq!(read.get(v), Some(offset), "{v} was acknowledged at offset {offset}");
    }
    println!("trace-hash: {:016x} events={}", trace.hash(), trace.len());
}

/// Appends a transaction marker of `kind` for producer `pid` at `epoch` to the single partition,
/// on its leader (as the transaction coordinator will); returns the marker's offset. Waits for a
/// leader every replica agrees on, and tries again when leadership moved before the append (a
/// refusal that wrote nothing); any other failure fails the scenario.
async fn append_marker(cluster: &SimCluster, kind: rill_records::ControlKind, pid: i64, epoch: i16) -> u64 {
    wait_until("a marker appended on a leader every replica agrees on", || async {
        let (leader, _) = agreed_leader(cluster)?;
        let partition = cluster.node(leader)?.partitions().first()?.clone();
        let marker = rill_records::ControlMarker { kind, coordinator_epoch: 7, transaction: 0 };
        let appended = cluster
            .on_node(leader, async move { partition.append_control(marker, pid, epoch, Duration::from_secs(10)).await })
            .await;
        match appended {
            Ok(offset) => Some(offset),
            Err(
                PartitionError::NotLeader { .. } | PartitionError::LeaderMoving { .. } | PartitionError::CatchingUp,
            ) => None,
            Err(e) => panic!("the marker was not appended: {e}"),
        }
    })
    .await
}

/// Scripted: a control batch (a transaction marker) is stored in the partition's log and takes
/// an offset like any batch; fetches return it, consumers skip it and move past it, and the
/// replicas agree on it. Three records, a commit marker, two records, an abort marker: offsets
/// 0-2 and 4-5 are records, 3 and 6 are markers, and a consumer from the beginning gets the five
/// records and ends at position 7 (past the trailing marker, which returned nothing).
#[madsim::test]
async fn control_batches_take_offsets_and_are_skipped() {
    let trace = begin_scripted();
    let (cluster, client) = slow_disk_cluster(Duration::from_millis(1), "ctl").await;
    let c = client.clone();
    let first = cluster
        .on_client(async move {
            c.produce("ctl", 0, vec![Record::new("r0"), Record::new("r1"), Record::new("r2")], Acks::All).await
        })
        .await
        .expect("first records");
    assert_eq!(first.base_offset, Some(0));
    let at = append_marker(&cluster, rill_records::ControlKind::Commit, 42, 3).await;
    assert_eq!(at, 3, "the marker takes the next offset");
    let c = client.clone();
    let last = cluster
        .on_client(async move { c.produce("ctl", 0, vec![Record::new("r4"), Record::new("r5")], Acks::All).await })
        .await
        .expect("later records");
    assert_eq!(last.base_offset, Some(4), "records after the marker continue the numbering");
    let trailing = append_marker(&cluster, rill_records::ControlKind::Abort, 43, 0).await;
    assert_eq!(trailing, 6);

    let fresh = cluster.client().await;
    let (offsets, next, position) = cluster
        .on_client(async move {
            let f = fresh.fetch("ctl", 0, Some(0), Duration::ZERO).await.expect("fetch");
            let offsets: Vec<u64> = f.records.iter().map(|r| r.offset).collect();
            let mut consumer = rill_client::Consumer::new(fresh.clone(), rill_client::ConsumerConfig::default());
            let tp = rill_client::TopicPartition::new("ctl", 0);
            consumer.assign([tp.clone()]);
            let mut seen = 0;
            let deadline = rill_rt::now() + SETTLE;
            while seen < 5 || consumer.position(&tp) != Some(7) {
                assert!(rill_rt::now() < deadline, "the consumer did not get past the trailing marker");
                seen += consumer.poll(Duration::from_secs(1)).await.expect("poll").len();
            }
            assert_eq!(seen, 5, "five records, no markers");
            (offsets, f.next_offset, consumer.position(&tp))
        })
        .await;
    assert_eq!(offsets, vec![0, 1, 2, 4, 5], "the marker is not delivered");
    assert_eq!(next, 7, "the next fetch starts past the trailing marker");
    assert_eq!(position, Some(7));
    let bodies: Vec<_> = cluster
        .ids()
        .iter()
        .filter_map(|id| cluster.node(*id).map(|n| n.partitions()[0].entry_bodies().expect("read log")))
        .collect();
    assert!(bodies.windows(2).all(|w| w[0] == w[1]), "replicas hold the same entries, marker included");
    trace.record(format!("markers at {at} and {trailing}, records {offsets:?}"));
    println!("trace-hash: {:016x} events={}", trace.hash(), trace.len());
}

/// The Raft metrics of node `id`'s replica of `group`.
fn group_metrics(cluster: &SimCluster, id: u64, group: u64) -> Option<openraft::RaftMetrics<u64, openraft::BasicNode>> {
    let hosted = cluster.node(id)?.replica(group)?;
    let m = hosted.replica().raft().metrics().borrow().clone();
    Some(m)
}

/// Partitions of `work`, the topic group `g` commits offsets of.
const WORK_PARTITIONS: u64 = 40;

/// Every offset group `g` committed (partition → offset) on node `id`'s replica of the
/// coordinator's partition `group`, as that replica applied it.
fn committed_on(cluster: &SimCluster, id: u64, group: u64) -> Option<BTreeMap<u32, i64>> {
    match cluster.node(id)?.replica(group)? {
        Hosted::Offsets(p) => Some(p.peek(|m| m.state().group("g").map(|((_, p), c)| (*p, c.offset)).collect())),
        _ => None,
    }
}

/// What `committed_on` must show after commits `0..n`: commit `i` set partition `i % 40` to `i`.
fn expected_offsets(n: u64) -> BTreeMap<u32, i64> {
    (0..n).map(|i| ((i % WORK_PARTITIONS) as u32, i as i64)).collect()
}

/// Commits `from..to` for group `g`, one commit (one Raft entry) each: commit `i` sets the
/// offset of `work`/`i % 40` to `i`, so the state holds keys only old entries wrote.
async fn commit_range(cluster: &SimCluster, client: &Client, from: u64, to: u64) {
    let c = client.clone();
    cluster
        .on_client(async move {
            for i in from..to {
                let tp = rill_client::TopicPartition::new("work", (i % WORK_PARTITIONS) as u32);
                c.commit_offsets("g", &[(tp, i, String::new())]).await.unwrap_or_else(|e| panic!("commit {i}: {e}"));
            }
        })
        .await;
}

/// Scripted: a state partition (here the `__consumer_offsets` partition coordinating group `g`)
/// snapshots its whole state and purges its log behind the snapshot; a follower that was down
/// while the leader purged past its log catches up by installing the snapshot, and ends with
/// the leader's state. Then the coordinator's leader is killed: the new one serves the state.
/// (The simulation snapshots state partitions every 20 entries.) Caught mutation:
/// `empty-state-snapshot`.
#[madsim::test]
async fn state_partition_purges_and_installs_snapshots() {
    let trace = begin_scripted();
    let (cluster, client) =
        cluster_with_topic("work", WORK_PARTITIONS as u32, &[], &[rill_meta::CONSUMER_OFFSETS_TOPIC]).await;
    let (_, group) = cluster
        .node(1)
        .and_then(|n| n.coordinator_partition(rill_meta::PartitionKind::ConsumerOffsets, "g"))
        .expect("g has a coordinator partition");

    commit_range(&cluster, &client, 0, 50).await;
    let leader = wait_until("a leader of the coordinator's partition", || {
        let l = cluster
            .ids()
            .into_iter()
            .find(|id| group_metrics(&cluster, *id, group).is_some_and(|m| m.current_leader == Some(*id)));
        async move { l }
    })
    .await;
    let purged = group_metrics(&cluster, leader, group).and_then(|m| m.purged);
    assert!(purged.is_some(), "50 commits, a snapshot every 20 entries: the leader's log is purged behind one");

    let follower = cluster.ids().into_iter().find(|id| *id != leader).expect("a follower");
    let follower_last = group_metrics(&cluster, follower, group).and_then(|m| m.last_log_index).unwrap_or(0);
    cluster.kill(follower);
    commit_range(&cluster, &client, 50, 150).await;
    let leader_purged = group_metrics(&cluster, leader, group).and_then(|m| m.purged).map_or(0, |p| p.index);
    assert!(
        leader_purged > follower_last,
        "the leader purged past the follower's log ({leader_purged} > {follower_last})"
    );
    cluster.restart(follower);
    let leader_state = committed_on(&cluster, leader, group);
    assert_eq!(leader_state, Some(expected_offsets(150)), "the leader's state");
    let installed = wait_until("the follower catches up", || {
        let caught_up = group_metrics(&cluster, follower, group)
            .is_some_and(|m| m.last_applied.map(|l| l.index) >= m.last_log_index && m.last_log_index.is_some());
        let caught_up = caught_up
            && group_metrics(&cluster, leader, group).and_then(|m| m.last_applied)
                == group_metrics(&cluster, follower, group).and_then(|m| m.last_applied);
        let snapshot = group_metrics(&cluster, follower, group).and_then(|m| m.snapshot);
        async move { caught_up.then_some(snapshot) }
    })
    .await;
    assert!(
        installed.is_some_and(|s| s.index >= leader_purged),
        "the follower caught up from a snapshot covering what the leader purged: {installed:?} vs {leader_purged}"
    );
    // Every replica reaches the state (a third replica may apply the last commit a moment
    // after the majority acknowledged it).
    wait_until("every replica applies the 150 commits", || {
        let all = cluster.ids().into_iter().all(|id| committed_on(&cluster, id, group) == Some(expected_offsets(150)));
        async move { all.then_some(()) }
    })
    .await;

    cluster.kill(leader);
    let c = client.clone();
    let after_failover = cluster
        .on_client(async move {
            let tp = rill_client::TopicPartition::new("work", 0);
            c.commit_offsets("g", &[(tp.clone(), 1000, String::new())]).await.expect("a commit after failover");
            c.committed_offsets("g", std::slice::from_ref(&tp))
                .await
                .expect("read after failover")
                .remove(&tp)
                .flatten()
        })
        .await;
    assert_eq!(after_failover.map(|c| c.offset), Some(1000));
    trace.record(format!("purged {leader_purged}, installed {installed:?}"));
    println!("trace-hash: {:016x} events={}", trace.hash(), trace.len());
}

/// The offset `committed_offsets` answers for `tp` of group `g`: `None` for none committed or
/// no answer within `within` (an error, or retries that never succeed).
async fn fetched_offset(client: &Client, tp: &rill_client::TopicPartition, within: Duration) -> Option<u64> {
    let read = client.committed_offsets("g", std::slice::from_ref(tp));
    match rill_rt::timeout(within, read).await {
        Ok(Ok(mut answer)) => answer.remove(tp).flatten().map(|c| c.offset),
        Ok(Err(_)) | Err(_) => None,
    }
}

/// True when node `id` believes it leads Raft group `group`.
fn leads_group(cluster: &SimCluster, id: u64, group: u64) -> bool {
    group_metrics(cluster, id, group).is_some_and(|m| m.current_leader == Some(id))
}

/// Cuts the leader of Raft group `group` off from the other nodes (clients still reach it) and
/// waits for a successor among them: (the deposed leader, its successor, the other nodes).
async fn depose_leader(cluster: &SimCluster, group: u64) -> (u64, u64, Vec<u64>) {
    let old = wait_until("a leader of the group", || {
        let l = cluster.ids().into_iter().find(|id| leads_group(cluster, *id, group));
        async move { l }
    })
    .await;
    let others: Vec<u64> = cluster.ids().into_iter().filter(|id| *id != old).collect();
    for id in &others {
        cluster.cut_link(old, *id);
        cluster.cut_link(*id, old);
    }
    let new = wait_until("a successor among the other nodes", || {
        let l = others.iter().copied().find(|id| leads_group(cluster, *id, group));
        async move { l }
    })
    .await;
    (old, new, others)
}

/// Scripted: the coordinator of group `g` is cut off from the other nodes (clients still reach
/// it) and, hearing nothing of its successor, still believes it leads; meanwhile the group
/// commits a newer offset through the successor. Then clients reach only the deposed one: asked
/// for the group's offset, it must not answer the offset it last knew — `FetchOffsets` confirms its
/// leadership with a quorum first, so it answers nothing until it can. A consumer told the old
/// offset would process its records again (the `exactly_once` scenario's duplicate output on
/// its long seed 6). After healing, the new offset is read. Caught mutation:
/// `stale-offsets-read`.
#[madsim::test]
async fn a_deposed_offsets_coordinator_never_answers_a_stale_offset() {
    let trace = begin_scripted();
    let (cluster, client) = cluster_with_topic("work", 4, &[], &[rill_meta::CONSUMER_OFFSETS_TOPIC]).await;
    let (_, group) = cluster
        .node(1)
        .and_then(|n| n.coordinator_partition(rill_meta::PartitionKind::ConsumerOffsets, "g"))
        .expect("g has a coordinator partition");
    let tp = rill_client::TopicPartition::new("work", 0);
    let commit = |c: Client, offset: u64| {
        let tp = tp.clone();
        async move {
            wait_until("a commit", || async {
                c.commit_offsets("g", &[(tp.clone(), offset, String::new())]).await.ok()
            })
            .await
        }
    };
    cluster.on_client(commit(client.clone(), 10)).await;
    let (old, new, others) = depose_leader(&cluster, group).await;
    let leads = |id: u64| leads_group(&cluster, id, group);
    cluster.on_client(commit(client.clone(), 20)).await;
    assert!(leads(old), "node {old} still believes it leads g's coordinator partition (else this proves nothing)");

    // Now clients reach only the deposed coordinator.
    for id in &others {
        cluster.cut_clients(*id);
    }
    let only_old = cluster.on_client(rill_chaos::cluster::connect(vec![cluster.address(old)])).await;
    let t = tp.clone();
    let deposed_answer =
        cluster.on_client(async move { fetched_offset(&only_old, &t, Duration::from_secs(8)).await }).await;
    println!("node {old}, deposed, answered {deposed_answer:?}; node {new} leads");
    assert!(
        deposed_answer.is_none() || deposed_answer == Some(20),
        "the deposed coordinator (node {old}) answered offset {deposed_answer:?}; node {new} had committed 20"
    );

    cluster.heal_network();
    let c = client.clone();
    let t = tp.clone();
    let healed = cluster
        .on_client(async move {
            wait_until("the committed offset after healing", || async {
                fetched_offset(&c, &t, Duration::from_secs(5)).await
            })
            .await
        })
        .await;
    assert_eq!(healed, 20, "after healing, the group's offset is the one committed through node {new}");
    trace.record(format!("old {old}, new {new}, deposed answer {deposed_answer:?}"));
    println!("trace-hash: {:016x} events={}", trace.hash(), trace.len());
}

/// A new producer instance of transactional id `id` initialised (retried until one succeeds):
/// its producer id and epoch, the epoch one above the previous instance's.
async fn init_instance(client: &Client, id: &'static str) -> (i64, i16) {
    wait_until("init_transactions", || async {
        let config = rill_client::ProducerConfig::default();
        let p = rill_client::TransactionalProducer::new(client.clone(), config, id, Duration::from_secs(60));
        let ready = rill_rt::timeout(Duration::from_secs(8), p.init_transactions()).await;
        let identity = matches!(ready, Ok(Ok(()))).then(|| p.producer_id_and_epoch()).flatten();
        p.close().await;
        identity
    })
    .await
}

/// Scripted: the coordinator of transactional id `d-txn` is cut off from the other nodes
/// (clients still reach it) and, hearing nothing of its successor, still believes it leads;
/// meanwhile a new instance of the producer is initialised through the successor, bumping the
/// id's epoch. Then clients reach only the deposed one: asked to describe or list the id's
/// transaction, it must not show the epoch it last knew — both confirm its leadership with a
/// quorum first, so it answers nothing until it can. An operator shown the old epoch would take
/// the fenced instance for the live one (and a transaction its successor finished for one still
/// open). After healing, the new epoch is shown. Caught mutation: `stale-transactions-read`.
#[madsim::test]
async fn a_deposed_transaction_coordinator_never_describes_a_stale_transaction() {
    let trace = begin_scripted();
    // One partition of `__transaction_state`: the deposed node leads all of it, so a listing
    // asks it alone.
    let cluster = SimCluster::start_with(SimOptions {
        nodes: 3,
        client_hosts: 1,
        sync_latency: Duration::ZERO,
        transactional_id_expiration: None,
        groups: None,
        producer_limits: None,
        transaction_state_partitions: Some(1),
    });
    let client = cluster.client().await;
    let c = client.clone();
    cluster
        .on_client(async move {
            let t = rill_meta::TRANSACTION_STATE_TOPIC;
            wait_until("the topic created", || async { c.create_topic("dt", 1, 3, &[]).await.ok() }).await;
            c.wait_for_leaders(t, SETTLE).await.unwrap_or_else(|e| panic!("{t} has no leaders: {e}"));
        })
        .await;
    let (_, group) = cluster
        .node(1)
        .and_then(|n| n.coordinator_partition(rill_meta::PartitionKind::TransactionState, "d-txn"))
        .expect("d-txn has a coordinator partition");
    let c = client.clone();
    let (pid, first) = cluster.on_client(async move { init_instance(&c, "d-txn").await }).await;
    let (old, new, others) = depose_leader(&cluster, group).await;
    let leads = |id: u64| leads_group(&cluster, id, group);
    let only_new = cluster.on_client(rill_chaos::cluster::connect(vec![cluster.address(new)])).await;
    let (pid_now, current) = cluster.on_client(async move { init_instance(&only_new, "d-txn").await }).await;
    assert_eq!(pid_now, pid, "the same producer id, its epoch bumped");
    assert!(current > first, "the successor bumped the epoch: {first} -> {current}");
    assert!(leads(old), "node {old} still believes it leads d-txn's coordinator partition (else this proves nothing)");

    // Now clients reach only the deposed coordinator.
    for id in &others {
        cluster.cut_clients(*id);
    }
    let only_old = cluster.on_client(rill_chaos::cluster::connect(vec![cluster.address(old)])).await;
    let (described, listed) = cluster
        .on_client(async move {
            let described = rill_rt::timeout(Duration::from_secs(8), only_old.describe_transaction("d-txn")).await;
            let listed = rill_rt::timeout(Duration::from_secs(8), only_old.list_transactions(&[], None)).await;
            let described = described.ok().and_then(|d| d.ok()).map(|d| d.producer_epoch);
            let listed = listed
                .ok()
                .and_then(|l| l.ok())
                .and_then(|l| l.into_iter().find(|t| t.transactional_id == "d-txn"))
                .map(|t| t.producer_epoch);
            (described, listed)
        })
        .await;
    println!("node {old}, deposed, described epoch {described:?}, listed {listed:?}; node {new} leads at {current}");
    for (what, shown) in [("described", described), ("listed", listed)] {
        assert!(
            shown.is_none() || shown == Some(i32::from(current)),
            "the deposed coordinator (node {old}) {what} epoch {shown:?}; node {new} had moved it to {current}"
        );
    }

    cluster.heal_network();
    let c = client.clone();
    let (healed, healed_listed) = cluster
        .on_client(async move {
            let described = wait_until("the transaction described after healing", || async {
                let d = rill_rt::timeout(Duration::from_secs(20), c.describe_transaction("d-txn")).await;
                d.ok().and_then(|d| d.ok()).map(|d| d.producer_epoch)
            })
            .await;
            let listed = wait_until("the transactions listed after healing", || async {
                let l = rill_rt::timeout(Duration::from_secs(20), c.list_transactions(&[], None)).await;
                let listing = l.ok().and_then(|l| l.ok())?;
                listing.into_iter().find(|t| t.transactional_id == "d-txn").map(|t| t.producer_epoch)
            })
            .await;
            (described, listed)
        })
        .await;
    assert_eq!(healed, i32::from(current), "after healing, the epoch described is the one node {new} gave");
    assert_eq!(healed_listed, i32::from(current), "after healing, the epoch listed is the one node {new} gave");
    trace.record(format!("old {old}, new {new}, epochs {first} -> {current}, deposed {described:?} / {listed:?}"));
    println!("trace-hash: {:016x} events={}", trace.hash(), trace.len());
}

/// The leader of `topic`/`partition` as node `id` sees it, when `id` leads it.
fn led_records_partition(
    cluster: &SimCluster,
    id: u64,
    topic: &str,
    partition: usize,
) -> Option<Arc<rill_broker::Partition>> {
    let node = cluster.node(id)?;
    let group = node.topic(topic)?.partitions.get(partition)?.group;
    match node.replica(group)? {
        Hosted::Records(p) if p.state().is_leader => Some(p),
        _ => None,
    }
}

/// The last transaction marker stored in `partition` (read uncommitted): its producer id, the
/// producer epoch it carries, and the marker.
fn last_marker(partition: &rill_broker::Partition) -> Option<(i64, i16, rill_records::ControlMarker)> {
    let fetched = partition.fetch(0, 1 << 20, rill_broker::Isolation::ReadUncommitted).ok()?;
    fetched.batches.iter().rev().find_map(|b| {
        let decoded = rill_records::decode(&b.data, 1 << 20).ok()?;
        let info = decoded.info;
        let marker = rill_records::ControlMarker::parse(decoded.records.first()?).ok()?;
        info.is_control().then_some((info.producer_id, info.producer_epoch, marker))
    })
}

/// Scripted: a late copy of a transaction's marker never decides the producer's next
/// transaction. A transactional producer (transactions v2) commits transaction 1 in partition 0;
/// its marker carries the epoch transaction 2 then runs under, and the coordinator's epoch is
/// unchanged. Transaction 2 writes to partition 0, and a copy of transaction 1's commit marker
/// reaches the partition's leader (as a `WriteTxnMarkers` delayed past a whole transaction
/// would). It must decide nothing: transaction 2 stays open (the LSO does not move), and once
/// transaction 2 aborts, a read_committed read returns transaction 1's record only. Caught
/// mutation: `repeated-marker-decides`.
#[madsim::test]
async fn a_late_copy_of_a_marker_never_decides_the_next_transaction() {
    let trace = begin_scripted();
    let (cluster, client) = cluster_with_topic("late", 1, &[], &[rill_meta::TRANSACTION_STATE_TOPIC]).await;
    // Made on the client host: the producer's background tasks run where it is made.
    let c = client.clone();
    let (producer, first) = cluster
        .on_client(async move {
            let config = rill_client::ProducerConfig::default();
            let p = Arc::new(rill_client::TransactionalProducer::new(c, config, "late-txn", Duration::from_secs(60)));
            wait_until("init_transactions", || async { p.init_transactions().await.ok() }).await;
            p.begin_transaction().unwrap();
            let sent = p.send_to("late", 0, Record::new("first")).await.unwrap().await.unwrap();
            p.commit_transaction().await.unwrap();
            (p, sent.offset)
        })
        .await;
    let (leader, partition, (pid, epoch, marker)) = wait_until("transaction 1's marker at the leader", || {
        let found = cluster.ids().into_iter().find_map(|id| {
            let p = led_records_partition(&cluster, id, "late", 0)?;
            let marker = last_marker(&p).filter(|_| p.last_stable_offset() == p.high_watermark())?;
            Some((id, p, marker))
        });
        async move { found }
    })
    .await;
    assert_eq!(marker.kind, rill_records::ControlKind::Commit);
    assert!(marker.transaction > 0, "the coordinator's marker names its transaction");
    trace.record(format!("transaction 1 at {first:?}, marker {marker:?} at epoch {epoch} on node {leader}"));

    let p = producer.clone();
    let second = cluster
        .on_client(async move {
            p.begin_transaction().unwrap();
            p.send_to("late", 0, Record::new("second")).await.unwrap().await.unwrap().offset
        })
        .await
        .expect("acks=all answers an offset");
    assert_eq!(producer.producer_id_and_epoch(), Some((pid, epoch)), "v2: transaction 2 runs at the marker's epoch");
    assert_eq!(partition.last_stable_offset(), second, "transaction 2 is open from its record");

    let hw = partition.high_watermark();
    let copy = partition.clone();
    let replayed = cluster
        .on_node(leader, async move { copy.append_control(marker, pid, epoch, Duration::from_secs(5)).await })
        .await;
    trace.record(format!("the copy of transaction 1's marker answered {replayed:?}"));
    assert!(replayed.is_ok(), "a repeat of a marker already written is answered as written: {replayed:?}");
    assert_eq!(
        partition.last_stable_offset(),
        second,
        "a late copy of transaction 1's commit marker decided transaction 2 (the LSO moved past its open record)"
    );
    assert_eq!(partition.high_watermark(), hw, "nothing is written for a repeat");

    let p = producer.clone();
    cluster.on_client(async move { p.abort_transaction().await.unwrap() }).await;
    let c = client.clone();
    let committed = cluster
        .on_client(async move {
            wait_until("transaction 2's abort marker", || async {
                let f = c.fetch("late", 0, Some(0), Duration::from_millis(100)).await.ok()?;
                (f.last_stable_offset == f.high_watermark && f.high_watermark > second + 1).then_some(f)
            })
            .await
        })
        .await;
    let values: Vec<String> = committed
        .records
        .iter()
        .filter_map(|r| r.value.as_ref().map(|v| String::from_utf8_lossy(v).into_owned()))
        .collect();
    trace.record(format!("read_committed {values:?}"));
    assert_eq!(values, vec!["first".to_string()], "read_committed after transaction 2's abort");
    println!("trace-hash: {:016x} events={}", trace.hash(), trace.len());
}

/// Scripted: a group's coordinator writes the marker the group is still owed by a producer's
/// decided transaction before that producer's next transaction's offsets (transactions v2, where
/// the next transaction may begin while the decided one's markers are still being written).
/// Transaction 1 commits offset 10 of `owed`/0 for group `g` (pending in g's partition); its
/// marker has not reached the group when transaction 2's offsets arrive (offset 20), carrying
/// the verification's answer that the group is owed transaction 1's commit marker. That marker
/// must be written first: offset 10 is then committed and 20 pending — without it, transaction
/// 1's pending offsets would be dropped as orphaned by transaction 2's, and a consumer that takes
/// over before transaction 2 ends would read its input again from the last offset before 10.
/// Both commits go through `txn_offsets::commit` on the group's coordinator, as `TxnCommitOffsets`
/// does after its verification (the transaction coordinator's own marker is the part held back,
/// which no link cut can hold back alone: the verification travels the same way). Caught
/// mutation: `group-offsets-before-marker`.
#[madsim::test]
async fn a_groups_owed_marker_comes_before_the_next_transactions_offsets() {
    use rill_coordinator::offsets::txn::{self as txn_offsets, TxnMarker};
    use rill_coordinator::offsets::{Committer, OffsetCommit};
    let trace = begin_scripted();
    let (cluster, client) = cluster_with_topic("owed", 1, &[], &[rill_meta::CONSUMER_OFFSETS_TOPIC]).await;
    let (_, group) = cluster
        .node(1)
        .and_then(|n| n.coordinator_partition(rill_meta::PartitionKind::ConsumerOffsets, "g"))
        .expect("g has a coordinator partition");
    let (leader, offsets) = wait_until("the leader of g's coordinator partition", || {
        let found = cluster.ids().into_iter().find_map(|id| match cluster.node(id)?.replica(group)? {
            Hosted::Offsets(p) if p.state().is_leader => Some((id, p)),
            _ => None,
        });
        async move { found }
    })
    .await;
    let topic_id = cluster.node(leader).and_then(|n| n.topic("owed")).expect("the topic's metadata").topic_id;
    // A producer id no allocation reaches in this run, and the names of its two transactions.
    let (pid, first, second) = (1 << 40, 3, 5);
    let commit = |offset: i64, epoch: i16, transaction: u64, owed: Option<TxnMarker>| {
        let p = offsets.clone();
        async move {
            let offsets = [OffsetCommit {
                topic: "owed".into(),
                topic_id,
                partition: 0,
                offset,
                metadata: String::new(),
                leader_epoch: None,
            }];
            let prepared = txn_offsets::prepare(&p, "g", Committer::Standalone, ("owed-txn", (pid, epoch)), &offsets)?;
            txn_offsets::commit(&p, prepared, (transaction, owed), Committer::Standalone, Duration::from_secs(5)).await
        }
    };
    let answered = cluster.on_node(leader, commit(10, 0, first, None)).await;
    assert!(answered.is_ok(), "transaction 1's offsets are pending: {answered:?}");
    let tp = rill_client::TopicPartition::new("owed", 0);
    let c = client.clone();
    let t = tp.clone();
    let before = cluster.on_client(async move { fetched_offset(&c, &t, Duration::from_secs(5)).await }).await;
    assert_eq!(before, None, "transaction 1's offset stays pending until its marker");

    // Transaction 1 was committed (v2: its marker carries epoch 1, transaction 2's); its marker
    // has not reached the group yet when transaction 2's offsets do.
    let owed =
        TxnMarker { producer_id: pid, producer_epoch: 1, coordinator_epoch: 1, commit: true, transaction_start: first };
    let answered = cluster.on_node(leader, commit(20, 1, second, Some(owed))).await;
    trace.record(format!("transaction 2's offsets answered {answered:?}"));
    assert!(answered.is_ok(), "transaction 2's offsets are pending: {answered:?}");
    let c = client.clone();
    let t = tp.clone();
    let between = cluster.on_client(async move { fetched_offset(&c, &t, Duration::from_secs(5)).await }).await;
    trace.record(format!("between the transactions: {between:?}"));
    assert_eq!(
        between,
        Some(10),
        "transaction 1's committed offset was lost: its pending offsets were dropped as orphaned by transaction 2's, its owed marker not written first"
    );

    let p = offsets.clone();
    let end = TxnMarker {
        producer_id: pid,
        producer_epoch: 2,
        coordinator_epoch: 1,
        commit: true,
        transaction_start: second,
    };
    let ended =
        cluster.on_node(leader, async move { txn_offsets::write_marker(&p, end, Duration::from_secs(5)).await }).await;
    assert!(ended.is_ok(), "transaction 2's marker: {ended:?}");
    let c = client.clone();
    let after = cluster.on_client(async move { fetched_offset(&c, &tp, Duration::from_secs(5)).await }).await;
    trace.record(format!("after transaction 2: {after:?}"));
    assert_eq!(after, Some(20), "transaction 2's marker commits its offset");
    println!("trace-hash: {:016x} events={}", trace.hash(), trace.len());
}

/// A record partition purges its log below its log start offset, and a follower that was down
/// while the leader purged past its log catches up from a snapshot that carries the retained
/// records: afterwards it holds exactly the leader's entries from the log start on (index,
/// offset and bytes), the same log start, and once it leads it serves every retained record and
/// continues the numbering. (The simulation snapshots record partitions for a purge as soon as
/// their log start moves.) Caught mutation: `purge-ahead-of-log-start`.
#[madsim::test]
async fn record_partition_installs_a_snapshot_with_its_records() {
    let trace = begin_scripted();
    let (cluster, client) = cluster_with_topic("ret", 1, &[], &[]).await;
    let mut acked = cluster.on_client(produce(client.clone(), trace.clone(), "ret", "a", 30)).await;
    let (leader, _) = wait_until("an agreed leader", || async { agreed_leader(&cluster) }).await;
    let group = cluster.node(leader).expect("leader up").partitions()[0].group();
    let follower = cluster.ids().into_iter().find(|id| *id != leader).expect("a follower");
    let follower_last = group_metrics(&cluster, follower, group).and_then(|m| m.last_log_index).unwrap_or(0);
    cluster.kill(follower);

    acked.extend(cluster.on_client(produce(client.clone(), trace.clone(), "ret", "b", 40)).await);
    let c = client.clone();
    let start = cluster.on_client(async move { c.delete_records("ret", 0, 50).await }).await.expect("delete below 50");
    assert_eq!(start, 50);
    acked.extend(cluster.on_client(produce(client.clone(), trace.clone(), "ret", "c", 10)).await);
    let leader_purged = wait_until("the leader purges below its log start", || {
        let p = group_metrics(&cluster, leader, group).and_then(|m| m.purged).map(|p| p.index);
        let first_base = cluster
            .node(leader)
            .and_then(|n| n.partitions()[0].entry_bodies().ok().and_then(|e| e.first().map(|(_, base, _)| *base)));
        async move { p.filter(|p| *p > follower_last && first_base >= Some(45)) }
    })
    .await;
    let l = cluster.node(leader).expect("leader up").partitions()[0].clone();
    assert_eq!(l.log_start_offset(), 50, "the purge deleted only records below the log start");
    drop(l);
    cluster.restart(follower);
    let installed = wait_until("the follower catches up", || {
        let applied = |id| group_metrics(&cluster, id, group).and_then(|m| m.last_applied);
        let done = applied(follower).is_some() && applied(follower) == applied(leader);
        let snapshot = group_metrics(&cluster, follower, group).and_then(|m| m.snapshot);
        async move { done.then_some(snapshot) }
    })
    .await;
    assert!(
        installed.is_some_and(|s| s.index >= leader_purged),
        "the follower caught up from a snapshot covering what the leader purged: {installed:?} vs {leader_purged}"
    );
    let replica = |id: u64| cluster.node(id).expect("node up").partitions()[0].clone();
    let (l, f) = (replica(leader), replica(follower));
    assert!(f.installed_snapshots() >= 1, "the follower installed a snapshot");
    assert_eq!(f.log_start_offset(), l.log_start_offset(), "the same log start offset");
    assert_eq!(f.high_watermark(), l.high_watermark(), "the same high watermark");
    let (le, fe) = (l.entry_bodies().expect("leader's log"), f.entry_bodies().expect("follower's log"));
    let from_start = |e: &Vec<(u64, u64, bytes::Bytes)>| -> Vec<(u64, u64, bytes::Bytes)> {
        let holding = e.iter().rposition(|(_, base, _)| *base <= 50).unwrap_or(0);
        e[holding..].to_vec()
    };
    assert!(fe.first().is_some_and(|(_, base, _)| *base <= 50), "the follower holds the entry with the log start");
    assert_eq!(from_start(&fe), from_start(&le), "the follower's entries from the log start on are the leader's");

    cluster.kill(leader);
    let c = client.clone();
    let next = cluster
        .on_client(async move {
            wait_until("a produce after failover", || async {
                c.produce("ret", 0, vec![Record::new("after")], Acks::All).await.ok().and_then(|a| a.base_offset)
            })
            .await
        })
        .await;
    let hw_before = acked.iter().filter_map(|(_, o)| *o).max().map_or(0, |o| o + 1);
    assert!(next >= hw_before, "new appends continue the numbering ({next} after {hw_before})");
    let fresh = cluster.client().await;
    let read = cluster
        .on_client(async move {
            let mut out = Vec::new();
            let mut offset = 50;
            loop {
                let f = fresh.fetch("ret", 0, Some(offset), Duration::ZERO).await.expect("fetch from the log start");
                if f.records.is_empty() {
                    break out;
                }
                offset = f.next_offset;
                out.extend(
                    f.records.into_iter().map(|r| {
                        (String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned(), r.offset)
                    }),
                );
            }
        })
        .await;
    for (v, offset) in &acked {
        if let Some(o) = offset.filter(|o| *o >= 50) {
            assert!(read.contains(&(v.clone(), o)), "retained record {v} at {o} is served after failover");
        }
    }
    trace.record(format!("purged {leader_purged}, installed {installed:?}, next {next}"));
    println!("trace-hash: {:016x} events={}", trace.hash(), trace.len());
}

/// Scripted: a follower that catches up by a snapshot transfer longer than the leader lease
/// keeps its leader. About 39 MB of retained records (13 chunks of 3 MiB) cross links that take
/// 45 ms each way, so the transfer runs for over a second, during which the leader's replication to
/// the follower sends nothing but chunks. The follower must count the chunks as hearing from
/// its leader, or its failover check stands for election every lease, each new term makes the
/// leader start the transfer over, and catching up takes many times as long (seen on a real
/// cluster: 30 s for 256 MB instead of 6 s).
#[madsim::test]
async fn a_long_snapshot_transfer_keeps_its_leader() {
    let trace = begin_scripted();
    // The stopped follower leaves the ISR after 2 s, so acks=all writes go on without it.
    let configs = [("replica.lag.time.max.ms".to_string(), "2000".to_string())];
    let (cluster, client) = cluster_with_topic("big", 1, &configs, &[]).await;
    let (leader, _) = wait_until("an agreed leader", || async { agreed_leader(&cluster) }).await;
    let group = cluster.node(leader).expect("leader up").partitions()[0].group();
    let follower = cluster.ids().into_iter().find(|id| *id != leader).expect("a follower");
    cluster.kill(follower);
    // 400 records of 100 KB, then everything below offset 10 deleted: ~39 MB retained.
    let c = client.clone();
    cluster
        .on_client(async move {
            for i in 0..400u32 {
                let value = vec![b'a' + (i % 26) as u8; 100_000];
                c.produce("big", 0, vec![Record::new(value)], Acks::All).await.expect("a write with one node down");
            }
            c.delete_records("big", 0, 10).await.expect("delete below 10")
        })
        .await;
    let follower_last = group_metrics(&cluster, follower, group).and_then(|m| m.last_log_index).unwrap_or(0);
    wait_until("the leader purges past the follower's log", || {
        let purged = group_metrics(&cluster, leader, group).and_then(|m| m.purged).map(|p| p.index);
        async move { purged.filter(|p| *p > follower_last) }
    })
    .await;
    let term = group_metrics(&cluster, leader, group).map(|m| m.current_term).expect("the leader's term");
    // Below the 100 ms an append may take (openraft's heartbeat interval), so only the
    // transfer is slowed down, not replication itself.
    cluster.set_latency(Duration::from_millis(45)..Duration::from_millis(46));
    cluster.restart(follower);
    wait_until("the follower catches up", || {
        let applied = |id| group_metrics(&cluster, id, group).and_then(|m| m.last_applied);
        let done = applied(follower).is_some() && applied(follower) == applied(leader);
        async move { done.then_some(()) }
    })
    .await;
    cluster.heal_network();
    let f = cluster.node(follower).expect("follower up").partitions()[0].clone();
    assert!(f.installed_snapshots() >= 1, "the follower caught up by a snapshot");
    let after = group_metrics(&cluster, leader, group).map(|m| (m.current_term, m.current_leader));
    assert_eq!(after, Some((term, Some(leader))), "the leader kept its term through the transfer");
    trace.record(format!("leader {leader} term {term}, follower {follower} caught up"));
    println!("trace-hash: {:016x} events={}", trace.hash(), trace.len());
}

/// Scripted: a leader dies with its last entry on one follower only, not its designated
/// successor. The designated follower stands first and is refused for its shorter log; the
/// follower that refused it stands at once (`rill_server::failover`) and leads — before
/// openraft's own timer could have elected anyone (the leader lease plus the shortest election
/// timeout after the leader's last message) — and every acknowledged record is read back once.
#[madsim::test]
async fn a_leader_dying_with_its_last_entry_on_one_follower_is_replaced_by_that_follower() {
    let trace = begin_scripted();
    let (cluster, client) = cluster_with_topic("last", 1, &[], &[]).await;
    let (leader, term) = wait_until("an agreed leader", || async { agreed_leader(&cluster) }).await;
    let node = cluster.node(leader).expect("leader up");
    let group = node.partitions()[0].group();
    let replicas: Vec<u64> = node
        .meta()
        .replicas_of(leader)
        .into_iter()
        .find(|(_, _, a)| a.group == group)
        .map(|(_, _, a)| a.replicas.clone())
        .expect("the partition's replicas");
    let mut followers = replicas.iter().copied().filter(|r| *r != leader);
    let (designated, other) = (followers.next().expect("a designated follower"), followers.next().expect("another"));
    let timing = node.config().raft;
    drop(node);
    let mut acked = cluster.on_client(produce(client.clone(), trace.clone(), "last", "before", 5)).await;

    // The designated follower stops hearing the leader; one more record reaches the other only.
    cluster.cut_link(leader, designated);
    let c = client.clone();
    let last =
        cluster.on_client(async move { c.produce("last", 0, vec![Record::new("last")], Acks::Leader).await }).await;
    acked.push(("last".into(), last.expect("acks=1 with the leader up").base_offset));
    let last_index = |id| group_metrics(&cluster, id, group).and_then(|m| m.last_log_index).unwrap_or(0);
    wait_until("the other follower has the last entry", || {
        let ahead = last_index(other) == last_index(leader) && last_index(other) > last_index(designated);
        async move { ahead.then_some(()) }
    })
    .await;
    cluster.kill(leader);
    // openraft's own timer would have the other follower stand at the earliest the leader lease
    // plus the shortest election timeout after it last heard from the leader.
    let heard = cluster.node(other).and_then(|n| n.multi().transport().last_leader_contact(group));
    let own_timer_at = heard.expect("the other follower heard the leader")
        + Duration::from_millis(timing.election_max_ms + timing.election_min_ms);

    let (new_leader, new_term) = wait_until("a new leader", || {
        let led = [designated, other].into_iter().find_map(|id| {
            let m = group_metrics(&cluster, id, group)?;
            (m.state == openraft::ServerState::Leader).then_some((id, m.current_term))
        });
        async move { led }
    })
    .await;
    let early = own_timer_at.saturating_duration_since(rill_rt::now());
    assert_eq!(new_leader, other, "the follower with the longer log leads");
    assert!(!early.is_zero(), "elected only when openraft's own timer could have fired");
    trace.record(format!("elected {early:?} before openraft's own timer"));
    trace.record(format!("leader {leader} (term {term}) → {new_leader} in term {new_term}"));

    cluster.heal_network();
    wait_until("the refused follower back in sync", || {
        let isr = cluster.node(other).and_then(|n| n.partitions().first().map(|p| p.state().isr.len()));
        async move { isr.filter(|n| *n >= 2) }
    })
    .await;
    // The client may first try the dead leader: each attempt writes its own value.
    let c = client.clone();
    let after = cluster
        .on_client(async move {
            let mut sent = Vec::new();
            for attempt in 0..100 {
                let v = format!("after-{attempt}");
                let r = c.produce("last", 0, vec![Record::new(v.clone())], Acks::All).await;
                sent.push((v, r.ok().and_then(|a| a.base_offset)));
                if sent.last().is_some_and(|(_, o)| o.is_some()) {
                    break;
                }
                madsim::time::sleep(Duration::from_millis(50)).await;
            }
            sent
        })
        .await;
    assert!(after.last().is_some_and(|(_, o)| o.is_some()), "acks=all writes go on: {after:?}");
    acked.extend(after);
    check_read_once(&cluster, "last", &acked, Some(&trace)).await;
    println!("trace-hash: {:016x} events={}", trace.hash(), trace.len());
}

/// Partitions of the topic the consumer group shares in `consumer_group_members_never_share_a_partition`.
const MEMBER_PARTITIONS: u32 = group_run::PARTITIONS;

/// Scripted: a consumer group of up to four members sharing six partitions while members join,
/// crash (stop heartbeating), leave, and the group's coordinator is killed and restarted, with a
/// producer writing throughout. Every replica's applied group state is sampled every 20 ms: no
/// partition ever has two owners, and no committed offset goes back. After the faults the group
/// settles with every partition owned, every committed offset at the high watermark, and every
/// record handed out at least once. Caught mutation: `double-assign`.
#[madsim::test]
async fn consumer_group_members_never_share_a_partition() {
    let trace = begin_scripted();
    let cluster = Arc::new(SimCluster::start_with(SimOptions {
        nodes: 3,
        client_hosts: 6,
        sync_latency: Duration::from_millis(1),
        transactional_id_expiration: None,
        groups: None,
        producer_limits: None,
        transaction_state_partitions: None,
    }));
    let client = cluster.client().await;
    let c = client.clone();
    cluster
        .on_client(async move {
            wait_until("the topic created", || async {
                c.create_topic("members", MEMBER_PARTITIONS, 3, &[]).await.ok()
            })
            .await;
            c.wait_for_leaders("members", SETTLE).await.expect("members has leaders");
            c.wait_for_leaders(rill_meta::CONSUMER_OFFSETS_TOPIC, SETTLE).await.expect("the offsets topic has leaders")
        })
        .await;

    // A producer writing one record to every partition every 100 ms until told to stop.
    let producing = Arc::new(AtomicU8::new(RUN));
    let producer = group_run::producer(&cluster, 5, "members", producing.clone());

    // The sampler: every replica's group state, every 20 ms, until told to stop.
    let sampling = Arc::new(AtomicU8::new(RUN));
    let sampler = group_run::sampler(cluster.clone(), "members", sampling.clone());

    let delivered: group_run::Deliveries = Arc::default();
    let mut members: Vec<(Arc<AtomicU8>, madsim::task::JoinHandle<()>)> = Vec::new();
    let start_member = |members: &mut Vec<(Arc<AtomicU8>, madsim::task::JoinHandle<()>)>| {
        let id = members.len();
        let ctl = Arc::new(AtomicU8::new(RUN));
        let task = cluster.client_host(id).spawn(group_run::member(
            cluster.bootstrap(),
            id,
            "members",
            false,
            ctl.clone(),
            delivered.clone(),
        ));
        members.push((ctl, task));
        trace.record(format!("member {id} starts at {:?}", elapsed()));
    };
    let mut rng = rill_rt::rng();
    let mut pause = |lo: u64, hi: u64| Duration::from_millis(rand::Rng::gen_range(&mut rng, lo..hi));

    for _ in 0..3 {
        start_member(&mut members);
    }
    madsim::time::sleep(pause(2_000, 4_000)).await;
    let coordinator = wait_until("the group's coordinator", || {
        let c = cluster.node(1).and_then(|n| n.coordinator_partition(rill_meta::PartitionKind::ConsumerOffsets, "g"));
        let leader = c.and_then(|(_, group)| {
            cluster
                .ids()
                .into_iter()
                .find(|id| group_metrics(&cluster, *id, group).is_some_and(|m| m.current_leader == Some(*id)))
        });
        async move { leader }
    })
    .await;
    trace.record(format!("kill coordinator node {coordinator} at {:?}", elapsed()));
    cluster.kill(coordinator);
    madsim::time::sleep(pause(1_000, 3_000)).await;
    start_member(&mut members);
    madsim::time::sleep(pause(1_000, 3_000)).await;
    cluster.restart(coordinator);
    trace.record(format!("restart node {coordinator} at {:?}", elapsed()));
    madsim::time::sleep(pause(1_000, 3_000)).await;
    members[0].0.store(CRASH, Ordering::SeqCst);
    trace.record(format!("member 0 crashes at {:?}", elapsed()));
    madsim::time::sleep(pause(1_000, 3_000)).await;
    members[1].0.store(LEAVE, Ordering::SeqCst);
    trace.record(format!("member 1 leaves at {:?}", elapsed()));
    start_member(&mut members);
    madsim::time::sleep(pause(2_000, 4_000)).await;

    tracing::info!("--- the producer stops; the group settles");
    producing.store(LEAVE, Ordering::SeqCst);
    producer.await.expect("the producer");
    let high_watermarks = group_run::high_watermarks(&cluster, "members").await;
    let live = 3; // members 2, 3, 4
    let (group, committed) = wait_until("the group stable, every partition owned and committed to the end", || {
        let led = group_run::led_group(&cluster).filter(|(g, committed)| {
            group_run::settled(g, live) && group_delivery::lagging(committed, &high_watermarks).is_empty()
        });
        async move { led }
    })
    .await;
    sampling.store(LEAVE, Ordering::SeqCst);
    let mut violations = sampler.await.expect("the sampler");
    for (ctl, _) in &members {
        ctl.store(LEAVE, Ordering::SeqCst);
    }
    for (_, task) in members {
        task.await.expect("a member");
    }

    let log = delivered.lock().unwrap();
    violations.extend(group_run::check_deliveries(&log, &high_watermarks));
    let processed = log.processed.len();
    drop(log);
    for v in violations.iter().take(5) {
        println!("  violation {v}");
    }
    assert!(violations.is_empty(), "{} violations", violations.len());
    trace.record(format!("group epoch {} committed {committed:?} processed {processed}", group.epoch));
    println!("trace-hash: {:016x} events={}", trace.hash(), trace.len());
}

/// Scripted: a share group member holds a record whose lock runs out while the partition's
/// leader is killed. The new leader has not proposed the lock's expiry yet (no fetch reached it,
/// its housekeeping comes every few seconds) when the member's late accept arrives: refused, as
/// the lock ran out — the compare-and-set an acknowledgement makes at apply time, not the
/// expiry timer, is what refuses it — and the record goes to the next member at its second
/// attempt. Caught mutation: `late-ack-applied`.
#[madsim::test]
async fn a_late_acknowledgement_is_refused_after_a_failover() {
    use rill_client::share::{AckKind, AcknowledgementMode, ShareConsumer, ShareConsumerConfig};
    let trace = begin_scripted();
    let (cluster, client) = group_cluster(1, rill_coordinator::groups::Timeouts::default(), "late", 1).await;
    let config = |member: &str| ShareConsumerConfig {
        member_id: member.into(),
        acknowledgement_mode: AcknowledgementMode::Explicit,
        ..ShareConsumerConfig::new("g")
    };
    let (c, first) = (client.clone(), config("first"));
    let (held, leader, member) = cluster
        .on_client(async move {
            let settings = [
                ("share.auto.offset.reset".to_string(), "earliest".to_string()),
                ("share.record.lock.duration.ms".to_string(), "1000".to_string()),
            ];
            wait_until("the group's settings", || async { c.alter_share_group_config("g", &settings, &[]).await.ok() })
                .await;
            wait_until("a record written", || async {
                c.produce("late", 0, vec![Record::new("job")], Acks::All).await.ok()
            })
            .await;
            let mut member = ShareConsumer::new(c.clone(), first);
            member.subscribe(["late"]);
            let mut held = Vec::new();
            while held.is_empty() {
                held = member.poll(Duration::from_millis(200)).await.unwrap_or_default();
            }
            let leader = c.describe_topic("late").await.expect("described").partitions[0].leader.expect("a leader");
            (held.remove(0), leader, member)
        })
        .await;
    assert_eq!(held.delivery_count, 1);
    // The leader dies just before the lock runs out: the lock runs out while no leader is there
    // to expire it, and the new one is elected after it did.
    let until = held.lock_until_ms;
    madsim::time::sleep(Duration::from_millis(u64::try_from(until - 200 - rill_rt::wall_clock_ms()).unwrap_or(0)))
        .await;
    trace.record(format!("leader {leader} killed at {:?}, the lock runs out at {until}", elapsed()));
    cluster.kill(leader);
    let (c, second) = (client.clone(), config("second"));
    let next_client = client.clone();
    let (refused, again) = cluster
        .on_client(async move {
            let mut member = member;
            // Sent once a new leader is known: an acknowledgement lost on the way (to the dead
            // leader) has an unknown outcome and is not sent again.
            let deadline = rill_rt::now() + SETTLE;
            loop {
                let now = c.describe_topic("late").await.ok().and_then(|d| d.partitions[0].leader);
                if now.is_some_and(|l| l != leader) {
                    break;
                }
                assert!(rill_rt::now() < deadline, "no new leader within {SETTLE:?}");
                madsim::time::sleep(Duration::from_millis(10)).await;
            }
            c.refresh_metadata(&["late".to_string()]).await.expect("metadata");
            member.acknowledge(&held, AckKind::Accept).expect("held by this member");
            let sent = rill_rt::wall_clock_ms();
            assert!(sent > until, "the accept goes after the lock ran out");
            // Sent again while no leader takes it (the election).
            let mut refused = member.commit().await.unwrap_or_default();
            while member.has_pending() {
                madsim::time::sleep(Duration::from_millis(10)).await;
                refused.extend(member.commit().await.unwrap_or_default());
            }
            let mut next = ShareConsumer::new(next_client, second);
            next.subscribe(["late"]);
            let mut again = Vec::new();
            let deadline = rill_rt::now() + SETTLE;
            while again.is_empty() && rill_rt::now() < deadline {
                again = next.poll(Duration::from_millis(200)).await.unwrap_or_default();
            }
            (refused, again)
        })
        .await;
    assert_eq!(refused.len(), 1, "the late accept was refused: {refused:?}");
    assert_eq!(again.len(), 1, "the record came back");
    assert_eq!(again[0].delivery_count, 2, "at its second attempt");
    trace.record(format!("refused: {}; delivered again at {:?}", refused[0].error, elapsed()));
    println!("trace-hash: {:016x} events={}", trace.hash(), trace.len());
}

/// A 3-node cluster for a scripted consumer group run, with `client_hosts` client hosts and the
/// members' `timeouts`, and topic `topic` of `partitions` partitions (3 replicas): once it and
/// the offsets topic have leaders.
async fn group_cluster(
    client_hosts: usize,
    timeouts: rill_coordinator::groups::Timeouts,
    topic: &'static str,
    partitions: u32,
) -> (Arc<SimCluster>, Client) {
    let cluster = Arc::new(SimCluster::start_with(SimOptions {
        nodes: 3,
        client_hosts: client_hosts as u32,
        sync_latency: Duration::from_millis(1),
        transactional_id_expiration: None,
        groups: Some(timeouts),
        producer_limits: None,
        transaction_state_partitions: None,
    }));
    let client = cluster.client().await;
    let c = client.clone();
    cluster
        .on_client(async move {
            wait_until("the topic created", || async { c.create_topic(topic, partitions, 3, &[]).await.ok() }).await;
            c.wait_for_leaders(topic, SETTLE).await.expect("the topic has leaders");
            c.wait_for_leaders(rill_meta::CONSUMER_OFFSETS_TOPIC, SETTLE).await.expect("the offsets topic has leaders")
        })
        .await;
    (cluster, client)
}

/// Grows `topic` to `total` partitions after some heartbeat intervals of quiet, at a seed-drawn
/// phase against the members' heartbeats; answers when it asked.
async fn grow_after_quiet(cluster: &SimCluster, client: &Client, topic: &'static str, total: u32) -> rill_rt::Instant {
    madsim::time::sleep(Duration::from_millis(rand::Rng::gen_range(&mut rill_rt::rng(), 10_000..15_000))).await;
    let c = client.clone();
    let asked = rill_rt::now();
    cluster
        .on_client(async move {
            wait_until("the topic grown", || async { c.create_partitions(topic, total).await.ok() }).await;
        })
        .await;
    asked
}

/// Counts the partitions a member lost without revoking them (its membership lost).
struct CountLost(Arc<std::sync::atomic::AtomicUsize>);

impl rill_client::RebalanceListener for CountLost {
    fn on_lost(&mut self, partitions: &[rill_client::TopicPartition]) {
        self.0.fetch_add(partitions.len(), Ordering::SeqCst);
    }
}

/// A member of group `g` subscribed to `topic` on client host `host`: polls until `stop`, and
/// publishes how many partitions it owns after each poll, and how many it ever lost.
fn polling_member(
    cluster: &SimCluster,
    host: usize,
    topic: &'static str,
    owned: Arc<std::sync::atomic::AtomicUsize>,
    lost: Arc<std::sync::atomic::AtomicUsize>,
    stop: Arc<AtomicU8>,
) -> madsim::task::JoinHandle<()> {
    let bootstrap = cluster.bootstrap();
    cluster.client_host(host).spawn(async move {
        let client = rill_chaos::cluster::connect(bootstrap).await;
        let config = rill_client::ConsumerConfig { group_id: Some("g".into()), ..Default::default() };
        let mut consumer = rill_client::Consumer::new(client, config);
        consumer.set_rebalance_listener(CountLost(lost));
        consumer.subscribe(&[topic]).expect("subscribe");
        while stop.load(Ordering::SeqCst) == RUN {
            let _ = consumer.poll(Duration::from_millis(100)).await;
            owned.store(consumer.assignment().len(), Ordering::SeqCst);
        }
        let _ = consumer.shutdown().await;
    })
}

/// Scripted: with Kafka's default timeouts (5 s heartbeat interval), a member owning all four
/// partitions is told at once — its heartbeat is held by the coordinator as a long poll — that a
/// joining member needs two of them, and the join is stable within a second: not at the owner's
/// next heartbeat, 0–5 s later.
#[madsim::test]
async fn an_owner_hears_at_once_that_a_joining_member_needs_its_partitions() {
    const BOUND: Duration = Duration::from_secs(1);
    let trace = begin_scripted();
    let (cluster, _client) = group_cluster(2, rill_coordinator::groups::Timeouts::default(), "moves", 4).await;
    let stop = Arc::new(AtomicU8::new(RUN));
    let (a_owns, b_owns) = (Arc::default(), Arc::default());
    let a = polling_member(&cluster, 0, "moves", Arc::clone(&a_owns), Arc::default(), stop.clone());
    wait_until("the first member owning every partition", || {
        let n = std::sync::atomic::AtomicUsize::load(&a_owns, Ordering::SeqCst);
        async move { (n == 4).then_some(()) }
    })
    .await;
    // Some heartbeat intervals of quiet, at a seed-drawn phase against the owner's heartbeats.
    madsim::time::sleep(Duration::from_millis(rand::Rng::gen_range(&mut rill_rt::rng(), 10_000..15_000))).await;
    let joined = rill_rt::now();
    trace.record(format!("the second member joins at {:?}", elapsed()));
    let b = polling_member(&cluster, 1, "moves", Arc::clone(&b_owns), Arc::default(), stop.clone());
    wait_until("the partitions shared", || {
        let shared = std::sync::atomic::AtomicUsize::load(&a_owns, Ordering::SeqCst) == 2
            && std::sync::atomic::AtomicUsize::load(&b_owns, Ordering::SeqCst) == 2;
        async move { shared.then_some(()) }
    })
    .await;
    let took = joined.elapsed();
    trace.record(format!("shared {took:?} after the join"));
    println!("the join was stable {took:?} after the second member started");
    assert!(took < BOUND, "the partitions were shared {took:?} after the join; the bound is {BOUND:?}");
    stop.store(LEAVE, Ordering::SeqCst);
    a.await.expect("the first member");
    b.await.expect("the second member");
    println!("trace-hash: {:016x} events={}", trace.hash(), trace.len());
}

/// Scripted: with Kafka's default timeouts (5 s heartbeat interval), the only member of a group
/// hears at once that its topic grew — its held heartbeat is decided again when the metadata
/// changes — and owns the new partitions within a second: not at its next heartbeat, 0–5 s
/// later.
#[madsim::test]
async fn a_lone_member_hears_at_once_that_its_topic_grew() {
    const BOUND: Duration = Duration::from_secs(1);
    let trace = begin_scripted();
    let (cluster, client) = group_cluster(1, rill_coordinator::groups::Timeouts::default(), "grows", 2).await;
    let stop = Arc::new(AtomicU8::new(RUN));
    let owns: Arc<std::sync::atomic::AtomicUsize> = Arc::default();
    let member = polling_member(&cluster, 0, "grows", Arc::clone(&owns), Arc::default(), stop.clone());
    let owning = |n: usize| std::sync::atomic::AtomicUsize::load(&owns, Ordering::SeqCst) == n;
    wait_until("the member owning both partitions", || {
        let both = owning(2);
        async move { both.then_some(()) }
    })
    .await;
    let grown = grow_after_quiet(&cluster, &client, "grows", 4).await;
    wait_until("the member owning all four", || {
        let all = owning(4);
        async move { all.then_some(()) }
    })
    .await;
    let took = grown.elapsed();
    trace.record(format!("owned four {took:?} after the topic grew"));
    println!("the member owned the new partitions {took:?} after the topic grew");
    assert!(took < BOUND, "the new partitions were owned {took:?} after the topic grew; the bound is {BOUND:?}");
    stop.store(LEAVE, Ordering::SeqCst);
    member.await.expect("the member");
    println!("trace-hash: {:016x} events={}", trace.hash(), trace.len());
}

/// Scripted: heartbeats held as long polls keep a session barely longer than the heartbeat
/// interval (6 s and 5 s, as a user may set them): two members idle for 30 s keep their
/// partitions — neither side counts a held heartbeat's wait against the session — and the group
/// stays at its epoch.
#[madsim::test]
async fn held_heartbeats_keep_a_short_session() {
    let trace = begin_scripted();
    let (cluster, _client) = group_cluster(
        2,
        rill_coordinator::groups::Timeouts { session_ms: 6_000, heartbeat_interval_ms: 5_000 },
        "idle",
        4,
    )
    .await;
    let stop = Arc::new(AtomicU8::new(RUN));
    let (a_owns, b_owns) = (Arc::default(), Arc::default());
    let lost: Arc<std::sync::atomic::AtomicUsize> = Arc::default();
    let a = polling_member(&cluster, 0, "idle", Arc::clone(&a_owns), lost.clone(), stop.clone());
    let b = polling_member(&cluster, 1, "idle", Arc::clone(&b_owns), lost.clone(), stop.clone());
    let owns = |x: &Arc<std::sync::atomic::AtomicUsize>| std::sync::atomic::AtomicUsize::load(x, Ordering::SeqCst);
    wait_until("the partitions shared", || {
        let shared = owns(&a_owns) == 2 && owns(&b_owns) == 2;
        async move { shared.then_some(()) }
    })
    .await;
    let epoch_of = |cluster: &SimCluster| group_run::led_group(cluster).map(|(g, _)| g.epoch);
    let epoch = wait_until("the group's epoch", || {
        let e = epoch_of(&cluster);
        async move { e }
    })
    .await;
    trace.record(format!("shared at group epoch {epoch}, {:?}", elapsed()));
    madsim::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(owns(&lost), 0, "partitions lost by idle members (their membership ran out)");
    assert_eq!((owns(&a_owns), owns(&b_owns)), (2, 2));
    assert_eq!(epoch_of(&cluster), Some(epoch), "the group rebalanced while its members were idle");
    stop.store(LEAVE, Ordering::SeqCst);
    a.await.expect("the first member");
    b.await.expect("the second member");
    println!("trace-hash: {:016x} events={}", trace.hash(), trace.len());
}

/// Scripted: a group of 50 members with Kafka's default timeouts (5 s heartbeat interval)
/// settles on 50 partitions, one each, within 10 s of starting, and when the topic grows to 100
/// every member owns two within 3 s — 50 assignments, each a replicated change of the group,
/// taken in turn. No member loses its membership.
#[madsim::test]
async fn a_group_of_fifty_settles_and_takes_new_partitions_within_seconds() {
    const MEMBERS: usize = 50;
    const HOSTS: usize = 5;
    const SETTLE_BOUND: Duration = Duration::from_secs(10);
    const BOUND: Duration = Duration::from_secs(3);
    let trace = begin_scripted();
    let (cluster, client) =
        group_cluster(HOSTS, rill_coordinator::groups::Timeouts::default(), "wide", MEMBERS as u32).await;
    let stop = Arc::new(AtomicU8::new(RUN));
    let owned: Vec<Arc<std::sync::atomic::AtomicUsize>> = (0..MEMBERS).map(|_| Arc::default()).collect();
    let lost: Arc<std::sync::atomic::AtomicUsize> = Arc::default();
    let started = rill_rt::now();
    let members: Vec<_> = (0..MEMBERS)
        .map(|i| polling_member(&cluster, i % HOSTS, "wide", Arc::clone(&owned[i]), lost.clone(), stop.clone()))
        .collect();
    let each_owns = |n: usize| owned.iter().all(|o| std::sync::atomic::AtomicUsize::load(o, Ordering::SeqCst) == n);
    wait_until("one partition each", || {
        let settled = each_owns(1);
        async move { settled.then_some(()) }
    })
    .await;
    let settled = started.elapsed();
    trace.record(format!("settled {settled:?} after the members started"));
    println!("{MEMBERS} members settled {settled:?} after they started");
    assert!(settled < SETTLE_BOUND, "the group settled {settled:?} after its members started");
    let grown = grow_after_quiet(&cluster, &client, "wide", 2 * MEMBERS as u32).await;
    wait_until("two partitions each", || {
        let shared = each_owns(2);
        async move { shared.then_some(()) }
    })
    .await;
    let took = grown.elapsed();
    trace.record(format!("two each {took:?} after the topic grew"));
    println!("every member owned two partitions {took:?} after the topic grew");
    assert!(took < BOUND, "the new partitions were handed out {took:?} after the topic grew; the bound is {BOUND:?}");
    assert_eq!(std::sync::atomic::AtomicUsize::load(&lost, Ordering::SeqCst), 0, "partitions lost by members");
    stop.store(LEAVE, Ordering::SeqCst);
    for m in members {
        m.await.expect("a member");
    }
    println!("trace-hash: {:016x} events={}", trace.hash(), trace.len());
}

/// Runs a generated scenario and fails on any violation.
async fn scenario(name: &str) {
    init_logs();
    let sc = scenarios::find(name).expect("scenario exists");
    let report = rill_chaos::run::run(sc).await;
    report.print();
    assert!(report.violations.is_empty(), "{} violation(s); first: {}", report.violations.len(), report.violations[0]);
}

#[madsim::test]
async fn acks_all_3() {
    scenario("acks_all_3").await;
}

#[madsim::test]
async fn acks_all_5() {
    scenario("acks_all_5").await;
}

#[madsim::test]
async fn acks_leader_3() {
    scenario("acks_leader_3").await;
}

#[madsim::test]
async fn idempotence() {
    scenario("idempotence").await;
}

#[madsim::test]
async fn producer_churn() {
    scenario("producer_churn").await;
}

#[madsim::test]
async fn trims() {
    scenario("trims").await;
}

#[madsim::test]
async fn compaction() {
    scenario("compaction").await;
}

/// Generated: consumer group members join, crash mid-batch, leave and pause past their session
/// while nodes crash and the network partitions (`rill_chaos::group_run`). Caught mutations:
/// `commit-before-process`, `double-assign`.
#[madsim::test]
async fn groups() {
    init_logs();
    let report = group_run::run_generated().await;
    report.print();
    assert!(report.violations.is_empty(), "{} violation(s); first: {}", report.violations.len(), report.violations[0]);
}

/// Generated: classic group members (JoinGroup / SyncGroup, eager, the leader assigning
/// ranges) join, crash mid-batch, leave and pause past their session while nodes crash and the
/// network partitions (`rill_chaos::classic_run`). Caught mutation: `stale-sync-assignment`.
#[madsim::test]
async fn classic_groups() {
    init_logs();
    let report = classic_run::run_generated().await;
    report.print();
    assert!(report.violations.is_empty(), "{} violation(s); first: {}", report.violations.len(), report.violations[0]);
}

/// Generated: transactional producers commit and abort over three partitions, instances crash
/// mid-transaction and are replaced, idle past their transactional id's expiration now and then,
/// a read_committed reader follows, under every node fault (`rill_chaos::txn_run`). Caught
/// mutations: `lso-off-by-one`, `no-epoch-bump`, `expire-open-transactions`.
#[madsim::test]
async fn transactions() {
    init_logs();
    let report = txn_run::run_generated().await;
    report.print();
    assert!(report.violations.is_empty(), "{} violation(s); first: {}", report.violations.len(), report.violations[0]);
}

/// Generated: consume-transform-produce processors read an input topic as a consumer group and
/// write one output per input, committing the group's offsets in the output's transaction;
/// instances crash mid-transaction and are replaced, under every node fault
/// (`rill_chaos::ctp_run`). Caught mutation: `txn-offsets-on-abort`.
#[madsim::test]
async fn exactly_once() {
    init_logs();
    let report = ctp_run::run_generated().await;
    report.print();
    assert!(report.violations.is_empty(), "{} violation(s); first: {}", report.violations.len(), report.violations[0]);
}

/// Generated: share group workers accept, release with delays, reject, renew, stall past their
/// locks and ignore records while they crash and pause and nodes crash and the network
/// partitions (`rill_chaos::share_run`). Caught mutations: `share-acquire-unreplicated`,
/// `expiry-ignores-renewal`, `late-ack-applied`.
#[madsim::test]
async fn share_groups() {
    init_logs();
    let report = share_run::run_generated().await;
    report.print();
    assert!(report.violations.is_empty(), "{} violation(s); first: {}", report.violations.len(), report.violations[0]);
}

/// Not a scenario: prints every scenario with its description (`chaos/run --list`).
#[madsim::test]
async fn list_scenarios() {
    println!("smoke_leader_power_failure_and_rejoin\tscripted: crash and power-fail the leader, fail over, rejoin, converge (default)");
    println!("woken_quiescent_group_keeps_its_leader\tscripted: writes wake a quiescent group on slow disks; no election (default)");
    println!("concurrent_batches_share_entries\tscripted: concurrent batches merge into entries, each at its own offset (default)");
    println!("control_batches_take_offsets_and_are_skipped\tscripted: a transaction marker takes an offset; consumers skip it (default)");
    println!("state_partition_purges_and_installs_snapshots\tscripted: a coordinator partition purges behind snapshots; a follower catches up by one (default)");
    println!("a_deposed_offsets_coordinator_never_answers_a_stale_offset\tscripted: group g's coordinator is cut off from the other nodes and a newer offset is committed through its successor; asked directly, the deposed one never answers the old offset (default)");
    println!("a_deposed_transaction_coordinator_never_describes_a_stale_transaction\tscripted: transactional id d-txn's coordinator (the only transaction-state partition's leader) is cut off from the other nodes and a new producer instance bumps the id's epoch through its successor; asked directly, the deposed one never describes or lists the old epoch (default)");
    println!("a_late_copy_of_a_marker_never_decides_the_next_transaction\tscripted: a copy of a committed transaction's marker reaches its partition while the producer's next transaction is open there (same producer and coordinator epochs); it decides nothing, and after that transaction's abort read_committed shows the first one's record only (default)");
    println!("a_groups_owed_marker_comes_before_the_next_transactions_offsets\tscripted: a producer's next transaction's offsets reach its group's partition before the decided transaction's marker; the group's coordinator writes that owed marker first, so the decided offset is committed, not dropped as orphaned (default)");
    println!("record_partition_installs_a_snapshot_with_its_records\tscripted: a record partition purges below its log start; a follower catches up by a snapshot carrying the retained records (default)");
    println!("a_long_snapshot_transfer_keeps_its_leader\tscripted: a follower catches up by a snapshot transfer longer than the leader lease; the leader keeps its term (default)");
    println!("a_leader_dying_with_its_last_entry_on_one_follower_is_replaced_by_that_follower\tscripted: the leader dies with its last entry on the follower that is not its designated successor; that follower stands above the refused candidate and leads before openraft's own timer (default)");
    println!("an_acks_0_flood_waits_for_the_log\tscripted: 100 acks=0 requests of 1 MB on slow disks: no replica queues more than 32 MiB (default)");
    println!("a_failed_disk_takes_its_node_out\tscripted: the leader's syncs fail; it stops its groups and looks down, another replica leads (default)");
    println!("an_owner_hears_at_once_that_a_joining_member_needs_its_partitions\tscripted: with a 5 s heartbeat interval, an owner's held heartbeat tells it at once that a joining member needs its partitions; the join is stable within a second (default)");
    println!("a_group_of_fifty_settles_and_takes_new_partitions_within_seconds\tscripted: 50 members with 5 s heartbeats settle on 50 partitions within 10 s; when the topic grows to 100 each owns two within 3 s (5-14 s of CPU a seed: scripts/test.sh runs 5 seeds)");
    println!("a_lone_member_hears_at_once_that_its_topic_grew\tscripted: with a 5 s heartbeat interval, a group's only member hears at once that its topic grew and owns the new partitions within a second (default)");
    println!("held_heartbeats_keep_a_short_session\tscripted: with a 6 s session and 5 s heartbeats held as long polls, two idle members keep their partitions for 30 s and the group its epoch (default)");
    println!("consumer_group_members_never_share_a_partition\tscripted: group members join, crash and leave while the coordinator is killed: no partition ever has two owners, commits never go back, everything is handed out (default)");
    println!("a_late_acknowledgement_is_refused_after_a_failover\tscripted: a share group member's accept sent after its lock ran out, while the partition's new leader has not expired the lock yet, is refused; the record goes to the next member at its second attempt (default)");
    println!("groups\tgenerated: consumer group members join, crash mid-batch, leave and pause past their session under every node fault; ownership in epoch order, nothing skipped, lag reaches 0 (default)");
    println!("classic_groups\tgenerated: classic group members (JoinGroup / SyncGroup, eager) join, crash mid-batch, leave and pause past their session under every node fault; no partition handed to two members of a generation, generation order, commits never go back, nothing skipped, lag reaches 0 (default)");
    println!("transactions\tgenerated: transactional producers commit and abort, crash mid-transaction and are fenced by their successors, a read_committed reader follows, under every node fault; no aborted read, no lost committed write, no torn transaction, the LSO reaches the HW (default)");
    println!("share_groups\tgenerated: share group workers accept, release with delays, reject, renew, stall past their locks and ignore records while they crash and pause, under every node fault; delivery counts go up within the limit, nothing done comes back, no delay is cut short, no lock ends early, no late acknowledgement applies, every record is done once healed (20-30 s of CPU a seed: scripts/test.sh runs 20 seeds)");
    println!("exactly_once\tgenerated: consume-transform-produce processors commit their input's offsets in their output's transaction, abort now and then, crash mid-transaction and are fenced by their successors, under every node fault; every input has exactly one committed output (default)");
    for s in scenarios::SCENARIOS {
        println!("{}\t{}{}", s.name, s.description, if s.default { " (default)" } else { "" });
    }
}
