//! Share groups on a running one-node cluster (in memory): a partition's leader acquires records
//! for members with their fetches, applies their acknowledgements, ends locks that run out by
//! itself, holds delayed records back and archives a record past its delivery limit — each
//! through entries of the partition's log. (Real builds: the simulation has its own harness.)
#![cfg(not(madsim))]

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rill_broker::share::leader::{ShareFetchRequest, ShareFetched, ShareStart};
use rill_broker::share::{Ack, AckRefusal, ArchiveReason, ShareSettings};
use rill_broker::{Acks, Partition};

use rill_proto::common::ErrorCode;

use super::share::{AckRange, ShareFetchOutcome, SharePartitionAcks, ShareTopic};
use super::tests::{ctx, must_create, must_reach, one_node};
use super::Answers;
use crate::api::rules::rpc;
use crate::node::Node;

/// Records to produce, one batch each.
const RECORDS: u64 = 10;

/// The leader of `topic`'s partition 0 on `node`, with `RECORDS` records written.
async fn partition_with_records(node: &Node, topic: &str) -> Arc<Partition> {
    let meta = node.meta();
    let group = meta.topics[topic].partitions[0].group;
    let partition = node.partition_by_group(group).expect("led here");
    for i in 0..RECORDS {
        let mut builder = rill_records::BatchBuilder::new(rill_records::Compression::None);
        let value = Some(Bytes::from(format!("job-{i}")));
        builder.push(rill_records::Record { value, ..Default::default() }).unwrap();
        partition.produce(builder.build().unwrap(), Acks::All, Duration::from_secs(10), None).await.unwrap();
    }
    partition
}

fn settings() -> ShareSettings {
    ShareSettings { lock_ms: 30_000, delivery_limit: 3, max_per_member: 100, ..Default::default() }
}

fn fetch(member: &str, max_records: usize, acks: Vec<(u64, Ack)>, settings: &ShareSettings) -> ShareFetchRequest {
    ShareFetchRequest {
        group: "workers".into(),
        member: member.into(),
        settings: settings.clone(),
        start: ShareStart::Earliest,
        acks,
        max_records,
        max_bytes: 1 << 20,
        max_wait: Duration::ZERO,
    }
}

fn offsets(fetched: &ShareFetched) -> Vec<u64> {
    fetched.acquired.iter().map(|(o, _)| *o).collect()
}

/// The offsets of the records in `fetched`'s batches that it acquired: what a member processes.
fn delivered(fetched: &ShareFetched) -> Vec<u64> {
    let mut out = Vec::new();
    for b in &fetched.batches {
        let decoded = rill_records::decode(&b.data, usize::MAX).unwrap();
        for r in decoded.records {
            let offset = b.base_offset + r.offset_delta as u64;
            if fetched.acquired.iter().any(|(o, _)| *o == offset) {
                out.push(offset);
            }
        }
    }
    out
}

#[tokio::test]
async fn members_share_a_partition_record_by_record_and_a_fetch_carries_acknowledgements() {
    let (node, _coordinators, service) = one_node().await;
    must_create(&node, &service, "jobs", 1).await;
    let p = partition_with_records(&node, "jobs").await;
    let s = settings();

    let a = p.share_fetch(fetch("a", 4, vec![], &s)).await.unwrap();
    assert_eq!(a.acquired, vec![(0, 1), (1, 1), (2, 1), (3, 1)]);
    assert_eq!(delivered(&a), vec![0, 1, 2, 3], "the batches hold the acquired records");
    let b = p.share_fetch(fetch("b", 4, vec![], &s)).await.unwrap();
    assert_eq!(offsets(&b), vec![4, 5, 6, 7], "b gets the next records, not a's");
    // b's acknowledgement of a record it does not hold changes nothing.
    let refused = p.share_acknowledge("workers", "b", &s, vec![(0, Ack::Accept)]).await.unwrap();
    assert_eq!(refused.refused, vec![(0, AckRefusal::NotHeld)]);
    // a accepts its four with its next fetch: one entry, and a gets the rest.
    let accepts = (0..4).map(|o| (o, Ack::Accept)).collect();
    let a = p.share_fetch(fetch("a", 4, accepts, &s)).await.unwrap();
    assert!(a.refused.is_empty(), "{a:?}");
    assert_eq!(offsets(&a), vec![8, 9]);
    let state = p.share_state("workers").unwrap();
    assert_eq!((state.start_offset(), state.end_offset()), (4, RECORDS));
    // Nothing is left to acquire; a long poll answers empty at its end.
    let mut waiting = fetch("c", 4, vec![], &s);
    waiting.max_wait = Duration::from_millis(200);
    assert!(p.share_fetch(waiting).await.unwrap().acquired.is_empty());
}

