//! Share groups' records (docs/queues.md): fetches that acquire records for a member with the
//! acknowledgements they carry, and acknowledgements alone. A group's settings are
//! [`super::share_admin`]'s.
//!
//! A share group's state on a partition lives in that partition, so each partition of a fetch is
//! served by its leader here (`NOT_LEADER_OR_FOLLOWER` with the leader otherwise), one share entry
//! per partition; the group's settings come from the metadata every node holds. The long poll
//! spans the partitions: with nothing acquirable on any, the fetch waits for any of them to get
//! something (records written, released, expired, or a delay ended) and acquires again — on every
//! partition, so no acquisition is made that the answer would not carry.

use std::sync::Arc;
use std::time::Duration;

use rill_broker::share::leader::{ShareFetchRequest as PartitionFetch, ShareFetched, ShareStart, ShareWatch};
use rill_broker::share::{Ack, AckRefusal, ArchiveReason, ShareSettings};
use rill_broker::Partition;
use rill_proto::common::ErrorCode;

use super::authz::ResourceType;
use super::limits::{self, SeenPartitions};
use super::routing::local_replica;
use super::{Answer, Answers, RequestContext, RequestError, Service, TopicAnswers};
use crate::errors::{self, Refusal};

/// The longest a share fetch waits for records.
pub const MAX_SHARE_FETCH_WAIT: Duration = Duration::from_secs(30);
/// Records acquired per partition when a fetch does not say.
pub const DEFAULT_MAX_RECORDS: u32 = 500;
/// Record bytes read per partition when a fetch does not say.
pub const DEFAULT_PARTITION_MAX_BYTES: u32 = 1 << 20;
/// The most record bytes read per partition, whatever a fetch asks.
pub const MAX_PARTITION_MAX_BYTES: u32 = 16 << 20;
/// The most offsets one request may acknowledge on one partition: no group holds more records
/// in flight on a partition (`share.partition.max.record.locks` is at most this), so a longer
/// range can only name records nobody holds — and would cost memory for nothing.
pub const MAX_ACKS_PER_PARTITION: u64 = rill_meta::group_config::MAX_MAX_IN_FLIGHT as u64;
/// The most records one request may acknowledge in all. Acknowledgements are expanded to one
/// per record before they are proposed, so this bounds what a request of a few bytes (a range
/// is two numbers) can make a node allocate: about 5 MiB.
pub const MAX_ACKS_PER_REQUEST: u64 = 100_000;
/// The most bytes of rejection reasons one request may carry once expanded (a reason is kept
/// with each record its range names).
pub const MAX_REASON_BYTES_PER_REQUEST: u64 = 1 << 20;
/// The longest reason a rejection may carry, in bytes.
pub const MAX_REJECT_REASON_BYTES: usize = 1024;
/// The longest a member id may be, in bytes.
pub const MAX_MEMBER_ID_BYTES: usize = 255;

/// How a member is done with a run of records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AckRange {
    /// The first record.
    pub first: u64,
    /// The last record (inclusive).
    pub last: u64,
    /// How.
    pub ack: Ack,
}

/// One partition of a share fetch or acknowledgement, with the acknowledgements for it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SharePartitionAcks {
    /// The partition.
    pub partition: u32,
    /// Acknowledgements of records the member holds there.
    pub acks: Vec<AckRange>,
}

/// One topic of a share fetch or acknowledgement.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ShareTopic {
    /// The topic, by name (or by id: `topic_id`).
    pub topic: String,
    /// When set (16 bytes), the topic must still have this id.
    pub topic_id: Vec<u8>,
    /// Its partitions.
    pub partitions: Vec<SharePartitionAcks>,
}

/// A share fetch.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ShareFetchRequest {
    /// The share group.
    pub group: String,
    /// The member.
    pub member: String,
    /// Long poll in ms (at most [`MAX_SHARE_FETCH_WAIT`]).
    pub max_wait_ms: u32,
    /// Records to acquire per partition at most (0: [`DEFAULT_MAX_RECORDS`]).
    pub max_records: u32,
    /// Record bytes per partition, about (0: [`DEFAULT_PARTITION_MAX_BYTES`]).
    pub max_bytes: u32,
    /// What to fetch from, and acknowledge.
    pub topics: Vec<ShareTopic>,
}

