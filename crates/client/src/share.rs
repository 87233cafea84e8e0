//! Share groups (queues on the log; the server's docs/queues.md): a [`ShareConsumer`] takes
//! records from every partition of its topics, record by record, alongside any number of other
//! members of its group, and acknowledges each one.
//!
//! ```no_run
//! # async fn demo(client: rill_client::Client) -> rill_client::Result<()> {
//! use std::time::Duration;
//! use rill_client::share::{AckKind, ShareConsumer, ShareConsumerConfig};
//!
//! let mut jobs = ShareConsumer::new(client, ShareConsumerConfig::new("workers"));
//! jobs.subscribe(["jobs"]);
//! loop {
//!     for record in jobs.poll(Duration::from_secs(1)).await? {
//!         // ... do the work; a record not acknowledged comes back when its lock runs out.
//!         jobs.acknowledge(&record, AckKind::Accept)?;
//!     }
//! }
//! # }
//! ```
//!
//! Guarantees, from the server: a record is delivered to one member at a time, under a lock
//! (`share.record.lock.duration.ms`); its delivery count is replicated before the record is
//! returned, so a crash of this process counts as an attempt and is never lost; a record past
//! the group's delivery limit is archived. The consumer keeps a fetch in flight per leader node
//! across polls (a fetch that acquired records is never dropped: what it returns is delivered
//! by a later poll), and sends acknowledgements with the next fetch to the partition's leader,
//! or at once (`ShareAcknowledge`) when a fetch to that leader is still waiting.
//!
//! Until the share-group coordinator exists, a member names itself (a random id by default) and
//! fetches from every partition of its topics.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use rill_proto::common::ErrorCode;
use rill_proto::share as pb;

use crate::client::{decode_batch, Client};
use crate::error::{self, Error, Result};
use crate::record::ReceivedRecord;

/// How a member is done with a record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AckKind {
    /// Processed: never delivered again.
    Accept,
    /// Not processed: deliver it again, not before `delay` (zero: at once). Counts as an
    /// attempt.
    Release {
        /// How long the record waits before it can be delivered again.
        delay: Duration,
    },
    /// Never to be processed: archived at once, with the reason.
    Reject {
        /// Why (at most 1 KiB).
        reason: String,
    },
    /// Still being processed: the lock starts over.
    Renew,
}

/// How records a member did not acknowledge are treated at its next poll.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AcknowledgementMode {
    /// Every record of a poll not acknowledged by the next poll is accepted then (Kafka's
    /// `share.acknowledgement.mode=implicit`).
    #[default]
    Implicit,
    /// Records are acknowledged only by [`ShareConsumer::acknowledge`]; one left alone comes
    /// back when its lock runs out.
    Explicit,
}

/// A share consumer's settings.
#[derive(Debug, Clone)]
pub struct ShareConsumerConfig {
    /// The share group.
    pub group: String,
    /// This member's id; a random one when empty.
    pub member_id: String,
    /// The most records acquired per partition per fetch (its prefetch; 0 = the server's 500).
    pub max_records: u32,
    /// Implicit or explicit acknowledgement.
    pub acknowledgement_mode: AcknowledgementMode,
}

impl ShareConsumerConfig {
    /// Defaults for `group`: a random member id, the server's prefetch, implicit
    /// acknowledgement.
    pub fn new(group: impl Into<String>) -> Self {
        Self { group: group.into(), member_id: String::new(), max_records: 0, acknowledgement_mode: Default::default() }
    }
}

/// A record a share consumer received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareRecord {
    /// Its topic.
    pub topic: String,
    /// Its partition.
    pub partition: u32,
    /// The record.
    pub record: ReceivedRecord,
    /// How often it was delivered, this time included.
    pub delivery_count: u16,
    /// When this member's lock on it runs out (the leader's clock, ms since the epoch).
    pub lock_until_ms: i64,
}