#[tokio::test]
async fn a_lock_that_runs_out_ends_by_itself_and_the_late_acknowledgement_changes_nothing() {
    let (node, _coordinators, service) = one_node().await;
    must_create(&node, &service, "jobs", 1).await;
    let p = partition_with_records(&node, "jobs").await;
    let s = ShareSettings { lock_ms: 300, ..settings() };
    let a = p.share_fetch(fetch("a", 2, vec![], &s)).await.unwrap();
    assert_eq!(offsets(&a), vec![0, 1]);
    // Nobody acknowledges: the leader's timer ends the locks and the records come back.
    must_reach("the locks ended", || async {
        p.share_state("workers")
            .is_some_and(|st| st.in_flight().values().all(|t| t.state == rill_broker::share::InFlight::Available))
    })
    .await;
    let late = p.share_acknowledge("workers", "a", &s, vec![(0, Ack::Accept)]).await.unwrap();
    assert_eq!(late.refused, vec![(0, AckRefusal::NotHeld)], "a no longer holds it");
    let b = p.share_fetch(fetch("b", 2, vec![], &s)).await.unwrap();
    assert_eq!(b.acquired, vec![(0, 2), (1, 2)], "delivered again, the lapsed attempt counted");
}

#[tokio::test]
async fn a_released_record_waits_out_its_delay_and_a_long_poll_gets_it_then() {
    let (node, _coordinators, service) = one_node().await;
    must_create(&node, &service, "jobs", 1).await;
    let p = partition_with_records(&node, "jobs").await;
    let s = settings();
    // Take everything, then release record 3 for 400 ms and accept the rest.
    let all = p.share_fetch(fetch("a", 100, vec![], &s)).await.unwrap();
    assert_eq!(all.acquired.len() as u64, RECORDS);
    let acks = (0..RECORDS).map(|o| (o, if o == 3 { Ack::Release { delay_ms: 400 } } else { Ack::Accept })).collect();
    let released_at = rill_rt::wall_clock_ms();
    assert!(p.share_acknowledge("workers", "a", &s, acks).await.unwrap().refused.is_empty());
    assert!(p.share_fetch(fetch("b", 10, vec![], &s)).await.unwrap().acquired.is_empty(), "not before its delay");
    let mut waiting = fetch("b", 10, vec![], &s);
    waiting.max_wait = Duration::from_secs(10);
    let again = p.share_fetch(waiting).await.unwrap();
    assert_eq!(again.acquired, vec![(3, 2)]);
    assert!(rill_rt::wall_clock_ms() - released_at >= 400, "delivered again only after its delay");
}