/// What a share fetch did on one partition.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ShareFetchOutcome {
    /// The acquisition, its batches, and what the acknowledgements did.
    pub fetched: ShareFetched,
}

impl ShareFetchOutcome {
    /// The acquired records as runs of consecutive offsets with one delivery count each:
    /// (first, last, delivery count).
    pub fn acquired_ranges(&self) -> Vec<(u64, u64, u16)> {
        let mut ranges: Vec<(u64, u64, u16)> = Vec::new();
        for &(offset, count) in &self.fetched.acquired {
            match ranges.last_mut() {
                Some((_, last, c)) if *last + 1 == offset && *c == count => *last = offset,
                _ => ranges.push((offset, offset, count)),
            }
        }
        ranges
    }
}

/// An acknowledgement that changed nothing, as a per-record refusal.
pub fn ack_refusal(offset: u64, why: AckRefusal) -> (u64, Refusal) {
    let message = match why {
        AckRefusal::NotHeld => format!(
            "record {offset} is not held by this member (never acquired by it, acknowledged already, or taken by \
             another member after its lock ran out); nothing changed"
        ),
        AckRefusal::LockExpired => {
            format!("the lock on record {offset} ran out before this acknowledgement; it goes to another member")
        }
    };
    (offset, Refusal::new(ErrorCode::InvalidRecordState, message))
}

/// What an acknowledgement did on one partition.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ShareAcknowledgeOutcome {
    /// Acknowledgements that changed nothing, by record.
    pub refused: Vec<(u64, AckRefusal)>,
    /// Records archived (rejected, or released on their last attempt).
    pub archived: Vec<(u64, ArchiveReason)>,
}

/// `ranges` as one acknowledgement per record; refused when a range is backwards, longer than
/// any group holds in flight ([`MAX_ACKS_PER_PARTITION`] in all), names a record twice, or
/// carries a delay or reason out of bounds.
pub fn expand_acks(ranges: &[AckRange]) -> Answer<Acks> {
    let mut total = 0u64;
    for r in ranges {
        if r.first > r.last {
            return Err(errors::invalid_request(format!(
                "an acknowledgement from offset {} to {}: the first offset is after the last",
                r.first, r.last
            )));
        }
        total = total.saturating_add((r.last - r.first).saturating_add(1));
        if let Ack::Reject { reason } = &r.ack {
            if reason.len() > MAX_REJECT_REASON_BYTES {
                return Err(errors::invalid_request(format!(
                    "a rejection's reason is {} bytes; at most {MAX_REJECT_REASON_BYTES}",
                    reason.len()
                )));
            }
        }
        if let Ack::Release { delay_ms } = r.ack {
            if delay_ms > rill_meta::group_config::MAX_DELAY_MS {
                return Err(errors::invalid_request(format!(
                    "a release delay of {delay_ms} ms; at most {} (24 hours)",
                    rill_meta::group_config::MAX_DELAY_MS
                )));
            }
        }
    }
    if total > MAX_ACKS_PER_PARTITION {
        return Err(errors::invalid_request(format!(
            "{total} records acknowledged on one partition; no group holds more than {MAX_ACKS_PER_PARTITION} in flight there"
        )));
    }
    let mut acks: Acks = Vec::with_capacity(total as usize);
    for r in ranges {
        acks.extend((r.first..=r.last).map(|o| (o, r.ack.clone())));
    }
    let mut offsets: Vec<u64> = acks.iter().map(|(o, _)| *o).collect();
    offsets.sort_unstable();
    if let Some(w) = offsets.windows(2).find(|w| w[0] == w[1]) {
        return Err(errors::invalid_request(format!("record {} is acknowledged twice in one request", w[0])));
    }
    Ok(acks)
}

