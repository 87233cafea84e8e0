//! Share groups on a partition (queues on the log, docs/queues.md): where one share group's
//! reading of one partition stands, and the rules that move it.
//!
//! A share group hands a partition's records to many members at once, record by record. Each
//! record the group has looked at is in one state:
//!
//! ```text
//!             acquire (delivery count + 1)
//!  available ─────────────────────────────► acquired (one member, a lock until T)
//!     ▲  ▲                                      │ accept ──────────────────────────► accepted  ┐
//!     │  │ delay over                           │ release (delay d) ─► delayed ──┐              │ done: the
//!     │  └─────────────────────────────────────────────────────────────────────── ┘              │ start offset
//!     │            release, lock expiry (backoff), member gone                  │              │ moves past
//!     └─────────────────────────────────────────────┘ renew: T moves on         │              │
//!                    reject, or an attempt past the delivery limit ─────────────► archived ──┘
//!                                                    (to the dead-letter topic first, if any)
//! ```
//!
//! The state is a replicated state machine's: every change is a [`ShareCommand`] the leader
//! proposes with the decision already taken and its clock's reading in it, and [`apply`] is a
//! pure function of the state and the command — the same on every replica, whatever their
//! clocks. An acquisition is a command too, so a record's delivery count is replicated before
//! the record leaves the leader: neither a consumer crash nor a failover nor a restart loses an
//! attempt. Each command checks again at apply time what the leader decided from (a
//! compare-and-set): an acquisition takes only records still acquirable, an expiry only locks
//! still past their deadline (a renewal may have landed in between), an acknowledgement only a
//! lock its member still holds.
//!
//! Bounded: acquired, delayed and archived-but-not-yet-dead-lettered records together are at
//! most `max_in_flight` ([`ShareSettings`]); records done above the start offset are kept as
//! coalesced ranges, so the state is a small multiple of the records in flight, however far
//! ahead of a slow record the others have been accepted.
//!
//! [`apply`]: SharePartition::apply

pub mod dead_letters;
pub mod leader;
pub mod stored;

use std::collections::{BTreeMap, VecDeque};
use std::ops::Range;

use crate::fetch::Isolation;

/// A share group member, by the id its coordinator gave it.
pub type MemberId = String;

/// How a share group treats its records on a partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShareSettings {
    /// How long an acquisition lock lasts (Kafka's `share.record.lock.duration.ms`, 30 s).
    pub lock_ms: u64,
    /// Attempts a record gets before it is archived (Kafka's `share.delivery.limit`, 5).
    pub delivery_limit: u16,
    /// Most records in flight (acquired, delayed, or archived and waiting for their
    /// dead-letter copy) on the partition at once.
    pub max_in_flight: u32,
    /// Most records one member holds acquired on the partition at once (its prefetch).
    pub max_per_member: u32,
    /// The delay before a record whose lock expired may be delivered again, by attempts made.
    pub backoff: Backoff,
    /// The dead-letter topic archived records are copied to before they count as done; `None`
    /// for none (an archived record is done at once).
    pub dead_letter_topic: Option<String>,
    /// Which records the group sees: `read_committed` (Rill's default) acquires only records of
    /// decided transactions, below the last stable offset, and never an aborted one.
    pub isolation: Isolation,
}

impl Default for ShareSettings {
    fn default() -> Self {
        Self {
            lock_ms: 30_000,
            delivery_limit: 5,
            max_in_flight: 2_000,
            max_per_member: 500,
            backoff: Backoff::default(),
            dead_letter_topic: None,
            isolation: Isolation::ReadCommitted,
        }
    }
}

impl ShareSettings {
    /// The settings a share group's configuration makes (`rill_meta::group_config`): dead
    /// letters are off until the group names a dead-letter topic.
    pub fn of_group(config: &rill_meta::ShareGroupConfig) -> Self {
        Self {
            lock_ms: config.lock_ms,
            delivery_limit: config.delivery_limit,
            max_in_flight: config.max_in_flight,
            max_per_member: config.max_per_member,
            backoff: Backoff { initial_ms: config.backoff_initial_ms, max_ms: config.backoff_max_ms },
            dead_letter_topic: config.dead_letter_topic.clone(),
            isolation: if config.read_committed { Isolation::ReadCommitted } else { Isolation::ReadUncommitted },
        }
    }
}

impl ShareSettings {
    /// Whether archived records are copied to a dead-letter topic before they count as done.
    pub fn dead_letters(&self) -> bool {
        self.dead_letter_topic.is_some()
    }
}

/// Exponential backoff between attempts of a record whose lock expired: `initial_ms` after the
/// first, doubled after each further one, at most `max_ms`. The jitter is drawn by the leader
/// and carried in the command, so replicas agree on every delay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The delay after the first attempt; 0 for none.
    pub initial_ms: u64,
    /// The longest delay.
    pub max_ms: u64,
}

impl Default for Backoff {
    fn default() -> Self {
        Self { initial_ms: 0, max_ms: 60_000 }
    }
}

impl Backoff {
    /// The delay after `attempts` attempts (at least 1), before jitter.
    pub fn after(&self, attempts: u16) -> u64 {
        let doublings = u32::from(attempts.saturating_sub(1)).min(32);
        self.initial_ms.saturating_mul(1u64 << doublings).min(self.max_ms)
    }
}

/// Why a record was archived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ArchiveReason {
    /// A member rejected it, with the reason it gave.
    Rejected(String),
    /// Its last allowed attempt ended without an accept (released, or its lock expired).
    DeliveryLimit,
}

/// Where a record in flight stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InFlight {
    /// Delivered before and back, acquirable again.
    Available,
    /// Held by `member` until `lock_until_ms` (the leader's clock).
    Acquired {
        /// Who holds it.
        member: MemberId,
        /// When its lock ends.
        lock_until_ms: i64,
    },
    /// Acquirable again from `until_ms`, not before.
    Delayed {
        /// When the delay ends.
        until_ms: i64,
    },
    /// Given up, its copy to the dead-letter topic not yet written.
    DeadLettering(ArchiveReason),
}

/// A record the group has delivered and is not done with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tracked {
    /// Where it stands.
    pub state: InFlight,
    /// How often it was acquired.
    pub delivery_count: u16,
    /// When it was first acquired.
    pub first_delivery_ms: i64,
    /// When it was last acquired.
    pub last_delivery_ms: i64,
}

/// A record archived while its group has a dead-letter topic, waiting for its copy there: the
/// evidence the copy carries, fixed when it was archived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// Where it is in the partition.
    pub offset: u64,
    /// Why it was archived.
    pub reason: ArchiveReason,
    /// How often it was delivered.
    pub delivery_count: u16,
    /// When it was first delivered.
    pub first_delivery_ms: i64,
    /// When it was last delivered.
    pub last_delivery_ms: i64,
}

/// Who writes a group's dead-letter copies from a partition, and where: an idempotent producer
/// whose id, epoch and sequence numbers are in the replicated state, so whichever leader
/// writes a copy — again, after a failover — writes it under the same sequence number, and the
/// dead-letter partition stores it once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetterWriter {
    /// The producer id, issued by the metadata group like any producer's.
    pub producer_id: i64,
    /// Its epoch.
    pub producer_epoch: i16,
    /// The dead-letter topic.
    pub topic: String,
    /// The partition of it every copy from this partition goes to (one sequence of numbers).
    pub partition: u32,
}