#[tokio::test]
async fn a_long_poll_is_answered_when_a_record_arrives() {
    let (node, _coordinators, service) = one_node().await;
    must_create(&node, &service, "jobs", 1).await;
    let p = partition_with_records(&node, "jobs").await;
    let s = settings();
    assert_eq!(p.share_fetch(fetch("a", 100, vec![], &s)).await.unwrap().acquired.len() as u64, RECORDS);
    let mut waiting = fetch("b", 10, vec![], &s);
    waiting.max_wait = Duration::from_secs(20);
    let poll = tokio::spawn({
        let p = p.clone();
        async move { p.share_fetch(waiting).await }
    });
    let mut builder = rill_records::BatchBuilder::new(rill_records::Compression::None);
    builder.push(rill_records::Record { value: Some(Bytes::from_static(b"late")), ..Default::default() }).unwrap();
    p.produce(builder.build().unwrap(), Acks::All, Duration::from_secs(10), None).await.unwrap();
    let got = poll.await.unwrap().unwrap();
    assert_eq!(got.acquired, vec![(RECORDS, 1)]);
}

#[tokio::test]
async fn a_record_past_its_delivery_limit_is_archived_and_the_others_flow() {
    let (node, _coordinators, service) = one_node().await;
    must_create(&node, &service, "jobs", 1).await;
    let p = partition_with_records(&node, "jobs").await;
    let s = ShareSettings { delivery_limit: 2, ..settings() };
    // Record 0 fails (released) on every attempt; the others are accepted.
    let first = p.share_fetch(fetch("a", 3, vec![], &s)).await.unwrap();
    assert_eq!(offsets(&first), vec![0, 1, 2]);
    let acks = vec![(0, Ack::Release { delay_ms: 0 }), (1, Ack::Accept), (2, Ack::Accept)];
    let second = p.share_fetch(fetch("a", 3, acks, &s)).await.unwrap();
    assert_eq!(second.acquired, vec![(0, 2)], "its last attempt goes alone");
    let third = p.share_fetch(fetch("a", 3, vec![(0, Ack::Release { delay_ms: 0 })], &s)).await.unwrap();
    assert_eq!(third.archived, vec![(0, ArchiveReason::DeliveryLimit)]);
    assert_eq!(offsets(&third), vec![3, 4, 5], "everything else flows");
    assert_eq!(p.share_state("workers").unwrap().start_offset(), 3);
}

#[tokio::test]
async fn a_departed_members_records_come_back_at_once() {
    let (node, _coordinators, service) = one_node().await;
    must_create(&node, &service, "jobs", 1).await;
    let p = partition_with_records(&node, "jobs").await;
    let s = settings();
    assert_eq!(offsets(&p.share_fetch(fetch("a", 2, vec![], &s)).await.unwrap()), vec![0, 1]);
    p.share_release_member("workers", "a").await.unwrap();
    let b = p.share_fetch(fetch("b", 2, vec![], &s)).await.unwrap();
    assert_eq!(b.acquired, vec![(0, 2), (1, 2)], "the departure counted as an attempt");
}

#[tokio::test]
async fn a_group_starting_at_latest_sees_only_what_is_written_after_its_first_fetch() {
    let (node, _coordinators, service) = one_node().await;
    must_create(&node, &service, "jobs", 1).await;
    let p = partition_with_records(&node, "jobs").await;
    let mut first = fetch("a", 10, vec![], &settings());
    first.start = ShareStart::Latest;
    assert!(p.share_fetch(first.clone()).await.unwrap().acquired.is_empty());
    // The first fetch pinned where the group starts: a record written now is the group's.
    assert_eq!(p.share_state("workers").map(|s| s.start_offset()), Some(RECORDS));
    let mut builder = rill_records::BatchBuilder::new(rill_records::Compression::None);
    builder.push(rill_records::Record { value: Some(Bytes::from_static(b"new")), ..Default::default() }).unwrap();
    p.produce(builder.build().unwrap(), Acks::All, Duration::from_secs(10), None).await.unwrap();
    assert_eq!(p.share_fetch(first).await.unwrap().acquired, vec![(RECORDS, 1)]);
}