/// Refuses a request whose acknowledgements, expanded to one per record, would pass
/// [`MAX_ACKS_PER_REQUEST`] records or [`MAX_REASON_BYTES_PER_REQUEST`] bytes of reasons —
/// before anything is expanded.
pub fn check_ack_budget(topics: &[ShareTopic]) -> Result<(), RequestError> {
    let (mut records, mut reason_bytes) = (0u64, 0u64);
    for r in topics.iter().flat_map(|t| &t.partitions).flat_map(|p| &p.acks) {
        let len = r.last.saturating_sub(r.first).saturating_add(1);
        records = records.saturating_add(len);
        if let Ack::Reject { reason } = &r.ack {
            reason_bytes = reason_bytes.saturating_add(len.saturating_mul(reason.len() as u64));
        }
    }
    if records > MAX_ACKS_PER_REQUEST {
        return Err(RequestError::Invalid(format!(
            "the request acknowledges {records} records; at most {MAX_ACKS_PER_REQUEST} per request: split it"
        )));
    }
    if reason_bytes > MAX_REASON_BYTES_PER_REQUEST {
        return Err(RequestError::Invalid(format!(
            "the request's rejection reasons come to {reason_bytes} bytes over the records they name; at most \
             {MAX_REASON_BYTES_PER_REQUEST}: shorten them or split the request"
        )));
    }
    Ok(())
}

/// Checks a share request's group and member ids.
fn check_ids(group: &str, member: &str) -> Result<(), RequestError> {
    rill_meta::group_config::check_group_id(group).map_err(|e| RequestError::Invalid(e.message))?;
    if member.is_empty() || member.len() > MAX_MEMBER_ID_BYTES {
        return Err(RequestError::Invalid(format!(
            "a member id must be 1 to {MAX_MEMBER_ID_BYTES} bytes, got {} bytes",
            member.len()
        )));
    }
    Ok(())
}

/// Acknowledgements of single records.
type Acks = Vec<(u64, Ack)>;

/// One partition of a share request, resolved: its replica here and its acknowledgements.
struct Target {
    topic_idx: usize,
    partition: u32,
    replica: Answer<(Arc<Partition>, Acks)>,
}

impl Service {
    /// The settings and start of share group `group`, from the metadata.
    fn share_settings(&self, group: &str) -> (ShareSettings, ShareStart) {
        let config = self.node.meta().share_group_config(group);
        (ShareSettings::of_group(&config), config.auto_offset_reset.into())
    }

    /// Resolves each partition of `topics` to its replica here and its acknowledgements: a
    /// denied topic, a partition named twice, one not led here or malformed acknowledgements
    /// answer that partition alone.
    fn share_targets(&self, ctx: &RequestContext, group: &str, topics: &mut [ShareTopic]) -> Answer<Vec<Target>> {
        self.authorize(ctx, ResourceType::Group, group)?;
        let meta = self.node.meta();
        super::checks::name_topics_by_id(&meta, topics.iter_mut().map(|t| (&mut t.topic, &t.topic_id[..])));
        let mut seen = SeenPartitions::default();
        let mut targets = Vec::new();
        for (ti, t) in topics.iter().enumerate() {
            let denied = self.authorize(ctx, ResourceType::Topic, &t.topic).err();
            for p in &t.partitions {
                let replica = match &denied {
                    Some(e) => Err(e.clone()),
                    None if seen.first(&t.topic, p.partition) => {
                        local_replica(&self.node, &t.topic, &t.topic_id, p.partition)
                            .and_then(|r| expand_acks(&p.acks).map(|acks| (r, acks)))
                    }
                    None => Err(errors::duplicate_partition(&t.topic, p.partition)),
                };
                targets.push(Target { topic_idx: ti, partition: p.partition, replica });
            }
        }
        Ok(targets)
    }