/// How a member acknowledges one record it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ack {
    /// Processed: done.
    Accept,
    /// Not processed: deliver it again, not before `delay_ms` from now.
    Release {
        /// The delay; 0 for at once.
        delay_ms: u64,
    },
    /// Never to be processed: archive it (to the dead-letter topic, if the group has one).
    Reject {
        /// Why, kept with the dead-letter copy.
        reason: String,
    },
    /// Still being processed: the lock starts over.
    Renew,
}

/// A change of a share partition's state, with what the leader decided and when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShareCommand {
    /// `member` first acknowledges what it sends with its fetch (`acks`, as
    /// [`ShareCommand::Acknowledge`]), then the offsets in `skipped` that the log holds no
    /// deliverable record at are done, then `member` acquires `offsets` (those still acquirable
    /// when this applies) until `now_ms + lock_ms` — one entry for a fetch and the
    /// acknowledgements it carries.
    Acquire {
        /// Who acquires.
        member: MemberId,
        /// Acknowledgements carried by the fetch, applied first.
        acks: Vec<(u64, Ack)>,
        /// Offset ranges (start, end) without a record to deliver — transaction markers,
        /// aborted records under `read_committed`, records compaction removed — as the leader
        /// read the log ([`SharePartition::plan_acquire`]).
        skipped: Vec<(u64, u64)>,
        /// The records, as the leader chose them ([`SharePartition::plan_acquire`]).
        offsets: Vec<u64>,
        /// The leader's clock.
        now_ms: i64,
    },
    /// `member` acknowledges records it holds.
    Acknowledge {
        /// Who acknowledges.
        member: MemberId,
        /// Each record and how.
        acks: Vec<(u64, Ack)>,
        /// The leader's clock.
        now_ms: i64,
    },
    /// Locks the leader found expired end (each still expired when this applies), each record
    /// delayed by the backoff plus the leader's jitter for it.
    Expire {
        /// The records, with their jitter in ms.
        offsets: Vec<(u64, u64)>,
        /// The leader's clock.
        now_ms: i64,
    },
    /// `member` left or was fenced: what it holds is released at once (no delay), each
    /// acquisition still counting as an attempt.
    ReleaseMember {
        /// Who.
        member: MemberId,
        /// The leader's clock.
        now_ms: i64,
    },
    /// The first `count` records waiting for their dead-letter copy are copied (written by
    /// `producer_id` from sequence `first_sequence` on): they are done. Applies only while that
    /// writer is the group's and the first record waiting has that sequence number, so a
    /// stale or repeated entry changes nothing.
    DeadLettered {
        /// The writer that copied them.
        producer_id: i64,
        /// The sequence number of the first.
        first_sequence: i32,
        /// How many, in order from the first waiting.
        count: u32,
    },
    /// `writer` writes the group's dead-letter copies from now on, numbering the records
    /// waiting from sequence 0 — when the group has no writer yet, or its writer can no longer
    /// write (its topic is gone, the dead-letter partition forgot its producer). Applies only
    /// when the group's writer is still `replaces` (the one the leader saw), so two leaders
    /// racing to replace it end with one.
    PinDeadLetterWriter {
        /// The new writer.
        writer: DeadLetterWriter,
        /// The producer id of the writer it replaces; `None` when the group had none.
        replaces: Option<i64>,
    },
    /// The partition's log start moved to `log_start`: records below it are gone, done or not.
    LogStart {
        /// The new log start offset.
        log_start: u64,
    },
}

/// Why an acknowledgement of one record changed nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckRefusal {
    /// The record is not held by this member: never acquired by it, acknowledged already, or
    /// taken by another member since its lock expired.
    NotHeld,
    /// The member's lock on it has expired (the record is back, or about to be).
    LockExpired,
}

/// What a command did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Applied {
    /// Records acquired, with their delivery counts.
    pub acquired: Vec<(u64, u16)>,
    /// Acknowledgements refused, by record.
    pub refused: Vec<(u64, AckRefusal)>,
    /// Records archived by this command (to be dead-lettered first when the group has a
    /// dead-letter topic).
    pub archived: Vec<(u64, ArchiveReason)>,
}

/// What the leader read of the log to plan an acquisition: the offsets it scanned and, among
/// them, where records to deliver are. An offset in `scanned` outside every range of `records`
/// has nothing to deliver (a transaction marker, an aborted record under `read_committed`, a
/// record compaction removed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogView {
    /// The offsets read, all below the high watermark (or the last stable offset).
    pub scanned: Range<u64>,
    /// Where the deliverable records among them are: sorted ranges, apart.
    pub records: Vec<Range<u64>>,
}

impl LogView {
    /// A log with a record at every offset below `end` (tests).
    pub fn dense(end: u64) -> Self {
        Self { scanned: 0..end, records: std::iter::once(0..end).collect() }
    }
}

/// An acquisition the leader plans ([`SharePartition::plan_acquire`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AcquirePlan {
    /// The records to acquire.
    pub offsets: Vec<u64>,
    /// Offset ranges (start, end) with nothing to deliver, done without a delivery.
    pub skipped: Vec<(u64, u64)>,
}

impl AcquirePlan {
    /// True when the plan changes nothing.
    pub fn is_empty(&self) -> bool {
        self.offsets.is_empty() && self.skipped.is_empty()
    }
}

/// One share group's state on one partition.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SharePartition {
    /// The share-partition start offset: every record below it is done (accepted, archived and
    /// dead-lettered, or gone from the log).
    start: u64,
    /// One past the highest offset ever acquired; records from here on were never delivered.
    end: u64,
    /// Records in `start..end` delivered and not done. A record in that range that is neither
    /// here nor in `done` was never delivered (skipped by an earlier acquisition): available.
    in_flight: BTreeMap<u64, Tracked>,
    /// Records in `start..end` that are done, as coalesced ranges (start → end).
    done: BTreeMap<u64, u64>,
    /// The settings of the group's latest entry here: what the leader proposes expiries under
    /// when no member is asking (after a failover, say).
    settings: ShareSettings,
    /// Who writes the dead-letter copies, once one was needed.
    writer: Option<DeadLetterWriter>,
    /// The sequence number of the first record in `dead_letters`.
    dead_letter_sequence: i32,
    /// Records archived and waiting for their dead-letter copy, in the order they were
    /// archived (which fixes their sequence numbers). A record stays here when the log start
    /// passes it — its copy then carries the evidence without the record — and counts against
    /// `max_in_flight` until copied.
    dead_letters: VecDeque<DeadLetter>,
}

impl SharePartition {
    /// A group starting to read the partition at `start` (its log start, its end, or an offset
    /// chosen for the group).
    pub fn starting_at(start: u64) -> Self {
        Self {
            start,
            end: start,
            in_flight: BTreeMap::new(),
            done: BTreeMap::new(),
            settings: ShareSettings::default(),
            writer: None,
            dead_letter_sequence: 0,
            dead_letters: VecDeque::new(),
        }
    }

    /// Who writes the group's dead-letter copies from this partition, if anyone has yet.
    pub fn dead_letter_writer(&self) -> Option<&DeadLetterWriter> {
        self.writer.as_ref()
    }