/// A service share fetch of every partition of `topic` (`partitions` of them) for `member`,
/// carrying `acks` for partition 0.
fn service_fetch(
    member: &str,
    topic: &str,
    partitions: u32,
    acks: Vec<AckRange>,
    max_wait_ms: u32,
) -> crate::service::share::ShareFetchRequest {
    crate::service::share::ShareFetchRequest {
        group: "workers".into(),
        member: member.into(),
        max_wait_ms,
        max_records: 3,
        max_bytes: 0,
        topics: vec![ShareTopic {
            topic: topic.into(),
            topic_id: vec![],
            partitions: (0..partitions)
                .map(|p| SharePartitionAcks { partition: p, acks: if p == 0 { acks.clone() } else { vec![] } })
                .collect(),
        }],
    }
}

/// The records acquired in `answers`, by partition.
fn acquired_by_partition(answers: &Answers<ShareFetchOutcome>) -> Vec<(u32, Vec<(u64, u16)>)> {
    answers[0]
        .partitions
        .iter()
        .map(|(p, a)| (*p, a.as_ref().map(|o| o.fetched.acquired.clone()).unwrap_or_default()))
        .collect()
}

#[tokio::test]
async fn the_service_fetches_every_partition_with_the_groups_settings_and_long_polls_across_them() {
    let (node, _coordinators, service) = one_node().await;
    must_create(&node, &service, "tasks", 2).await;
    let fetch_ctx = ctx(rpc::SHARE_FETCH);
    // The group's settings come from the metadata: a delivery limit of 2, starting at the
    // earliest record.
    let set = vec![
        ("share.delivery.count.limit".to_string(), "2".to_string()),
        ("share.auto.offset.reset".to_string(), "earliest".to_string()),
    ];
    let settings = service
        .alter_share_group_config(&ctx(rpc::ALTER_SHARE_GROUP_CONFIG), "workers".into(), set, vec![])
        .await
        .unwrap();
    assert!(settings.iter().any(|s| s.key == "share.delivery.count.limit" && s.value == "2" && !s.default));
    let bad = vec![("share.delivery.count.limit".to_string(), "0".to_string())];
    let alter_ctx = ctx(rpc::ALTER_SHARE_GROUP_CONFIG);
    let refused = service.alter_share_group_config(&alter_ctx, "workers".into(), bad, vec![]).await;
    assert_eq!(refused.unwrap_err().code, ErrorCode::InvalidConfig);

    // Nothing written yet: the fetch waits across both partitions until one gets a record.
    let poll = tokio::spawn({
        let service = service.clone();
        let fetch_ctx = fetch_ctx.clone();
        async move { service.share_fetch(&fetch_ctx, service_fetch("a", "tasks", 2, vec![], 20_000)).await }
    });
    let meta = node.meta();
    let p1 = node.partition_by_group(meta.topics["tasks"].partitions[1].group).unwrap();
    let mut builder = rill_records::BatchBuilder::new(rill_records::Compression::None);
    builder.push(rill_records::Record { value: Some(Bytes::from_static(b"one")), ..Default::default() }).unwrap();
    p1.produce(builder.build().unwrap(), Acks::All, Duration::from_secs(10), None).await.unwrap();
    let answers = poll.await.unwrap().unwrap();
    assert_eq!(acquired_by_partition(&answers), vec![(0, vec![]), (1, vec![(0, 1)])]);

    // Released once, it comes back on its last attempt; released again, it is archived.
    let release = |p: u32| {
        service_fetch("a", "tasks", 2, vec![], 0).topics.into_iter().map(move |mut t| {
            t.partitions = vec![SharePartitionAcks {
                partition: p,
                acks: vec![AckRange { first: 0, last: 0, ack: Ack::Release { delay_ms: 0 } }],
            }];
            t
        })
    };
    let mut again = service_fetch("a", "tasks", 2, vec![], 0);
    again.topics = release(1).collect();
    let answers = service.share_fetch(&fetch_ctx, again.clone()).await.unwrap();
    assert_eq!(acquired_by_partition(&answers), vec![(1, vec![(0, 2)])]);
    let answers = service.share_fetch(&fetch_ctx, again).await.unwrap();
    let (_, outcome) = &answers[0].partitions[0];
    assert_eq!(outcome.as_ref().unwrap().fetched.archived, vec![(0, ArchiveReason::DeliveryLimit)]);

    // An acknowledgement of a record not held is refused with INVALID_RECORD_STATE, and a
    // partition of an unknown topic answers alone.
    let mut topics = service_fetch("b", "tasks", 1, vec![AckRange { first: 5, last: 5, ack: Ack::Accept }], 0).topics;
    topics.push(ShareTopic { topic: "nope".into(), topic_id: vec![], partitions: vec![SharePartitionAcks::default()] });
    let acked =
        service.share_acknowledge(&ctx(rpc::SHARE_ACKNOWLEDGE), "workers".into(), "b".into(), topics).await.unwrap();
    assert_eq!(acked[0].partitions[0].1.as_ref().unwrap().refused, vec![(5, AckRefusal::NotHeld)]);
    assert_eq!(acked[1].partitions[0].1.as_ref().unwrap_err().code, ErrorCode::UnknownTopicOrPartition);
    // A backwards range refuses its partition; an empty member id the whole request.
    let backwards = service_fetch("b", "tasks", 1, vec![AckRange { first: 5, last: 4, ack: Ack::Accept }], 0);
    let answers = service.share_fetch(&fetch_ctx, backwards).await.unwrap();
    assert_eq!(answers[0].partitions[0].1.as_ref().unwrap_err().code, ErrorCode::InvalidRequest);
    assert!(service.share_fetch(&fetch_ctx, service_fetch("", "tasks", 1, vec![], 0)).await.is_err());
}