    /// Acquires records for a member from each partition named (led here), applying the
    /// acknowledgements it carries for each first — one share entry per partition. When nothing
    /// is acquirable anywhere, waits up to `max_wait_ms` for any partition to get something, then
    /// acquires again on all of them.
    pub async fn share_fetch(
        &self,
        ctx: &RequestContext,
        mut req: ShareFetchRequest,
    ) -> Result<Answers<ShareFetchOutcome>, RequestError> {
        limits::check_counts("ShareFetch", req.topics.len(), req.topics.iter().map(|t| t.partitions.len()).sum())?;
        check_ids(&req.group, &req.member)?;
        check_ack_budget(&req.topics)?;
        let mut answers: Answers<ShareFetchOutcome> = req
            .topics
            .iter()
            .map(|t| TopicAnswers { topic: t.topic.clone(), partitions: Vec::with_capacity(t.partitions.len()) })
            .collect();
        let targets = match self.share_targets(ctx, &req.group, &mut req.topics) {
            Ok(targets) => targets,
            Err(refusal) => {
                // The group is denied: every partition says so.
                for (answer, t) in answers.iter_mut().zip(&req.topics) {
                    answer.partitions = t.partitions.iter().map(|p| (p.partition, Err(refusal.clone()))).collect();
                }
                return Ok(answers);
            }
        };
        let (settings, start) = self.share_settings(&req.group);
        let max_wait = Duration::from_millis(u64::from(req.max_wait_ms)).min(MAX_SHARE_FETCH_WAIT);
        let wait_until = rill_rt::now() + max_wait;
        let max_records = match req.max_records {
            0 => DEFAULT_MAX_RECORDS,
            n => n,
        } as usize;
        let max_bytes = match req.max_bytes {
            0 => DEFAULT_PARTITION_MAX_BYTES,
            n => n.min(MAX_PARTITION_MAX_BYTES),
        } as usize;
        // Each partition's answer so far: the first round's acknowledgements, then the round
        // that acquired.
        let mut results: Vec<Answer<ShareFetched>> =
            targets.iter().map(|t| t.replica.as_ref().map(|_| ShareFetched::default()).map_err(Clone::clone)).collect();
        let mut first_round = true;
        loop {
            let live: Vec<(usize, &Arc<Partition>, Acks)> = targets
                .iter()
                .enumerate()
                .filter(|(i, _)| results[*i].is_ok())
                .filter_map(|(i, t)| t.replica.as_ref().ok().map(|(r, acks)| (i, r, acks)))
                .map(|(i, r, acks)| (i, r, if first_round { acks.clone() } else { Vec::new() }))
                .collect();
            if live.is_empty() {
                break;
            }
            let mut watches: Vec<(usize, ShareWatch)> =
                live.iter().map(|(i, r, _)| (*i, r.share_watch(settings.isolation))).collect();
            let rounds = live.into_iter().map(|(i, r, acks)| {
                let fetch = PartitionFetch {
                    group: req.group.clone(),
                    member: req.member.clone(),
                    settings: settings.clone(),
                    start,
                    acks,
                    max_records,
                    max_bytes,
                    max_wait: Duration::ZERO,
                };
                async move { (i, r.share_fetch(fetch).await) }
            });
            let mut acquired = false;
            for (i, round) in futures::future::join_all(rounds).await {
                match round {
                    Err(e) => results[i] = Err(errors::partition(&e, |id| self.node.client_addr(id))),
                    Ok(round) => {
                        if let Ok(so_far) = &mut results[i] {
                            so_far.refused.extend(round.refused);
                            so_far.archived.extend(round.archived);
                            so_far.high_watermark = round.high_watermark;
                            so_far.log_start_offset = round.log_start_offset;
                            if !round.acquired.is_empty() {
                                acquired = true;
                                so_far.acquired = round.acquired;
                                so_far.batches = round.batches;
                                so_far.lock_until_ms = round.lock_until_ms;
                            }
                        }
                    }
                }
            }
            first_round = false;
            if acquired || rill_rt::now() >= wait_until {
                break;
            }
            // Nothing anywhere: wait for any partition to get something, then try them all.
            let waits: Vec<_> = watches
                .iter_mut()
                .filter(|(i, _)| results[*i].is_ok())
                .filter_map(|(i, w)| targets[*i].replica.as_ref().ok().map(|(r, _)| (r, w)))
                .map(|(r, w)| Box::pin(w.changed(r, &req.group, wait_until)))
                .collect();
            if waits.is_empty() {
                break;
            }
            futures::future::select_all(waits).await;
        }
        for (t, result) in targets.into_iter().zip(results) {
            answers[t.topic_idx].partitions.push((t.partition, result.map(|fetched| ShareFetchOutcome { fetched })));
        }
        Ok(answers)
    }