    /// The records waiting for their dead-letter copy, in order, and the sequence number of
    /// the first.
    pub fn dead_letters(&self) -> (&VecDeque<DeadLetter>, i32) {
        (&self.dead_letters, self.dead_letter_sequence)
    }

    /// The settings of the group's latest entry on the partition.
    pub fn settings(&self) -> &ShareSettings {
        &self.settings
    }

    /// Records `settings` as the group's latest (the partition's state machine, per entry).
    pub fn set_settings(&mut self, settings: &ShareSettings) {
        if &self.settings != settings {
            self.settings = settings.clone();
        }
    }

    /// The earliest lock deadline among the records acquired here, if any is.
    pub fn next_lock_deadline(&self) -> Option<i64> {
        let ignore_renewals = rill_rt::mutation::active(rill_rt::mutation::Mutation::ExpiryIgnoresRenewal);
        let lock_ms = i64::try_from(self.settings.lock_ms).unwrap_or(i64::MAX);
        self.in_flight
            .values()
            .filter_map(|t| match t.state {
                // Deliberate bug (simulation only): a lock ends at its first deadline.
                InFlight::Acquired { .. } if ignore_renewals => Some(t.last_delivery_ms.saturating_add(lock_ms)),
                InFlight::Acquired { lock_until_ms, .. } => Some(lock_until_ms),
                _ => None,
            })
            .min()
    }

    /// The records whose locks have run out at `now_ms`.
    pub fn expired_locks(&self, now_ms: i64) -> Vec<u64> {
        let ignore_renewals = rill_rt::mutation::active(rill_rt::mutation::Mutation::ExpiryIgnoresRenewal);
        let lock_ms = i64::try_from(self.settings.lock_ms).unwrap_or(i64::MAX);
        self.in_flight
            .iter()
            .filter(|(_, t)| match t.state {
                // Deliberate bug (simulation only): a lock ends at its first deadline.
                InFlight::Acquired { .. } if ignore_renewals => t.last_delivery_ms.saturating_add(lock_ms) <= now_ms,
                InFlight::Acquired { lock_until_ms, .. } => lock_until_ms <= now_ms,
                _ => false,
            })
            .map(|(o, _)| *o)
            .collect()
    }

    /// The earliest end of a delay still running at `now_ms`, if any: when a record comes back.
    pub fn next_delay_end(&self, now_ms: i64) -> Option<i64> {
        self.in_flight
            .values()
            .filter_map(|t| match t.state {
                InFlight::Delayed { until_ms } if until_ms > now_ms => Some(until_ms),
                _ => None,
            })
            .min()
    }

    /// The share-partition start offset (see [`SharePartition`]).
    pub fn start_offset(&self) -> u64 {
        self.start
    }

    /// One past the highest offset ever acquired.
    pub fn end_offset(&self) -> u64 {
        self.end
    }

    /// The records delivered and not done, by offset.
    pub fn in_flight(&self) -> &BTreeMap<u64, Tracked> {
        &self.in_flight
    }

    /// Records counted against `max_in_flight`: acquired, delayed, or waiting for their
    /// dead-letter copy.
    pub fn in_flight_count(&self) -> usize {
        let held_or_delayed = self
            .in_flight
            .values()
            .filter(|t| !matches!(t.state, InFlight::Available | InFlight::DeadLettering(_)))
            .count();
        held_or_delayed + self.dead_letters.len()
    }

    /// Records `member` holds acquired.
    pub fn held_by(&self, member: &str) -> usize {
        self.in_flight
            .values()
            .filter(|t| matches!(&t.state, InFlight::Acquired { member: m, .. } if m == member))
            .count()
    }

    /// True when `offset` is done (accepted, or archived and dead-lettered).
    pub fn is_done(&self, offset: u64) -> bool {
        offset < self.start || self.done.range(..=offset).next_back().is_some_and(|(_, &end)| offset < end)
    }

    /// The delivery count of `offset` if it is acquirable at `now_ms` (0: never delivered).
    fn acquirable(&self, offset: u64, now_ms: i64, settings: &ShareSettings) -> Option<u16> {
        if offset < self.start || self.is_done(offset) {
            return None;
        }
        match self.in_flight.get(&offset) {
            None => Some(0),
            Some(t) if t.delivery_count >= settings.delivery_limit => None,
            Some(Tracked { state: InFlight::Available, delivery_count, .. }) => Some(*delivery_count),
            Some(Tracked { state: InFlight::Delayed { until_ms }, delivery_count, .. }) if *until_ms <= now_ms => {
                Some(*delivery_count)
            }
            Some(_) => None,
        }
    }

    /// The lowest offset at or above the start offset that may be acquirable at `now_ms` and
    /// is below `end_offset`: where the leader reads the log from to plan an acquisition.
    pub fn first_candidate(&self, end_offset: u64, now_ms: i64, settings: &ShareSettings) -> Option<u64> {
        let mut offset = self.start;
        while offset < end_offset {
            if let Some((_, &done_end)) = self.done.range(..=offset).next_back().filter(|(_, &e)| offset < e) {
                offset = done_end;
                continue;
            }
            if self.acquirable(offset, now_ms, settings).is_some() {
                return Some(offset);
            }
            offset += 1;
        }
        None
    }

    /// The acquisition `member` would make at `now_ms` from what the leader read of the log
    /// (`log`): the lowest acquirable records first, at most `max_records`, within the
    /// partition's and the member's caps; and the offsets of `log.scanned` it passes that have
    /// no record to deliver, to be done without a delivery (records in flight there stay, unless
    /// they are available or delayed: compaction removed them). A record delivered before that
    /// is on its last attempt goes alone — the only record of its acquisition — so a poison
    /// record cannot use up the attempts of records delivered with it (KAFKA-17541). The walk
    /// skips done ranges and gaps whole: it costs the records it passes, not the distance.
    pub fn plan_acquire(
        &self,
        member: &str,
        max_records: usize,
        now_ms: i64,
        settings: &ShareSettings,
        log: &LogView,
    ) -> AcquirePlan {
        let room_partition = (settings.max_in_flight as usize).saturating_sub(self.in_flight_count());
        let room_member = (settings.max_per_member as usize).saturating_sub(self.held_by(member));
        let budget = max_records.min(room_partition).min(room_member);
        let mut plan = AcquirePlan::default();
        let mut records = log.records.iter().peekable();
        let mut offset = self.start.max(log.scanned.start);
        while offset < log.scanned.end && plan.offsets.len() < budget {
            if let Some((_, &done_end)) = self.done.range(..=offset).next_back().filter(|(_, &e)| offset < e) {
                offset = done_end;
                continue;
            }
            while records.peek().is_some_and(|r| r.end <= offset) {
                records.next();
            }
            if records.peek().is_none_or(|r| r.start > offset) {
                // A gap: up to the next record, the next done range or the end of what was read.
                let next_done = self.done.range(offset..).next().map_or(u64::MAX, |(&s, _)| s);
                let gap_end = records.peek().map_or(u64::MAX, |r| r.start).min(next_done).min(log.scanned.end);
                self.skip_gap(offset, gap_end, &mut plan.skipped);
                offset = gap_end;
                continue;
            }
            if let Some(count) = self.acquirable(offset, now_ms, settings) {
                let last_attempt = count > 0 && count.saturating_add(1) >= settings.delivery_limit;
                if last_attempt {
                    if plan.offsets.is_empty() {
                        plan.offsets.push(offset);
                    }
                    break;
                }
                plan.offsets.push(offset);
            }
            offset += 1;
        }
        plan
    }