/// The records stored in `topic`'s partition `index` on `node`: (key, value, headers) each.
fn stored_records(node: &Node, topic: &str, index: usize) -> Vec<rill_records::Record> {
    let group = node.meta().topics[topic].partitions[index].group;
    let p = node.partition_by_group(group).expect("led here");
    let fetched = p.fetch(0, 1 << 20, rill_broker::Isolation::ReadUncommitted).unwrap();
    fetched.batches.iter().flat_map(|b| rill_records::decode(&b.data, usize::MAX).unwrap().records).collect()
}

fn header<'a>(r: &'a rill_records::Record, key: &str) -> Option<&'a str> {
    r.headers
        .iter()
        .find(|h| h.key == key.as_bytes())
        .and_then(|h| h.value.as_ref())
        .and_then(|v| std::str::from_utf8(v).ok())
}

#[tokio::test]
async fn rejected_and_exhausted_records_are_copied_to_the_dead_letter_topic_once_with_their_evidence() {
    use rill_broker::share::dead_letters::headers;
    let (node, _coordinators, service) = one_node().await;
    must_create(&node, &service, "jobs", 1).await;
    must_create(&node, &service, "jobs.dlq", 2).await;
    let p = partition_with_records(&node, "jobs").await;
    let s = ShareSettings { delivery_limit: 2, dead_letter_topic: Some("jobs.dlq".into()), ..settings() };
    let first = p.share_fetch(fetch("a", 3, vec![], &s)).await.unwrap();
    assert_eq!(offsets(&first), vec![0, 1, 2]);
    // 1 is rejected; 0 fails on both its attempts; 2 is accepted.
    let acks =
        vec![(0, Ack::Release { delay_ms: 0 }), (1, Ack::Reject { reason: "bad total".into() }), (2, Ack::Accept)];
    let second = p.share_fetch(fetch("a", 3, acks, &s)).await.unwrap();
    assert_eq!(second.acquired, vec![(0, 2)], "its last attempt goes alone");
    p.share_acknowledge("workers", "a", &s, vec![(0, Ack::Release { delay_ms: 0 })]).await.unwrap();
    must_reach("both copies written and their records done", || {
        let p = p.clone();
        async move { p.share_state("workers").is_some_and(|st| st.start_offset() == 3 && st.dead_letters().0.is_empty()) }
    })
    .await;
    // Every copy from partition 0 goes to partition 0 % 2 of the dead-letter topic, in the order
    // the records were archived.
    assert!(stored_records(&node, "jobs.dlq", 1).is_empty());
    let copies = stored_records(&node, "jobs.dlq", 0);
    assert_eq!(copies.len(), 2, "each copied once: {copies:?}");
    let rejected = &copies[0];
    assert_eq!(rejected.value.as_deref(), Some(&b"job-1"[..]), "the record's value is kept");
    assert_eq!(header(rejected, headers::TOPIC), Some("jobs"));
    assert_eq!(header(rejected, headers::PARTITION), Some("0"));
    assert_eq!(header(rejected, headers::OFFSET), Some("1"));
    assert_eq!(header(rejected, headers::GROUP), Some("workers"));
    assert_eq!(header(rejected, headers::CAUSE), Some("rejected"));
    assert_eq!(header(rejected, headers::REASON), Some("bad total"));
    assert_eq!(header(rejected, headers::DELIVERY_COUNT), Some("1"));
    let exhausted = &copies[1];
    assert_eq!(
        (header(exhausted, headers::OFFSET), header(exhausted, headers::CAUSE)),
        (Some("0"), Some("delivery-limit"))
    );
    assert_eq!(header(exhausted, headers::DELIVERY_COUNT), Some("2"));
    assert!(header(exhausted, headers::REASON).is_none());
    let first_ms: i64 = header(exhausted, headers::FIRST_DELIVERY).unwrap().parse().unwrap();
    let last_ms: i64 = header(exhausted, headers::LAST_DELIVERY).unwrap().parse().unwrap();
    assert!(first_ms <= last_ms && first_ms > 0);
    // The writer's copies are an idempotent producer's: one sent again (a new leader after a
    // crash between the copy and its "done") is stored once.
    let writer = p.share_state("workers").unwrap().dead_letter_writer().cloned().unwrap();
    let group = node.meta().topics["jobs.dlq"].partitions[0].group;
    let dlq = node.partition_by_group(group).unwrap();
    let mut again = rill_records::BatchBuilder::new(rill_records::Compression::None).producer(writer.producer_id, 0, 1);
    again.push(rill_records::Record { value: Some(Bytes::from_static(b"again")), ..Default::default() }).unwrap();
    crate::dead_letters::append_local(&dlq, again.build().unwrap()).await.unwrap();
    assert_eq!(stored_records(&node, "jobs.dlq", 0).len(), 2, "a copy sent twice is stored once");
}