    /// Applies a member's acknowledgements on each partition named (led here), without
    /// fetching: one share entry per partition.
    pub async fn share_acknowledge(
        &self,
        ctx: &RequestContext,
        group: String,
        member: String,
        mut topics: Vec<ShareTopic>,
    ) -> Result<Answers<ShareAcknowledgeOutcome>, RequestError> {
        limits::check_counts("ShareAcknowledge", topics.len(), topics.iter().map(|t| t.partitions.len()).sum())?;
        check_ids(&group, &member)?;
        check_ack_budget(&topics)?;
        let mut answers: Answers<ShareAcknowledgeOutcome> = topics
            .iter()
            .map(|t| TopicAnswers { topic: t.topic.clone(), partitions: Vec::with_capacity(t.partitions.len()) })
            .collect();
        let targets = match self.share_targets(ctx, &group, &mut topics) {
            Ok(targets) => targets,
            Err(refusal) => {
                for (answer, t) in answers.iter_mut().zip(&topics) {
                    answer.partitions = t.partitions.iter().map(|p| (p.partition, Err(refusal.clone()))).collect();
                }
                return Ok(answers);
            }
        };
        let (settings, _) = self.share_settings(&group);
        let acknowledged = targets.into_iter().map(|t| {
            let (group, member, settings) = (&group, &member, &settings);
            async move {
                let answer = match t.replica {
                    Err(e) => Err(e),
                    Ok((r, acks)) => r
                        .share_acknowledge(group, member, settings, acks)
                        .await
                        .map(|a| ShareAcknowledgeOutcome { refused: a.refused, archived: a.archived })
                        .map_err(|e| errors::partition(&e, |id| self.node.client_addr(id))),
                };
                (t.topic_idx, t.partition, answer)
            }
        });
        for (ti, partition, answer) in futures::future::join_all(acknowledged).await {
            answers[ti].partitions.push((partition, answer));
        }
        Ok(answers)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn range(first: u64, last: u64, ack: Ack) -> AckRange {
        AckRange { first, last, ack }
    }

    #[test]
    fn acknowledgement_ranges_expand_and_bad_ones_are_refused_without_allocating() {
        let acks = expand_acks(&[range(3, 5, Ack::Accept), range(9, 9, Ack::Renew)]).unwrap();
        assert_eq!(acks.iter().map(|(o, _)| *o).collect::<Vec<_>>(), vec![3, 4, 5, 9]);
        let refused = |ranges: &[AckRange]| expand_acks(ranges).unwrap_err().message;
        assert!(refused(&[range(5, 3, Ack::Accept)]).contains("after the last"));
        // Refused before anything is allocated for it.
        assert!(refused(&[range(0, u64::MAX, Ack::Accept)]).contains("no group holds more"));
        assert!(refused(&[range(1, 2, Ack::Accept), range(2, 2, Ack::Renew)]).contains("twice"));
        let long_reason = Ack::Reject { reason: "x".repeat(MAX_REJECT_REASON_BYTES + 1) };
        assert!(refused(&[range(1, 1, long_reason)]).contains("reason"));
        assert!(refused(&[range(1, 1, Ack::Release { delay_ms: u64::MAX })]).contains("delay"));
    }

    #[test]
    fn a_request_acknowledging_too_much_is_refused_before_anything_is_expanded() {
        let topic = |acks: Vec<AckRange>| ShareTopic {
            topic: "t".into(),
            topic_id: vec![],
            partitions: (0..3).map(|p| SharePartitionAcks { partition: p, acks: acks.clone() }).collect(),
        };
        // 3 partitions of 40,000 records each: each partition is within its bound, the request not.
        let many = topic(vec![range(0, 39_999, Ack::Accept)]);
        assert!(check_ack_budget(&[many]).unwrap_err().to_string().contains("at most 100000"));
        let reasons = topic(vec![range(0, 999, Ack::Reject { reason: "x".repeat(1000) })]);
        assert!(check_ack_budget(&[reasons]).unwrap_err().to_string().contains("reasons"));
        assert!(check_ack_budget(&[topic(vec![range(0, 999, Ack::Accept)])]).is_ok());
    }

    #[test]
    fn acquired_records_are_answered_as_runs_of_one_delivery_count() {
        let outcome = ShareFetchOutcome {
            fetched: ShareFetched { acquired: vec![(1, 1), (2, 1), (3, 2), (5, 2), (6, 2)], ..Default::default() },
        };
        assert_eq!(outcome.acquired_ranges(), vec![(1, 2, 1), (3, 3, 2), (5, 6, 2)]);
    }
}