    /// Adds to `skipped` the offsets of `from..to` (a gap in the log) that may be done without
    /// a delivery: all but records acquired or waiting for their dead-letter copy.
    fn skip_gap(&self, from: u64, to: u64, skipped: &mut Vec<(u64, u64)>) {
        let mut run = from;
        for (&offset, t) in self.in_flight.range(from..to) {
            if matches!(t.state, InFlight::Acquired { .. } | InFlight::DeadLettering(_)) {
                if run < offset {
                    skipped.push((run, offset));
                }
                run = offset + 1;
            }
        }
        if run < to {
            match skipped.last_mut() {
                Some((_, end)) if *end == run => *end = to,
                _ => skipped.push((run, to)),
            }
        }
    }

    /// Applies `command` under `settings`; what it did.
    pub fn apply(&mut self, command: &ShareCommand, settings: &ShareSettings) -> Applied {
        let mut applied = Applied::default();
        match command {
            ShareCommand::Acquire { member, acks, skipped, offsets, now_ms } => {
                self.acknowledge_all(member, acks, *now_ms, settings, &mut applied);
                for &(from, to) in skipped {
                    self.skip(from, to);
                }
                let lock_until_ms = now_ms.saturating_add(i64::try_from(settings.lock_ms).unwrap_or(i64::MAX));
                // Counted once and kept up to date: an entry may name many records.
                let (mut in_flight, mut held) = (self.in_flight_count(), self.held_by(member));
                for &offset in offsets {
                    if in_flight >= settings.max_in_flight as usize || held >= settings.max_per_member as usize {
                        break;
                    }
                    let Some(count) = self.acquirable(offset, *now_ms, settings) else { continue };
                    // A delayed record counts against the cap already; an available one not yet.
                    if !matches!(self.in_flight.get(&offset), Some(Tracked { state: InFlight::Delayed { .. }, .. })) {
                        in_flight += 1;
                    }
                    held += 1;
                    let first = self.in_flight.get(&offset).map_or(*now_ms, |t| t.first_delivery_ms);
                    let delivery_count = count + 1;
                    self.in_flight.insert(
                        offset,
                        Tracked {
                            state: InFlight::Acquired { member: member.clone(), lock_until_ms },
                            delivery_count,
                            first_delivery_ms: first,
                            last_delivery_ms: *now_ms,
                        },
                    );
                    self.end = self.end.max(offset.saturating_add(1));
                    applied.acquired.push((offset, delivery_count));
                }
            }
            ShareCommand::Acknowledge { member, acks, now_ms } => {
                self.acknowledge_all(member, acks, *now_ms, settings, &mut applied);
            }
            ShareCommand::Expire { offsets, now_ms } => {
                for &(offset, jitter_ms) in offsets {
                    let expired = matches!(
                        self.in_flight.get(&offset),
                        Some(Tracked { state: InFlight::Acquired { lock_until_ms, .. }, .. }) if *lock_until_ms <= *now_ms
                    ) || (rill_rt::mutation::active(rill_rt::mutation::Mutation::ExpiryIgnoresRenewal)
                        // Deliberate bug (simulation only): no compare-and-set on the deadline.
                        && matches!(self.in_flight.get(&offset), Some(Tracked { state: InFlight::Acquired { .. }, .. })));
                    if expired {
                        let count = self.in_flight.get(&offset).map_or(0, |t| t.delivery_count);
                        let delay = settings.backoff.after(count).saturating_add(jitter_ms);
                        self.back(offset, delay, *now_ms, settings, &mut applied);
                    }
                }
            }
            ShareCommand::ReleaseMember { member, now_ms } => {
                let held: Vec<u64> = self
                    .in_flight
                    .iter()
                    .filter(|(_, t)| matches!(&t.state, InFlight::Acquired { member: m, .. } if m == member))
                    .map(|(o, _)| *o)
                    .collect();
                for offset in held {
                    self.back(offset, 0, *now_ms, settings, &mut applied);
                }
            }
            ShareCommand::DeadLettered { producer_id, first_sequence, count } => {
                let by_writer = self.writer.as_ref().is_some_and(|w| w.producer_id == *producer_id);
                if by_writer && *first_sequence == self.dead_letter_sequence {
                    let copied = (*count as usize).min(self.dead_letters.len());
                    for letter in self.dead_letters.drain(..copied).collect::<Vec<_>>() {
                        // Below the start offset it is gone from the log and from flight already.
                        if matches!(
                            self.in_flight.get(&letter.offset),
                            Some(Tracked { state: InFlight::DeadLettering(_), .. })
                        ) {
                            self.finish(letter.offset);
                        }
                    }
                    self.dead_letter_sequence = crate::producers::seq_add(self.dead_letter_sequence, copied as u32);
                }
            }
            ShareCommand::PinDeadLetterWriter { writer, replaces } => {
                if self.writer.as_ref().map(|w| w.producer_id) == *replaces {
                    self.writer = Some(writer.clone());
                    self.dead_letter_sequence = 0;
                }
            }
            ShareCommand::LogStart { log_start } => {
                if *log_start > self.start {
                    self.in_flight = self.in_flight.split_off(log_start);
                    // A done range across the new start keeps its part above it.
                    let across = self.done.range(..*log_start).next_back().map(|(_, &e)| e).filter(|&e| e > *log_start);
                    self.done = self.done.split_off(log_start);
                    if let Some(e) = across {
                        self.done.insert(*log_start, e);
                    }
                    self.start = *log_start;
                    self.end = self.end.max(self.start);
                }
            }
        }
        self.advance();
        applied
    }

    fn acknowledge_all(
        &mut self,
        member: &str,
        acks: &[(u64, Ack)],
        now_ms: i64,
        settings: &ShareSettings,
        applied: &mut Applied,
    ) {
        for (offset, ack) in acks {
            match self.held(*offset, member, now_ms) {
                Err(refusal) => applied.refused.push((*offset, refusal)),
                Ok(()) => self.acknowledge(*offset, ack, now_ms, settings, applied),
            }
        }
    }

    /// Offsets `from..to` hold no record to deliver: done, except records acquired or waiting
    /// for their dead-letter copy (checked again here: a record acquired since the leader read
    /// the log keeps its lock).
    fn skip(&mut self, from: u64, to: u64) {
        let from = from.max(self.start);
        if from >= to {
            return;
        }
        let kept: Vec<u64> = self
            .in_flight
            .range(from..to)
            .filter(|(_, t)| matches!(t.state, InFlight::Acquired { .. } | InFlight::DeadLettering(_)))
            .map(|(o, _)| *o)
            .collect();
        let mut run = from;
        for offset in kept.into_iter().chain(std::iter::once(to)) {
            if run < offset {
                let gone: Vec<u64> = self.in_flight.range(run..offset).map(|(o, _)| *o).collect();
                for o in gone {
                    self.in_flight.remove(&o);
                }
                self.mark_done(run, offset);
            }
            run = offset.saturating_add(1);
        }
        self.end = self.end.max(to);
    }