/// An acknowledgement the server refused (the record was not held by this member, or its lock
/// had run out: it goes to another member).
#[derive(Debug, Clone)]
pub struct RefusedAck {
    /// The record's topic.
    pub topic: String,
    /// Its partition.
    pub partition: u32,
    /// Its offset.
    pub offset: u64,
    /// Why.
    pub error: Error,
}

type Partition = (String, u32);
/// Acknowledgements of single records of one partition.
type Acks = Vec<(u64, AckKind)>;
/// Partitions with their acknowledgements, by leader address.
type ByLeader = BTreeMap<String, Vec<(Partition, Acks)>>;
/// A fetch in flight to one leader: its address, the partitions asked with the
/// acknowledgements it carries for each, and the answer.
type FetchFuture =
    Pin<Box<dyn Future<Output = (String, Vec<(Partition, Acks)>, Result<pb::ShareFetchResponse>)> + Send>>;

/// A member of a share group (see the module documentation).
pub struct ShareConsumer {
    client: Client,
    config: ShareConsumerConfig,
    member_id: String,
    topics: Vec<String>,
    /// Acknowledgements to send, by partition.
    pending: BTreeMap<Partition, Acks>,
    /// Records returned by a poll and not acknowledged yet, by partition.
    unacknowledged: BTreeMap<Partition, HashSet<u64>>,
    /// One fetch in flight per leader node, by address.
    in_flight: FuturesUnordered<FetchFuture>,
    fetching: HashSet<String>,
    /// Records received and not yet returned by a poll.
    buffered: Vec<ShareRecord>,
    refused: Vec<RefusedAck>,
}

impl ShareConsumer {
    /// A member of `config.group` over `client`, subscribed to nothing yet.
    pub fn new(client: Client, config: ShareConsumerConfig) -> Self {
        let member_id = if config.member_id.is_empty() {
            format!("rill-share-{:016x}", rill_rt::random_u64())
        } else {
            config.member_id.clone()
        };
        Self {
            client,
            config,
            member_id,
            topics: Vec::new(),
            pending: BTreeMap::new(),
            unacknowledged: BTreeMap::new(),
            in_flight: FuturesUnordered::new(),
            fetching: HashSet::new(),
            buffered: Vec::new(),
            refused: Vec::new(),
        }
    }

    /// This member's id.
    pub fn member_id(&self) -> &str {
        &self.member_id
    }

    /// Reads `topics` (every partition of each) from the next poll on.
    pub fn subscribe<S: Into<String>>(&mut self, topics: impl IntoIterator<Item = S>) {
        self.topics = topics.into_iter().map(Into::into).collect();
    }

    /// Acknowledges `record` (returned by a poll): sent with the next fetch to its partition's
    /// leader, or by [`ShareConsumer::commit`]. A record acknowledged twice, or not from this
    /// consumer's polls, is refused here.
    pub fn acknowledge(&mut self, record: &ShareRecord, kind: AckKind) -> Result<()> {
        let key = (record.topic.clone(), record.partition);
        let offset = record.record.offset;
        let held = self.unacknowledged.get_mut(&key).is_some_and(|held| held.contains(&offset));
        if !held {
            return Err(Error::InvalidArgument(format!(
                "{}/{} offset {offset} is not a record this consumer holds unacknowledged",
                record.topic, record.partition
            )));
        }
        if kind != AckKind::Renew {
            if let Some(held) = self.unacknowledged.get_mut(&key) {
                held.remove(&offset);
            }
        }
        self.pending.entry(key).or_default().push((offset, kind));
        Ok(())
    }

    /// True when acknowledgements wait to be sent (with the next fetch, or [`Self::commit`]):
    /// after a `commit`, those whose partition's leader moved meanwhile.
    pub fn has_pending(&self) -> bool {
        self.pending.values().any(|acks| !acks.is_empty())
    }

    /// Acknowledgements the server refused since the last call (their records go, or went, to
    /// another member).
    pub fn take_refused(&mut self) -> Vec<RefusedAck> {
        std::mem::take(&mut self.refused)
    }