#[tokio::test]
async fn copies_wait_while_the_dead_letter_topic_is_missing_and_count_against_the_cap() {
    let (node, _coordinators, service) = one_node().await;
    must_create(&node, &service, "jobs", 1).await;
    let p = partition_with_records(&node, "jobs").await;
    let s = ShareSettings { max_in_flight: 2, dead_letter_topic: Some("later.dlq".into()), ..settings() };
    let first = p.share_fetch(fetch("a", 2, vec![], &s)).await.unwrap();
    let rejects = offsets(&first).into_iter().map(|o| (o, Ack::Reject { reason: "no".into() })).collect();
    let blocked = p.share_fetch(fetch("a", 2, rejects, &s)).await.unwrap();
    assert!(blocked.acquired.is_empty(), "two records wait for their copies: the partition is at its cap");
    assert_eq!(p.share_state("workers").unwrap().dead_letters().0.len(), 2);
    must_create(&node, &service, "later.dlq", 1).await;
    must_reach("the copies written once the topic exists", || {
        let p = p.clone();
        async move { p.share_state("workers").is_some_and(|st| st.dead_letters().0.is_empty()) }
    })
    .await;
    assert_eq!(stored_records(&node, "later.dlq", 0).len(), 2);
    assert_eq!(offsets(&p.share_fetch(fetch("a", 2, vec![], &s)).await.unwrap()), vec![2, 3], "the queue flows again");
}