    /// Whether `member` holds `offset` with its lock unexpired at `now_ms`.
    fn held(&self, offset: u64, member: &str, now_ms: i64) -> Result<(), AckRefusal> {
        match self.in_flight.get(&offset) {
            Some(Tracked { state: InFlight::Acquired { member: m, lock_until_ms }, .. }) if m == member => {
                // Deliberate bug (simulation only): a lock that ran out still takes its member's
                // acknowledgement.
                let late_ok = rill_rt::mutation::active(rill_rt::mutation::Mutation::LateAckApplied);
                if *lock_until_ms > now_ms || late_ok {
                    Ok(())
                } else {
                    Err(AckRefusal::LockExpired)
                }
            }
            _ => Err(AckRefusal::NotHeld),
        }
    }

    fn acknowledge(&mut self, offset: u64, ack: &Ack, now_ms: i64, settings: &ShareSettings, applied: &mut Applied) {
        match ack {
            Ack::Accept => self.finish(offset),
            Ack::Release { delay_ms } => self.back(offset, *delay_ms, now_ms, settings, applied),
            Ack::Reject { reason } => self.archive(offset, ArchiveReason::Rejected(reason.clone()), settings, applied),
            Ack::Renew => {
                if let Some(Tracked { state: InFlight::Acquired { lock_until_ms, .. }, .. }) =
                    self.in_flight.get_mut(&offset)
                {
                    *lock_until_ms = now_ms.saturating_add(i64::try_from(settings.lock_ms).unwrap_or(i64::MAX));
                }
            }
        }
    }

    /// An attempt of `offset` ended without an accept: available again after `delay_ms`, or
    /// archived when that was its last allowed attempt.
    fn back(&mut self, offset: u64, delay_ms: u64, now_ms: i64, settings: &ShareSettings, applied: &mut Applied) {
        let Some(t) = self.in_flight.get_mut(&offset) else { return };
        if t.delivery_count >= settings.delivery_limit {
            self.archive(offset, ArchiveReason::DeliveryLimit, settings, applied);
            return;
        }
        t.state = match delay_ms {
            0 => InFlight::Available,
            ms => InFlight::Delayed { until_ms: now_ms.saturating_add(i64::try_from(ms).unwrap_or(i64::MAX)) },
        };
    }

    fn archive(&mut self, offset: u64, reason: ArchiveReason, settings: &ShareSettings, applied: &mut Applied) {
        applied.archived.push((offset, reason.clone()));
        match self.in_flight.get_mut(&offset) {
            Some(t) if settings.dead_letters() => {
                self.dead_letters.push_back(DeadLetter {
                    offset,
                    reason: reason.clone(),
                    delivery_count: t.delivery_count,
                    first_delivery_ms: t.first_delivery_ms,
                    last_delivery_ms: t.last_delivery_ms,
                });
                t.state = InFlight::DeadLettering(reason);
            }
            _ => self.finish(offset),
        }
    }

    /// `offset` is done: out of flight, into the done ranges (merged with its neighbours).
    fn finish(&mut self, offset: u64) {
        self.in_flight.remove(&offset);
        self.mark_done(offset, offset.saturating_add(1));
    }

    /// `from..to` is done: one range with every done range it overlaps or touches.
    fn mark_done(&mut self, from: u64, to: u64) {
        let mut range: Range<u64> = from..to;
        // Ranges are apart and sorted, so their ends rise with their starts: the ones touching
        // `from..to` are the last ones starting at or before `to`.
        let touching: Vec<(u64, u64)> =
            self.done.range(..=to).rev().take_while(|(_, &e)| e >= from).map(|(&s, &e)| (s, e)).collect();
        for (s, e) in touching {
            self.done.remove(&s);
            range.start = range.start.min(s);
            range.end = range.end.max(e);
        }
        self.done.insert(range.start, range.end);
    }