    /// Records acquired for this member, waiting up to `max_wait` when none are available. In
    /// implicit mode the records of the previous poll not acknowledged yet are accepted first.
    pub async fn poll(&mut self, max_wait: Duration) -> Result<Vec<ShareRecord>> {
        if self.config.acknowledgement_mode == AcknowledgementMode::Implicit {
            self.accept_unacknowledged();
        }
        let deadline = rill_rt::now() + max_wait;
        // Fetches that finished since the last poll first.
        while let Some(Some((addr, asked, answer))) = futures::FutureExt::now_or_never(self.in_flight.next()) {
            self.fetching.remove(&addr);
            self.take_answer(&addr, &asked, answer)?;
        }
        loop {
            self.send_acks_to_busy_leaders().await?;
            let wait = if self.buffered.is_empty() {
                deadline.saturating_duration_since(rill_rt::now())
            } else {
                Duration::ZERO
            };
            self.start_fetches(wait).await?;
            if !self.buffered.is_empty() {
                return Ok(self.deliver());
            }
            let next = match rill_rt::timeout_at(deadline, self.in_flight.next()).await {
                Ok(next) => next,
                Err(_) => return Ok(Vec::new()),
            };
            match next {
                Some((addr, asked, answer)) => {
                    self.fetching.remove(&addr);
                    self.take_answer(&addr, &asked, answer)?;
                }
                // Nothing to fetch from (no topic, or no partition has a leader yet).
                None => {
                    if rill_rt::now() >= deadline {
                        return Ok(Vec::new());
                    }
                    rill_rt::sleep(Duration::from_millis(100).min(deadline.saturating_duration_since(rill_rt::now())))
                        .await;
                }
            }
            if !self.buffered.is_empty() {
                return Ok(self.deliver());
            }
            if rill_rt::now() >= deadline {
                return Ok(Vec::new());
            }
        }
    }

    /// Sends every pending acknowledgement now (`ShareAcknowledge` to each partition's
    /// leader), and returns the ones of them refused.
    pub async fn commit(&mut self) -> Result<Vec<RefusedAck>> {
        let pending = std::mem::take(&mut self.pending);
        // Only this commit's refusals: those of acknowledgements that rode fetches stay for
        // `take_refused`, so a caller can tell which acknowledgement was refused.
        let before = self.refused.len();
        self.send_acks(pending.into_iter().collect()).await?;
        Ok(self.refused.split_off(before))
    }

    /// Leaves: acknowledges what is pending, accepts (implicit mode) or releases (explicit mode)
    /// what this member still holds, and releases what fetches still in flight acquire, so no
    /// record waits for its lock to run out.
    pub async fn close(mut self) -> Result<Vec<RefusedAck>> {
        match self.config.acknowledgement_mode {
            AcknowledgementMode::Implicit => self.accept_unacknowledged(),
            AcknowledgementMode::Explicit => self.release_unacknowledged(),
        }
        while let Some((addr, asked, answer)) = self.in_flight.next().await {
            self.fetching.remove(&addr);
            self.take_answer(&addr, &asked, answer)?;
        }
        for r in std::mem::take(&mut self.buffered) {
            self.pending.entry((r.topic, r.partition)).or_default().push((r.record.offset, release()));
        }
        self.commit().await
    }

    fn accept_unacknowledged(&mut self) {
        for (key, held) in std::mem::take(&mut self.unacknowledged) {
            self.pending.entry(key).or_default().extend(held.into_iter().map(|o| (o, AckKind::Accept)));
        }
    }

    fn release_unacknowledged(&mut self) {
        for (key, held) in std::mem::take(&mut self.unacknowledged) {
            self.pending.entry(key).or_default().extend(held.into_iter().map(|o| (o, release())));
        }
    }

    fn deliver(&mut self) -> Vec<ShareRecord> {
        let records = std::mem::take(&mut self.buffered);
        for r in &records {
            self.unacknowledged.entry((r.topic.clone(), r.partition)).or_default().insert(r.record.offset);
        }
        records
    }