#[tokio::test]
async fn a_group_whose_dead_letter_topic_is_missing_does_not_hold_up_another_groups_copies() {
    let (node, _coordinators, service) = one_node().await;
    must_create(&node, &service, "jobs", 1).await;
    must_create(&node, &service, "jobs.dlq", 1).await;
    let p = partition_with_records(&node, "jobs").await;
    let stuck = ShareSettings { dead_letter_topic: Some("missing.dlq".into()), ..settings() };
    let working = ShareSettings { dead_letter_topic: Some("jobs.dlq".into()), ..settings() };
    let reject = |fetched: &ShareFetched| {
        offsets(fetched).into_iter().map(|o| (o, Ack::Reject { reason: "no".into() })).collect()
    };
    for (group, s) in [("stuck", &stuck), ("working", &working)] {
        let first = p.share_fetch(ShareFetchRequest { group: group.into(), ..fetch("a", 2, vec![], s) }).await.unwrap();
        p.share_acknowledge(group, "a", s, reject(&first)).await.unwrap();
    }
    must_reach("the working group's copies written", || {
        let p = p.clone();
        async move { p.share_state("working").is_some_and(|st| st.dead_letters().0.is_empty()) }
    })
    .await;
    assert_eq!(stored_records(&node, "jobs.dlq", 0).len(), 2);
    assert_eq!(p.share_state("stuck").unwrap().dead_letters().0.len(), 2, "the other group's copies still wait");
}

#[tokio::test]
async fn describe_shows_who_holds_what_and_the_oldest_pending_record_and_list_names_the_group() {
    let (node, _coordinators, service) = one_node().await;
    must_create(&node, &service, "jobs", 1).await;
    let p = partition_with_records(&node, "jobs").await;
    let s = ShareSettings { delivery_limit: 3, ..settings() };
    let describe = |max| service.describe_share_group(&ctx(rpc::DESCRIBE_SHARE_GROUP), "workers", max).unwrap();
    assert!(describe(10).1.is_empty(), "a group that read nothing here has nothing to show");
    p.share_fetch(fetch("a", 2, vec![], &s)).await.unwrap();
    let b = p.share_fetch(fetch("b", 3, vec![], &s)).await.unwrap();
    assert_eq!(offsets(&b), vec![2, 3, 4]);
    let acks = vec![(0, Ack::Release { delay_ms: 60_000 }), (1, Ack::Accept)];
    p.share_acknowledge("workers", "a", &s, acks).await.unwrap();
    let (now_ms, views) = describe(2);
    assert_eq!(views.len(), 1);
    let v = &views[0];
    assert_eq!((v.topic.as_str(), v.partition, v.start_offset, v.end_offset), ("jobs", 0, 0, 5));
    assert_eq!((v.acquired, v.available, v.delayed, v.high_watermark), (3, 0, 1, RECORDS));
    assert_eq!(v.held.len(), 2, "bounded by the request");
    assert!(v.held.iter().all(|h| h.member == "b" && h.delivery_count == 1 && h.lock_until_ms > now_ms));
    let oldest = v.oldest_pending_append_ms.expect("record 0 is not done");
    assert!(oldest <= now_ms && oldest > now_ms - 60_000);
    assert_eq!(service.list_share_groups(&ctx(rpc::LIST_SHARE_GROUPS)), vec![("workers".to_string(), 1)]);
    let bad = service.describe_share_group(&ctx(rpc::DESCRIBE_SHARE_GROUP), "", 1).unwrap_err();
    assert!(bad.message.contains("group id"), "{bad:?}");
}