    /// Moves the start offset past the done records at it.
    fn advance(&mut self) {
        while let Some(end) = self.done.remove(&self.start) {
            self.start = end;
        }
        self.end = self.end.max(self.start);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> ShareSettings {
        ShareSettings { lock_ms: 1_000, delivery_limit: 3, max_in_flight: 10, max_per_member: 5, ..Default::default() }
    }

    fn acquire(
        p: &mut SharePartition,
        member: &str,
        n: usize,
        hw: u64,
        now_ms: i64,
        s: &ShareSettings,
    ) -> Vec<(u64, u16)> {
        let plan = p.plan_acquire(member, n, now_ms, s, &LogView::dense(hw));
        assert!(plan.skipped.is_empty(), "a record at every offset");
        let command = ShareCommand::Acquire {
            member: member.into(),
            acks: vec![],
            skipped: vec![],
            offsets: plan.offsets,
            now_ms,
        };
        p.apply(&command, s).acquired
    }

    fn ack(p: &mut SharePartition, member: &str, acks: Vec<(u64, Ack)>, now_ms: i64, s: &ShareSettings) -> Applied {
        p.apply(&ShareCommand::Acknowledge { member: member.into(), acks, now_ms }, s)
    }

    #[test]
    fn members_share_a_partition_record_by_record_and_the_start_moves_past_what_is_done() {
        let s = settings();
        let mut p = SharePartition::starting_at(0);
        assert_eq!(acquire(&mut p, "a", 2, 10, 0, &s), vec![(0, 1), (1, 1)]);
        assert_eq!(acquire(&mut p, "b", 2, 10, 0, &s), vec![(2, 1), (3, 1)], "b gets the next records, not a's");
        ack(&mut p, "b", vec![(2, Ack::Accept), (3, Ack::Accept)], 10, &s);
        assert_eq!(p.start_offset(), 0, "0 and 1 are still in flight");
        ack(&mut p, "a", vec![(0, Ack::Accept)], 10, &s);
        assert_eq!(p.start_offset(), 1);
        ack(&mut p, "a", vec![(1, Ack::Accept)], 10, &s);
        assert_eq!((p.start_offset(), p.in_flight().len()), (4, 0), "past every done record");
    }

    #[test]
    fn an_expired_lock_brings_the_record_back_and_a_late_acknowledgement_changes_nothing() {
        let s = settings();
        let mut p = SharePartition::starting_at(0);
        acquire(&mut p, "a", 1, 1, 0, &s);
        assert_eq!(ack(&mut p, "a", vec![(0, Ack::Accept)], 1_000, &s).refused, vec![(0, AckRefusal::LockExpired)]);
        assert!(!p.is_done(0), "the refused accept did nothing");
        p.apply(&ShareCommand::Expire { offsets: vec![(0, 0)], now_ms: 1_000 }, &s);
        assert_eq!(acquire(&mut p, "b", 1, 1, 1_001, &s), vec![(0, 2)], "back, its second attempt");
        assert_eq!(ack(&mut p, "a", vec![(0, Ack::Accept)], 1_002, &s).refused, vec![(0, AckRefusal::NotHeld)]);
        ack(&mut p, "b", vec![(0, Ack::Accept)], 1_002, &s);
        assert!(p.is_done(0));
    }

    #[test]
    fn an_expiry_that_a_renewal_overtook_ends_nothing() {
        let s = settings();
        let mut p = SharePartition::starting_at(0);
        acquire(&mut p, "a", 1, 1, 0, &s);
        // The leader saw the lock expire at 1,000; a renewal at 900 applied first.
        ack(&mut p, "a", vec![(0, Ack::Renew)], 900, &s);
        p.apply(&ShareCommand::Expire { offsets: vec![(0, 0)], now_ms: 1_000 }, &s);
        assert!(matches!(p.in_flight()[&0].state, InFlight::Acquired { lock_until_ms: 1_900, .. }));
        assert!(ack(&mut p, "a", vec![(0, Ack::Accept)], 1_500, &s).refused.is_empty());
    }

    #[test]
    fn a_record_past_its_delivery_limit_is_archived_and_its_last_attempt_goes_alone() {
        let s = ShareSettings { dead_letter_topic: Some("dlq".into()), ..settings() };
        let mut p = SharePartition::starting_at(0);
        for attempt in 1..=2u16 {
            let got = acquire(&mut p, "a", 3, 3, i64::from(attempt) * 10, &s);
            assert_eq!(got[0], (0, attempt));
            let releases = got.iter().map(|(o, _)| (*o, Ack::Release { delay_ms: 0 })).collect();
            ack(&mut p, "a", releases, i64::from(attempt) * 10 + 1, &s);
        }
        assert_eq!(acquire(&mut p, "a", 3, 3, 30, &s), vec![(0, 3)], "its last attempt, alone");
        let applied = ack(&mut p, "a", vec![(0, Ack::Release { delay_ms: 0 })], 31, &s);
        assert_eq!(applied.archived, vec![(0, ArchiveReason::DeliveryLimit)]);
        assert_eq!(p.start_offset(), 0, "not done before its dead-letter copy is written");
        assert!(acquire(&mut p, "a", 3, 3, 32, &s).iter().all(|(o, _)| *o != 0), "never delivered again");
        p.apply(&ShareCommand::PinDeadLetterWriter { writer: writer(7), replaces: None }, &s);
        p.apply(&ShareCommand::DeadLettered { producer_id: 7, first_sequence: 0, count: 1 }, &s);
        assert!(p.is_done(0));
    }

    fn writer(producer_id: i64) -> DeadLetterWriter {
        DeadLetterWriter { producer_id, producer_epoch: 0, topic: "dlq".into(), partition: 0 }
    }

    #[test]
    fn dead_letter_copies_are_numbered_in_archive_order_and_done_only_by_their_writer_once() {
        let s = ShareSettings { dead_letter_topic: Some("dlq".into()), ..settings() };
        let mut p = SharePartition::starting_at(0);
        acquire(&mut p, "a", 3, 3, 0, &s);
        let reject = |why: &str| Ack::Reject { reason: why.into() };
        ack(&mut p, "a", vec![(2, reject("first")), (0, reject("second"))], 1, &s);
        let (waiting, first) = p.dead_letters();
        assert_eq!((waiting.iter().map(|d| d.offset).collect::<Vec<_>>(), first), (vec![2, 0], 0));
        assert_eq!(waiting[0].reason, ArchiveReason::Rejected("first".into()));
        assert_eq!(p.in_flight_count(), 3, "one acquired and two waiting for their copies");
        // No writer yet: nothing is done.
        p.apply(&ShareCommand::DeadLettered { producer_id: 7, first_sequence: 0, count: 1 }, &s);
        assert_eq!(p.dead_letters().0.len(), 2);
        p.apply(&ShareCommand::PinDeadLetterWriter { writer: writer(7), replaces: None }, &s);
        // A second leader's pin, made against the state before the first, changes nothing.
        p.apply(&ShareCommand::PinDeadLetterWriter { writer: writer(8), replaces: None }, &s);
        assert_eq!(p.dead_letter_writer().map(|w| w.producer_id), Some(7));
        p.apply(&ShareCommand::DeadLettered { producer_id: 7, first_sequence: 0, count: 1 }, &s);
        assert!(p.is_done(2) && !p.is_done(0));
        // The same entry again (a retry) or another writer's: nothing.
        p.apply(&ShareCommand::DeadLettered { producer_id: 7, first_sequence: 0, count: 1 }, &s);
        p.apply(&ShareCommand::DeadLettered { producer_id: 8, first_sequence: 1, count: 1 }, &s);
        assert!(!p.is_done(0));
        assert_eq!(p.dead_letters().1, 1);
        // The log start passing a record waiting for its copy leaves it waiting (its copy
        // carries the evidence) and counted.
        p.apply(&ShareCommand::LogStart { log_start: 3 }, &s);
        assert_eq!((p.dead_letters().0.len(), p.in_flight_count()), (1, 1));
        // A replacement writer numbers what waits from 0.
        p.apply(&ShareCommand::PinDeadLetterWriter { writer: writer(9), replaces: Some(7) }, &s);
        assert_eq!(p.dead_letters().1, 0);
        p.apply(&ShareCommand::DeadLettered { producer_id: 9, first_sequence: 0, count: 5 }, &s);
        assert_eq!((p.dead_letters().0.len(), p.in_flight_count()), (0, 0));
        assert_eq!(SharePartition::from_proto(&p.to_proto("g")), Ok(p.clone()));
    }

    #[test]
    fn a_delayed_record_is_not_delivered_early_and_a_rejected_one_never_again() {
        let s = settings();
        let mut p = SharePartition::starting_at(0);
        acquire(&mut p, "a", 2, 2, 0, &s);
        let applied = ack(
            &mut p,
            "a",
            vec![(0, Ack::Release { delay_ms: 500 }), (1, Ack::Reject { reason: "bad".into() })],
            10,
            &s,
        );
        assert_eq!(applied.archived, vec![(1, ArchiveReason::Rejected("bad".into()))]);
        assert!(acquire(&mut p, "b", 5, 2, 509, &s).is_empty(), "delayed until 510; 1 is archived");
        assert_eq!(acquire(&mut p, "b", 5, 2, 510, &s), vec![(0, 2)]);
    }

    #[test]
    fn a_departed_members_records_come_back_at_once_and_keep_their_counts() {
        let s = settings();
        let mut p = SharePartition::starting_at(0);
        acquire(&mut p, "a", 2, 2, 0, &s);
        p.apply(&ShareCommand::ReleaseMember { member: "a".into(), now_ms: 5 }, &s);
        assert_eq!(acquire(&mut p, "b", 5, 2, 6, &s), vec![(0, 2), (1, 2)], "the crash counted as an attempt");
    }

    #[test]
    fn acquisitions_stop_at_the_caps_even_when_planned_before_they_filled() {
        let s = settings();
        let mut p = SharePartition::starting_at(0);
        assert_eq!(acquire(&mut p, "a", 100, 100, 0, &s).len(), 5, "the member's cap");
        assert_eq!(acquire(&mut p, "b", 100, 100, 0, &s).len(), 5, "the partition's cap");
        assert!(acquire(&mut p, "c", 100, 100, 0, &s).is_empty());
        // An acquisition the leader planned before the caps filled takes nothing past them.
        let late = p.apply(
            &ShareCommand::Acquire { member: "c".into(), acks: vec![], skipped: vec![], offsets: vec![50], now_ms: 1 },
            &s,
        );
        assert!(late.acquired.is_empty());
        // 3 is accepted, the others ahead of it stay: 3 is done, the start stays at 0.
        ack(&mut p, "a", vec![(3, Ack::Accept)], 2, &s);
        assert_eq!(p.start_offset(), 0);
        assert_eq!(acquire(&mut p, "c", 1, 100, 3, &s), vec![(10, 1)]);
    }

    #[test]
    fn records_the_log_no_longer_has_are_dropped_and_the_start_follows_the_log() {
        let s = settings();
        let mut p = SharePartition::starting_at(0);
        acquire(&mut p, "a", 3, 10, 0, &s);
        p.apply(&ShareCommand::LogStart { log_start: 2 }, &s);
        assert_eq!((p.start_offset(), p.in_flight().keys().copied().collect::<Vec<_>>()), (2, vec![2]));
        assert_eq!(ack(&mut p, "a", vec![(0, Ack::Accept)], 1, &s).refused, vec![(0, AckRefusal::NotHeld)]);
    }

    #[test]
    fn a_log_start_inside_a_done_range_keeps_the_rest_of_it_done() {
        let s = settings();
        let mut p = SharePartition::starting_at(0);
        acquire(&mut p, "a", 5, 10, 0, &s);
        ack(&mut p, "a", vec![(1, Ack::Accept), (2, Ack::Accept), (3, Ack::Accept)], 1, &s);
        p.apply(&ShareCommand::LogStart { log_start: 2 }, &s);
        assert_eq!(p.start_offset(), 4, "past 2 and 3, still done");
        assert_eq!(
            acquire(&mut p, "b", 5, 10, 2, &s),
            vec![(5, 1), (6, 1), (7, 1), (8, 1), (9, 1)],
            "3 is not delivered again"
        );
    }

    #[test]
    fn done_records_ahead_of_a_slow_one_take_a_range_not_a_record_each() {
        let s = ShareSettings { max_in_flight: 1_000, max_per_member: 1_000, ..settings() };
        let mut p = SharePartition::starting_at(0);
        acquire(&mut p, "slow", 1, 1, 0, &s);
        for round in 0..10 {
            let got = acquire(&mut p, "fast", 100, 10_000, round, &s);
            ack(&mut p, "fast", got.iter().map(|(o, _)| (*o, Ack::Accept)).collect(), round, &s);
        }
        assert_eq!((p.start_offset(), p.end_offset()), (0, 1_001));
        assert_eq!((p.in_flight().len(), p.done.len()), (1, 1), "one record in flight, one done range");
        ack(&mut p, "slow", vec![(0, Ack::Accept)], 20, &s);
        assert_eq!(p.start_offset(), 1_001);
    }

    #[test]
    fn offsets_without_records_are_done_without_a_delivery_and_the_start_moves_past_them() {
        let s = ShareSettings { max_per_member: 10, ..settings() };
        // With the budget spent, the walk stops before the gap after it.
        let at_cap = SharePartition::starting_at(0).plan_acquire(
            "a",
            2,
            0,
            &s,
            &LogView { scanned: 0..4, records: std::iter::once(0..2).collect() },
        );
        assert_eq!(at_cap, AcquirePlan { offsets: vec![0, 1], skipped: vec![] });
        let mut p = SharePartition::starting_at(0);
        // Records at 0..3 and 5..7; 3 and 4 are a transaction's markers, say; read up to 8.
        let log = LogView { scanned: 0..8, records: vec![0..3, 5..7] };
        let plan = p.plan_acquire("a", 10, 0, &s, &log);
        assert_eq!(plan, AcquirePlan { offsets: vec![0, 1, 2, 5, 6], skipped: vec![(3, 5), (7, 8)] });
        let cmd = ShareCommand::Acquire {
            member: "a".into(),
            acks: vec![],
            skipped: plan.skipped,
            offsets: plan.offsets,
            now_ms: 0,
        };
        p.apply(&cmd, &s);
        assert_eq!((p.end_offset(), p.in_flight().len()), (8, 5));
        // The accepted records and the gap between them are one done range, the start past all.
        let acks = [0, 1, 2, 5, 6].map(|o| (o, Ack::Accept)).to_vec();
        let cmd = ShareCommand::Acquire { member: "a".into(), acks, skipped: vec![], offsets: vec![], now_ms: 1 };
        assert!(p.apply(&cmd, &s).refused.is_empty());
        assert_eq!((p.start_offset(), p.done.len()), (8, 0));
        assert_eq!(p.first_candidate(20, 1, &s), Some(8));
    }

    #[test]
    fn a_gap_keeps_the_records_acquired_in_it_and_drops_the_ones_compaction_removed() {
        let s = settings();
        let mut p = SharePartition::starting_at(0);
        acquire(&mut p, "a", 4, 4, 0, &s);
        ack(&mut p, "a", vec![(1, Ack::Release { delay_ms: 0 }), (2, Ack::Release { delay_ms: 50 })], 1, &s);
        // Compaction removed 1..3 since: 1 is available and 2 delayed, both go; 0 and 3 are held.
        let log = LogView { scanned: 0..6, records: std::iter::once(5..6).collect() };
        let plan = p.plan_acquire("b", 10, 2, &s, &log);
        assert_eq!(plan, AcquirePlan { offsets: vec![5], skipped: vec![(1, 3), (4, 5)] });
        // Applied after `a` acquired... nothing new: a skip never ends a held lock.
        let cmd = ShareCommand::Acquire {
            member: "b".into(),
            acks: vec![],
            skipped: vec![(0, 5)],
            offsets: vec![5],
            now_ms: 2,
        };
        assert_eq!(p.apply(&cmd, &s).acquired, vec![(5, 1)]);
        assert_eq!(p.in_flight().keys().copied().collect::<Vec<_>>(), vec![0, 3, 5]);
        assert_eq!(ack(&mut p, "a", vec![(0, Ack::Accept), (3, Ack::Accept)], 3, &s).refused, vec![]);
        assert_eq!(p.start_offset(), 5);
    }

    #[test]
    fn a_fetch_acknowledges_first_so_a_member_at_its_cap_acquires_again() {
        let s = settings();
        let mut p = SharePartition::starting_at(0);
        assert_eq!(acquire(&mut p, "a", 5, 20, 0, &s).len(), 5);
        assert!(p.plan_acquire("a", 5, 1, &s, &LogView::dense(20)).offsets.is_empty(), "at the member's cap");
        let acks: Vec<(u64, Ack)> = (0..5).map(|o| (o, Ack::Accept)).collect();
        let mut preview = p.clone();
        preview.apply(&ShareCommand::Acknowledge { member: "a".into(), acks: acks.clone(), now_ms: 1 }, &s);
        let plan = preview.plan_acquire("a", 5, 1, &s, &LogView::dense(20));
        let cmd =
            ShareCommand::Acquire { member: "a".into(), acks, skipped: plan.skipped, offsets: plan.offsets, now_ms: 1 };
        let applied = p.apply(&cmd, &s);
        assert_eq!(applied.acquired.iter().map(|(o, _)| *o).collect::<Vec<_>>(), vec![5, 6, 7, 8, 9]);
        assert_eq!(p.start_offset(), 5);
    }

    /// One step of a random history: who does what, at which moment.
    #[derive(Debug, Clone)]
    enum Step {
        Acquire { member: u8, n: u8 },
        Ack { member: u8, pick: u8, how: u8 },
        Expire { pick: u8 },
        Leave { member: u8 },
        DeadLettered,
        Trim { by: u8 },
        Tick { ms: u16 },
    }

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        prop_oneof![
            (0..3u8, 1..6u8).prop_map(|(member, n)| Step::Acquire { member, n }),
            (0..3u8, any::<u8>(), 0..4u8).prop_map(|(member, pick, how)| Step::Ack { member, pick, how }),
            any::<u8>().prop_map(|pick| Step::Expire { pick }),
            (0..3u8).prop_map(|member| Step::Leave { member }),
            Just(Step::DeadLettered),
            (0..6u8).prop_map(|by| Step::Trim { by }),
            (1..800u16).prop_map(|ms| Step::Tick { ms }),
        ]
    }