    /// Sends `acks` to their partitions' leaders (`ShareAcknowledge`), one request per leader.
    /// Acknowledgements of a partition whose leader is not known yet stay pending (sent with the
    /// next fetch to it, or the next `commit`): they were not sent, so sending them later is
    /// safe. A failed request does not stop the others; the first failure is returned (the
    /// outcome of what that request carried is unknown: its records come back when their locks
    /// run out if it was not applied).
    async fn send_acks(&mut self, acks: Vec<(Partition, Acks)>) -> Result<()> {
        let mut by_leader = ByLeader::new();
        let mut unrouted = Vec::new();
        for ((topic, partition), acks) in acks.into_iter().filter(|(_, a)| !a.is_empty()) {
            if self.client.leader_addr(&topic, partition).is_none() {
                let _ = self.client.refresh_metadata(std::slice::from_ref(&topic)).await;
            }
            match self.client.leader_addr(&topic, partition) {
                Some(addr) => by_leader.entry(addr).or_default().push(((topic, partition), acks)),
                None => unrouted.push(((topic, partition), acks)),
            }
        }
        for (key, acks) in unrouted {
            self.pending.entry(key).or_default().extend(acks);
        }
        let mut first_error = None;
        for (addr, partitions) in by_leader {
            if let Err(e) = self.acknowledge_at(&addr, partitions).await {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Acknowledgements for partitions whose leader has a fetch in flight go at once, alone.
    async fn send_acks_to_busy_leaders(&mut self) -> Result<()> {
        let busy: Vec<Partition> = self
            .pending
            .keys()
            .filter(|(t, p)| self.client.leader_addr(t, *p).is_some_and(|a| self.fetching.contains(&a)))
            .cloned()
            .collect();
        let acks: Vec<(Partition, Acks)> =
            busy.into_iter().filter_map(|k| self.pending.remove(&k).map(|a| (k, a))).collect();
        self.send_acks(acks).await
    }

    async fn acknowledge_at(&mut self, addr: &str, partitions: Vec<(Partition, Acks)>) -> Result<()> {
        let req = pb::ShareAcknowledgeRequest {
            group_id: self.config.group.clone(),
            member_id: self.member_id.clone(),
            topics: wire_topics(partitions.iter().map(|(k, acks)| (k, acks.as_slice()))),
        };
        let mut stub = self.client.share_stub(addr)?;
        let wait = self.client.options().request_slack * 3;
        let resp = match rill_rt::timeout(wait, stub.share_acknowledge(req)).await {
            Err(_) => return Err(Error::Transport(format!("no answer from {addr} within {wait:?}"))),
            Ok(r) => r.map_err(error::status)?.into_inner(),
        };
        let mut first_error = None;
        for t in resp.topics {
            for p in t.partitions {
                if p.error_code == ErrorCode::None as i32 {
                    self.note_refused(&t.topic, p.partition, p.refused);
                    continue;
                }
                let code = ErrorCode::try_from(p.error_code).unwrap_or(ErrorCode::UnknownServerError);
                if self.send_again_if_unapplied(code, &t.topic, p.partition, &partitions) {
                    if !self.client.learn_leader(&t.topic, p.partition, p.leader.as_ref()) {
                        self.client.forget_leader(&t.topic, p.partition);
                    }
                    continue;
                }
                first_error.get_or_insert(error::server(p.error_code, p.error_message));
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// When a partition's answer (`code`) says nothing was applied — refused before its entry
    /// was proposed: not the leader, or a new leader still catching up — puts back the
    /// acknowledgements `sent` carried for it, to go again to its leader. True when it did.
    fn send_again_if_unapplied(
        &mut self,
        code: ErrorCode,
        topic: &str,
        partition: u32,
        sent: &[(Partition, Acks)],
    ) -> bool {
        if !matches!(code, ErrorCode::NotLeaderOrFollower | ErrorCode::LeaderNotAvailable) {
            return false;
        }
        if let Some((key, acks)) = sent.iter().find(|(k, _)| k.0 == topic && k.1 == partition) {
            if !acks.is_empty() {
                self.pending.entry(key.clone()).or_default().extend(acks.iter().cloned());
            }
        }
        true
    }

    fn note_refused(&mut self, topic: &str, partition: u32, refused: Vec<pb::AcknowledgementResult>) {
        self.refused.extend(refused.into_iter().map(|r| RefusedAck {
            topic: topic.to_string(),
            partition,
            offset: r.offset,
            error: error::server(r.error_code, r.error_message),
        }));
    }

    /// Sends a fetch to every leader of a subscribed partition that has none in flight, with the
    /// acknowledgements pending for its partitions; each waits up to `wait` on the server.
    async fn start_fetches(&mut self, wait: Duration) -> Result<()> {
        let mut partitions: Vec<Partition> = Vec::new();
        for topic in &self.topics {
            let count = self.client.partition_count(topic).await?;
            partitions.extend((0..count).map(|p| (topic.clone(), p)));
        }
        let mut by_leader: HashMap<String, Vec<Partition>> = HashMap::new();
        let mut leaderless = false;
        for (topic, partition) in partitions {
            match self.client.leader_addr(&topic, partition) {
                Some(addr) => by_leader.entry(addr).or_default().push((topic, partition)),
                None => leaderless = true,
            }
        }
        if leaderless {
            let _ = self.client.refresh_metadata(&self.topics).await;
        }
        for (addr, partitions) in by_leader {
            if self.fetching.contains(&addr) {
                continue;
            }
            let acks: Vec<(Partition, Acks)> = partitions
                .into_iter()
                .map(|k| {
                    let acks = self.pending.remove(&k).unwrap_or_default();
                    (k, acks)
                })
                .collect();
            let req = pb::ShareFetchRequest {
                group_id: self.config.group.clone(),
                member_id: self.member_id.clone(),
                max_wait_ms: u32::try_from(wait.as_millis()).unwrap_or(u32::MAX),
                max_records: self.config.max_records,
                max_bytes: 0,
                topics: wire_topics(acks.iter().map(|(k, a)| (k, a.as_slice()))),
            };
            let stub = self.client.share_stub(&addr)?;
            let slack = self.client.options().request_slack;
            let address = addr.clone();
            let asked = acks;
            self.fetching.insert(addr);
            self.in_flight.push(Box::pin(async move {
                let mut stub = stub;
                let answer = match rill_rt::timeout(wait + slack, stub.share_fetch(req)).await {
                    Err(_) => Err(Error::Transport(format!("no answer from {address} within {:?}", wait + slack))),
                    Ok(r) => r.map(tonic::Response::into_inner).map_err(error::status),
                };
                (address, asked, answer)
            }));
        }
        Ok(())
    }

    /// Takes the answer of a fetch to `addr` for the partitions `asked`: its records into the
    /// buffer, refused acknowledgements noted, leaders learnt. A transport failure is not an
    /// error of the poll: the partitions' leaders are looked up again and the fetch is sent
    /// again (what it may have acquired comes back when its locks run out; the acknowledgements
    /// it carried are refused to nobody, and their records come back the same way).
    fn take_answer(
        &mut self,
        addr: &str,
        asked: &[(Partition, Acks)],
        answer: Result<pb::ShareFetchResponse>,
    ) -> Result<()> {
        let resp = match answer {
            Ok(resp) => resp,
            Err(Error::Transport(e)) => {
                tracing::debug!(addr, error = %e, "a share fetch failed; finding the leaders again");
                self.client.mark_unreachable(addr);
                for ((topic, partition), _) in asked {
                    self.client.forget_leader(topic, *partition);
                }
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        for t in resp.topics {
            for mut p in t.partitions {
                if p.error_code != ErrorCode::None as i32 {
                    let code = ErrorCode::try_from(p.error_code).unwrap_or(ErrorCode::UnknownServerError);
                    if !self.client.learn_leader(&t.topic, p.partition, p.leader.as_ref()) {
                        self.client.forget_leader(&t.topic, p.partition);
                    }
                    if self.send_again_if_unapplied(code, &t.topic, p.partition, asked) {
                        continue;
                    }
                    // The outcome is unknown (the node stopping, the entry not committed in time):
                    // what it carried is not sent again; its records come back by their locks.
                    if matches!(code, ErrorCode::NodeShuttingDown | ErrorCode::RequestTimedOut) {
                        continue;
                    }
                    return Err(error::server(p.error_code, p.error_message));
                }
                self.note_refused(&t.topic, p.partition, std::mem::take(&mut p.refused));
                let acquired: HashMap<u64, u16> = p
                    .acquired
                    .iter()
                    .flat_map(|a| {
                        let count = u16::try_from(a.delivery_count).unwrap_or(u16::MAX);
                        (a.first_offset..=a.last_offset.max(a.first_offset)).map(move |o| (o, count))
                    })
                    .collect();
                for b in &p.batches {
                    let (_, records) = decode_batch(b)?;
                    for record in records {
                        if let Some(&delivery_count) = acquired.get(&record.offset) {
                            self.buffered.push(ShareRecord {
                                topic: t.topic.clone(),
                                partition: p.partition,
                                record,
                                delivery_count,
                                lock_until_ms: p.lock_until_ms,
                            });
                        }
                    }
                }
            }
        }
        Ok(())
    }
}

fn release() -> AckKind {
    AckKind::Release { delay: Duration::ZERO }
}

/// Acknowledgements as the wire's ranges: consecutive offsets of one kind become one range.
fn wire_acks(acks: &[(u64, AckKind)]) -> Vec<pb::Acknowledgement> {
    let mut sorted: Vec<&(u64, AckKind)> = acks.iter().collect();
    sorted.sort_by_key(|(o, _)| *o);
    sorted.dedup_by_key(|(o, _)| *o);
    let mut out: Vec<pb::Acknowledgement> = Vec::new();
    for (offset, kind) in sorted {
        let (r#type, delay_ms, reason) = match kind {
            AckKind::Accept => (pb::AcknowledgeType::Accept, 0, String::new()),
            AckKind::Release { delay } => {
                (pb::AcknowledgeType::Release, u64::try_from(delay.as_millis()).unwrap_or(u64::MAX), String::new())
            }
            AckKind::Reject { reason } => (pb::AcknowledgeType::Reject, 0, reason.clone()),
            AckKind::Renew => (pb::AcknowledgeType::Renew, 0, String::new()),
        };
        match out.last_mut() {
            Some(last)
                if last.last_offset + 1 == *offset
                    && last.r#type == r#type as i32
                    && last.delay_ms == delay_ms
                    && last.reason == reason =>
            {
                last.last_offset = *offset;
            }
            _ => out.push(pb::Acknowledgement {
                first_offset: *offset,
                last_offset: *offset,
                r#type: r#type as i32,
                delay_ms,
                reason,
            }),
        }
    }
    out
}

fn wire_topics<'a>(
    partitions: impl Iterator<Item = (&'a Partition, &'a [(u64, AckKind)])>,
) -> Vec<pb::ShareFetchTopic> {
    let mut topics: BTreeMap<&str, Vec<pb::ShareFetchPartition>> = BTreeMap::new();
    for ((topic, partition), acks) in partitions {
        topics
            .entry(topic.as_str())
            .or_default()
            .push(pb::ShareFetchPartition { partition: *partition, acknowledgements: wire_acks(acks) });
    }
    topics
        .into_iter()
        .map(|(topic, partitions)| pb::ShareFetchTopic {
            topic: topic.to_string(),
            partitions,
            topic_id: Default::default(),
        })
        .collect()
}

/// One setting of a share group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareGroupSetting {
    /// The key (`share.record.lock.duration.ms`, ...).
    pub key: String,
    /// Its effective value.
    pub value: String,
    /// True when the group did not set it.
    pub default: bool,
}

impl Client {
    /// Sets (`set`) or resets to their defaults (`reset`) share group `group`'s settings,
    /// checked together; every key with its effective value afterwards.
    pub async fn alter_share_group_config(
        &self,
        group: &str,
        set: &[(String, String)],
        reset: &[String],
    ) -> Result<Vec<ShareGroupSetting>> {
        let req = pb::AlterShareGroupConfigRequest {
            group_id: group.to_string(),
            set: set
                .iter()
                .map(|(k, v)| pb::ShareGroupSetting { key: k.clone(), value: v.clone(), default: false })
                .collect(),
            reset: reset.to_vec(),
        };
        let resp = self
            .on_any_node_via(Client::share_stub, |mut c| {
                let req = req.clone();
                async move { c.alter_share_group_config(req).await }
            })
            .await?;
        settings(resp)
    }

    /// Share group `group`'s settings: every key with its effective value.
    pub async fn describe_share_group_config(&self, group: &str) -> Result<Vec<ShareGroupSetting>> {
        let req = pb::DescribeShareGroupConfigRequest { group_id: group.to_string() };
        let resp = self
            .on_any_node_via(Client::share_stub, |mut c| {
                let req = req.clone();
                async move { c.describe_share_group_config(req).await }
            })
            .await?;
        settings(resp)
    }
}

/// An acquired record and who holds it ([`Client::describe_share_group`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldRecord {
    /// Its offset.
    pub offset: u64,
    /// The member holding it.
    pub member_id: String,
    /// How often it was delivered, this time included.
    pub delivery_count: u32,
    /// When its lock runs out (the leader's clock, ms since the epoch).
    pub lock_until_ms: i64,
    /// When it was acquired.
    pub acquired_ms: i64,
}

/// Where a share group stands on one partition, as its leader answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharePartitionDescription {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: u32,
    /// The leader's term when it answered.
    pub leader_epoch: u64,
    /// The leader's clock when it answered: what lock deadlines and ages compare to.
    pub now_ms: i64,
    /// Every record below it is done.
    pub start_offset: u64,
    /// One past the highest offset the group acquired.
    pub end_offset: u64,
    /// The partition's high watermark.
    pub high_watermark: u64,
    /// Records acquired.
    pub acquired: u32,
    /// Records delivered before and acquirable again.
    pub available: u32,
    /// Records waiting out a delay.
    pub delayed: u32,
    /// Records archived and waiting for their dead-letter copy.
    pub dead_letter_waiting: u32,
    /// How long ago the oldest record not done was appended (the group's lag in time); `None`
    /// when every record below the high watermark is done.
    pub oldest_pending_age_ms: Option<i64>,
    /// Acquired records, oldest lock first (as many as asked for).
    pub held: Vec<HeldRecord>,
    /// The dead-letter topic and partition this partition's copies go to, once one was needed.
    pub dead_letters_to: Option<(String, u32)>,
}

/// A share group on every partition it has read ([`Client::describe_share_group`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ShareGroupDescription {
    /// Each partition, by topic and partition.
    pub partitions: Vec<SharePartitionDescription>,
    /// Nodes that did not answer, with why: the partitions they lead are missing.
    pub unanswered: Vec<String>,
}

impl Client {
    /// Where share group `group` stands on every partition it has read: each partition's
    /// leader answers for it (every node is asked at once), with up to `max_records` of the
    /// acquired records (oldest lock first; at most 1,000). A node that does not answer is
    /// named in [`ShareGroupDescription::unanswered`]; of two answers for one partition (its
    /// leadership moved meanwhile) the newer leader's is kept.
    pub async fn describe_share_group(&self, group: &str, max_records: u32) -> Result<ShareGroupDescription> {
        let req = pb::DescribeShareGroupRequest { group_id: group.to_string(), max_records };
        let answers = self
            .on_every_node_via(Client::share_stub, |mut c| {
                let req = req.clone();
                async move { c.describe_share_group(req).await }
            })
            .await?;
        let mut out = ShareGroupDescription::default();
        let mut by_partition: BTreeMap<(String, u32), SharePartitionDescription> = BTreeMap::new();
        for (addr, answer) in answers {
            let resp = match answer {
                Ok(resp) => resp,
                Err(e) => {
                    out.unanswered.push(e.to_string());
                    continue;
                }
            };
            if resp.error_code != ErrorCode::None as i32 {
                // A refusal (a bad group id, not authorized) is every node's: the caller's to see.
                return Err(error::server(resp.error_code, format!("{addr}: {}", resp.error_message)));
            }
            for p in resp.partitions {
                let d = partition_description(p, resp.now_ms);
                let key = (d.topic.clone(), d.partition);
                if by_partition.get(&key).is_none_or(|old| old.leader_epoch < d.leader_epoch) {
                    by_partition.insert(key, d);
                }
            }
        }
        out.partitions = by_partition.into_values().collect();
        Ok(out)
    }

    /// The share groups of the cluster, each with how many partitions it has read; nodes that
    /// did not answer (the groups only they know of are missing), with why.
    pub async fn list_share_groups(&self) -> Result<(Vec<(String, u32)>, Vec<String>)> {
        let answers = self
            .on_every_node_via(Client::share_stub, |mut c| async move {
                c.list_share_groups(pb::ListShareGroupsRequest {}).await
            })
            .await?;
        let (mut groups, mut unanswered) = (BTreeMap::<String, u32>::new(), Vec::new());
        for (addr, answer) in answers {
            match answer {
                Err(e) => unanswered.push(e.to_string()),
                Ok(resp) if resp.error_code != ErrorCode::None as i32 => {
                    return Err(error::server(resp.error_code, format!("{addr}: {}", resp.error_message)))
                }
                Ok(resp) => {
                    for g in resp.groups {
                        *groups.entry(g.group_id).or_default() += g.partitions;
                    }
                }
            }
        }
        Ok((groups.into_iter().collect(), unanswered))
    }
}

fn partition_description(p: pb::SharePartitionState, now_ms: i64) -> SharePartitionDescription {
    SharePartitionDescription {
        oldest_pending_age_ms: (p.oldest_pending_append_ms > 0)
            .then(|| now_ms.saturating_sub(p.oldest_pending_append_ms)),
        held: p
            .held
            .into_iter()
            .map(|h| HeldRecord {
                offset: h.offset,
                member_id: h.member_id,
                delivery_count: h.delivery_count,
                lock_until_ms: h.lock_until_ms,
                acquired_ms: h.acquired_ms,
            })
            .collect(),
        dead_letters_to: (!p.dead_letter_topic.is_empty()).then_some((p.dead_letter_topic, p.dead_letter_partition)),
        topic: p.topic,
        partition: p.partition,
        leader_epoch: p.leader_epoch,
        now_ms,
        start_offset: p.start_offset,
        end_offset: p.end_offset,
        high_watermark: p.high_watermark,
        acquired: p.acquired,
        available: p.available,
        delayed: p.delayed,
        dead_letter_waiting: p.dead_letter_waiting,
    }
}

fn settings(resp: pb::ShareGroupConfigResponse) -> Result<Vec<ShareGroupSetting>> {
    if resp.error_code != ErrorCode::None as i32 {
        return Err(error::server(resp.error_code, resp.error_message));
    }
    Ok(resp
        .settings
        .into_iter()
        .map(|s| ShareGroupSetting { key: s.key, value: s.value, default: s.default })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acknowledgements_go_as_ranges_of_one_kind() {
        let acks = vec![
            (5, AckKind::Accept),
            (3, AckKind::Accept),
            (4, AckKind::Accept),
            (6, AckKind::Reject { reason: "bad".into() }),
            (8, AckKind::Accept),
        ];
        let wire = wire_acks(&acks);
        let ranges: Vec<(u64, u64, i32)> = wire.iter().map(|a| (a.first_offset, a.last_offset, a.r#type)).collect();
        let (accept, reject) = (pb::AcknowledgeType::Accept as i32, pb::AcknowledgeType::Reject as i32);
        assert_eq!(ranges, vec![(3, 5, accept), (6, 6, reject), (8, 8, accept)]);
        assert_eq!(wire[1].reason, "bad");
    }
}