    proptest::proptest! {
        /// Whatever members do, in any order and timing: a delivery count never goes down and
        /// never passes the limit, the caps hold, the start offset only moves forward and only
        /// past records that are done, a done record is never acquired again, a lock ends early
        /// only by its holder (or with its record), and every state round-trips through its
        /// stored form.
        #[test]
        fn invariants_hold_over_random_histories(steps in proptest::collection::vec(step(), 1..200)) {
            let s = ShareSettings { lock_ms: 1_000, delivery_limit: 3, max_in_flight: 8, max_per_member: 4, dead_letter_topic: Some("dlq".into()), ..Default::default() };
            let hw = 30;
            let mut p = SharePartition::starting_at(0);
            let mut now = 0i64;
            let mut counts: BTreeMap<u64, u16> = BTreeMap::new();
            let mut done_seen: Vec<u64> = Vec::new();
            for st in steps {
                let before = p.start_offset();
                let member = |m: u8| format!("m{m}");
                let cmd = match st {
                    Step::Acquire { member: m, n } => {
                        // Every fifth offset is a gap in the log (a marker, say).
                        let log = LogView { scanned: 0..hw, records: (0..hw).step_by(5).map(|o| o..(o + 4).min(hw)).collect() };
                        let plan = p.plan_acquire(&member(m), usize::from(n), now, &s, &log);
                        let acks = p.in_flight().iter().filter(|(_, t)| matches!(&t.state, InFlight::Acquired { member: h, .. } if *h == member(m))).take(usize::from(n % 2)).map(|(o, _)| (*o, Ack::Accept)).collect();
                        ShareCommand::Acquire { member: member(m), acks, skipped: plan.skipped, offsets: plan.offsets, now_ms: now }
                    }
                    Step::Ack { member: m, pick, how } => {
                        let held: Vec<u64> = p.in_flight().keys().copied().collect();
                        let Some(&offset) = held.get(usize::from(pick) % held.len().max(1)) else { continue };
                        let ack = match how { 0 => Ack::Accept, 1 => Ack::Release { delay_ms: 300 }, 2 => Ack::Reject { reason: "r".into() }, _ => Ack::Renew };
                        ShareCommand::Acknowledge { member: member(m), acks: vec![(offset, ack)], now_ms: now }
                    }
                    Step::Expire { pick } => {
                        let held: Vec<u64> = p.in_flight().keys().copied().collect();
                        let Some(&offset) = held.get(usize::from(pick) % held.len().max(1)) else { continue };
                        ShareCommand::Expire { offsets: vec![(offset, 0)], now_ms: now }
                    }
                    Step::Leave { member: m } => ShareCommand::ReleaseMember { member: member(m), now_ms: now },
                    Step::DeadLettered if p.dead_letter_writer().is_none() => {
                        ShareCommand::PinDeadLetterWriter { writer: writer(1), replaces: None }
                    }
                    Step::DeadLettered => {
                        let (waiting, first_sequence) = p.dead_letters();
                        ShareCommand::DeadLettered { producer_id: 1, first_sequence, count: (waiting.len() as u32).min(2) }
                    }
                    Step::Trim { by } => ShareCommand::LogStart { log_start: p.start_offset() + u64::from(by) },
                    Step::Tick { ms } => { now += i64::from(ms); continue; }
                };
                let prior = p.in_flight().clone();
                let applied = p.apply(&cmd, &s);
                // A lock ends before its deadline only by its holder's acknowledgement or departure, or
                // with the record itself.
                for (offset, t) in &prior {
                    let InFlight::Acquired { member: holder, lock_until_ms } = &t.state else { continue };
                    let still = matches!(p.in_flight().get(offset), Some(Tracked { state: InFlight::Acquired { member: m, .. }, .. }) if m == holder);
                    let by_holder = match &cmd {
                        ShareCommand::Acknowledge { member: m, acks, .. } | ShareCommand::Acquire { member: m, acks, .. } => m == holder && acks.iter().any(|(o, _)| o == offset),
                        ShareCommand::ReleaseMember { member: m, .. } => m == holder,
                        // Or the log no longer has the record.
                        ShareCommand::LogStart { log_start } => offset < log_start,
                        _ => false,
                    };
                    proptest::prop_assert!(still || by_holder || *lock_until_ms <= now, "{offset}: {holder}'s lock until {lock_until_ms} ended at {now}");
                }
                for (offset, count) in &applied.acquired {
                    proptest::prop_assert!(offset % 5 != 4, "{offset} has no record");
                    proptest::prop_assert!(!done_seen.contains(offset), "{offset} acquired after it was done");
                    proptest::prop_assert!(*count <= s.delivery_limit, "{offset} delivered {count} times");
                    let previous = counts.insert(*offset, *count).unwrap_or(0);
                    proptest::prop_assert_eq!(*count, previous + 1, "{} skipped or repeated a count", offset);
                }
                for (offset, t) in p.in_flight() {
                    proptest::prop_assert_eq!(Some(&t.delivery_count), counts.get(offset), "count kept for {}", offset);
                }
                proptest::prop_assert!(p.in_flight_count() <= s.max_in_flight as usize);
                // Every state the rules make is one a snapshot stores and restores.
                proptest::prop_assert_eq!(SharePartition::from_proto(&p.to_proto("g")), Ok(p.clone()));
                for m in 0..3 {
                    proptest::prop_assert!(p.held_by(&member(m)) <= s.max_per_member as usize);
                }
                proptest::prop_assert!(p.start_offset() >= before, "the start went back");
                for o in before..p.start_offset() {
                    proptest::prop_assert!(!p.in_flight().contains_key(&o), "the start passed {} in flight", o);
                }
                let newly: Vec<u64> = (0..p.end_offset()).filter(|o| p.is_done(*o) && !done_seen.contains(o)).collect();
                done_seen.extend(newly);
            }
        }
    }

    #[test]
    fn backoff_doubles_up_to_its_cap() {
        let b = Backoff { initial_ms: 100, max_ms: 1_000 };
        assert_eq!([1, 2, 3, 4, 5, 60].map(|n| b.after(n)), [100, 200, 400, 800, 1_000, 1_000]);
        assert_eq!(Backoff::default().after(3), 0);
    }
}
