//! The leader's side of share groups on a [`Partition`]: it plans what a fetch acquires from
//! the log and the group's state, proposes it as one share entry (with the acknowledgements the
//! fetch carries) and serves the records once that entry is committed; it proposes expiries
//! when locks run out. The rules themselves are [`SharePartition`]'s, applied by the state
//! machine on every replica.
//!
//! Guarantees, from the rules and from where they run:
//! * A record leaves the leader only after the entry counting its delivery is committed, so no
//!   crash, failover or restart loses an attempt.
//! * One acquisition is planned and proposed at a time per partition (a fetch waits for the one
//!   before it), so concurrent fetches never plan the same records; acknowledgements and
//!   expiries do not wait for it — the compare-and-set at apply time keeps them apart.
//! * Only a leader that has applied every entry of earlier terms plans or proposes
//!   ([`PartitionError::CatchingUp`] before), so it plans from the state every replica has.
//! * Locks end by themselves: while this node leads and any record is acquired, a timer
//!   proposes the expiry of each lock at its deadline (a lock a renewal extended meanwhile is
//!   left alone at apply time). The timer runs only while there is a lock to watch; after a
//!   failover the new leader's housekeeping (or its first share request) starts it, so a lock
//!   that ran out during a failover ends within [`crate::partition::RETENTION_CHECK_EVERY`].

use std::sync::atomic::Ordering;
use std::time::Duration;

use rill_raft::Payload;
use rill_records::{BatchInfo, MAX_DECOMPRESSED_BATCH_BYTES};

use super::stored::{self, ShareEntry};
use super::{Ack, AckRefusal, AcquirePlan, ArchiveReason, LogView, ShareCommand, SharePartition, ShareSettings};
use crate::command;
use crate::error::{PartitionError, Result};
use crate::fetch::{Isolation, StoredBatch};
use crate::handover::InFlight;
use crate::partition::Partition;

/// How long a share entry may take to commit before its request is answered with a timeout
/// (the entry may still be applied: an acquisition then runs out like any unacknowledged one).
pub const SHARE_WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// The most jitter the leader adds to a backoff delay, in percent of the delay: members that
/// failed on the same records together do not all get them back at the same moment.
pub const JITTER_PERCENT: u64 = 20;

/// Where a share group starts reading a partition it has never read (Kafka's
/// `share.auto.offset.reset`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ShareStart {
    /// The oldest record the partition still has.
    Earliest,
    /// Records written from the group's first fetch on (Kafka's default).
    #[default]
    Latest,
}

impl From<rill_meta::AutoOffsetReset> for ShareStart {
    fn from(reset: rill_meta::AutoOffsetReset) -> Self {
        match reset {
            rill_meta::AutoOffsetReset::Earliest => ShareStart::Earliest,
            rill_meta::AutoOffsetReset::Latest => ShareStart::Latest,
        }
    }
}

/// A member's fetch from one partition.
#[derive(Debug, Clone)]
pub struct ShareFetchRequest {
    /// The share group.
    pub group: String,
    /// The member, as its coordinator knows it.
    pub member: String,
    /// The group's settings.
    pub settings: ShareSettings,
    /// Where the group starts if it has never read the partition.
    pub start: ShareStart,
    /// Acknowledgements of records the member holds, applied before anything is acquired.
    pub acks: Vec<(u64, Ack)>,
    /// The most records to acquire (the member's prefetch).
    pub max_records: usize,
    /// About the most bytes of batches to read (at least one batch when any is acquirable).
    pub max_bytes: usize,
    /// How long to wait for a record to acquire when none is (the long poll).
    pub max_wait: Duration,
}

/// What a fetch did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ShareFetched {
    /// The batches holding the acquired records, exactly as stored; they may hold other
    /// records too, which the member must leave alone.
    pub batches: Vec<StoredBatch>,
    /// The records acquired, with their delivery counts (this delivery included).
    pub acquired: Vec<(u64, u16)>,
    /// When the locks on them run out (the leader's clock, ms since the epoch).
    pub lock_until_ms: i64,
    /// The fetch's acknowledgements that changed nothing, and why.
    pub refused: Vec<(u64, AckRefusal)>,
    /// Records archived by the fetch's acknowledgements (rejected, or released on their last
    /// attempt).
    pub archived: Vec<(u64, ArchiveReason)>,
    /// The high watermark when the answer was built.
    pub high_watermark: u64,
    /// The partition's log start offset when the answer was built.
    pub log_start_offset: u64,
}

/// What may make records acquirable on a partition: records written (or, `read_committed`,
/// decided), a change of share state (a release, an expiry), the end of a delay.
#[derive(Debug)]
pub struct ShareWatch {
    changes: rill_rt::sync::watch::Receiver<u64>,
    readable: rill_rt::sync::watch::Receiver<u64>,
}

impl ShareWatch {
    /// Resolves at the first change since the watch was taken, when the first of `group`'s
    /// delays on `partition` ends, or at `until`, whichever comes first.
    pub async fn changed(&mut self, partition: &Partition, group: &str, until: rill_rt::Instant) {
        // A delayed record comes back without an entry: wake when the first delay ends.
        let delay_end = partition.with_share_state(group, |s| s.and_then(|s| s.next_delay_end(wall_ms())));
        let wake = delay_end.map_or(until, |end| until.min(rill_rt::now() + ms_from_now(end)));
        tokio::select! {
            _ = self.changes.changed() => {}
            _ = self.readable.changed() => {}
            _ = rill_rt::sleep_until(wake) => {}
        }
    }
}

/// What an acknowledgement, expiry or departure did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShareAcknowledged {
    /// Acknowledgements that changed nothing, and why.
    pub refused: Vec<(u64, AckRefusal)>,
    /// Records archived.
    pub archived: Vec<(u64, ArchiveReason)>,
}

impl Partition {
    /// Serves a member's fetch: applies its acknowledgements and acquires records for it, in
    /// one share entry, then returns the batches holding what it acquired. When nothing is
    /// acquirable it waits, up to `max_wait`, for records to arrive, come back or end their
    /// delay. Leader only.
    pub async fn share_fetch(self: &std::sync::Arc<Self>, request: ShareFetchRequest) -> Result<ShareFetched> {
        // A new leader's locks (taken under its predecessor) end by its timer: start it now
        // rather than at the next housekeeping.
        self.ensure_share_timer(None);
        let wait_until = rill_rt::now() + request.max_wait;
        let mut acks = request.acks.clone();
        let mut out = ShareFetched::default();
        loop {
            let mut watch = self.share_watch(request.settings.isolation);
            let round = self.acquire_once(&request, std::mem::take(&mut acks)).await?;
            if !round.archived.is_empty() {
                self.ensure_dead_letter_writer();
            }
            out.refused.extend(round.refused);
            out.archived.extend(round.archived);
            out.high_watermark = round.high_watermark;
            out.log_start_offset = round.log_start_offset;
            if !round.acquired.is_empty() {
                out.acquired = round.acquired;
                out.batches = round.batches;
                out.lock_until_ms = round.lock_until_ms;
                self.ensure_share_timer(Some(out.lock_until_ms));
                return Ok(out);
            }
            if rill_rt::now() >= wait_until {
                return Ok(out);
            }
            watch.changed(self, &request.group, wait_until).await;
            if self.leader_term().is_none() {
                return Err(self.not_leader());
            }
        }
    }

    /// A watch of what may make records acquirable here for a read at `isolation`, from now:
    /// taken before an acquisition, waited on after one that found nothing, so no change in
    /// between is missed.
    pub fn share_watch(&self, isolation: Isolation) -> ShareWatch {
        let mut changes = self.share_changes.clone();
        let mut readable = match isolation {
            Isolation::ReadCommitted => self.lso.clone(),
            Isolation::ReadUncommitted => self.hw.clone(),
        };
        changes.borrow_and_update();
        readable.borrow_and_update();
        ShareWatch { changes, readable }
    }

    /// Applies a member's acknowledgements (one share entry). Leader only.
    pub async fn share_acknowledge(
        self: &std::sync::Arc<Self>,
        group: &str,
        member: &str,
        settings: &ShareSettings,
        acks: Vec<(u64, Ack)>,
    ) -> Result<ShareAcknowledged> {
        let command = ShareCommand::Acknowledge { member: member.to_string(), acks, now_ms: wall_ms() };
        let applied = self.propose_share(group, settings, 0, command).await?;
        if !applied.archived.is_empty() {
            self.ensure_dead_letter_writer();
        }
        Ok(ShareAcknowledged { refused: applied.refused, archived: applied.archived })
    }

    /// Releases what `member` holds at once: it left the group or was fenced. Each release
    /// still counts as an attempt. Leader only.
    pub async fn share_release_member(
        self: &std::sync::Arc<Self>,
        group: &str,
        member: &str,
    ) -> Result<ShareAcknowledged> {
        let Some(settings) = self.with_share_state(group, |s| s.map(|s| s.settings().clone())) else {
            return Ok(ShareAcknowledged::default());
        };
        let command = ShareCommand::ReleaseMember { member: member.to_string(), now_ms: wall_ms() };
        let applied = self.propose_share(group, &settings, 0, command).await?;
        if !applied.archived.is_empty() {
            self.ensure_dead_letter_writer();
        }
        Ok(ShareAcknowledged { refused: applied.refused, archived: applied.archived })
    }

    /// A copy of `group`'s state on this replica, if it has read the partition (describe,
    /// tests and oracles).
    pub fn share_state(&self, group: &str) -> Option<SharePartition> {
        self.with_share_state(group, |s| s.cloned())
    }

    /// The share groups that have read this partition, as this replica has applied them.
    pub fn share_groups(&self) -> Vec<String> {
        self.shares.lock().unwrap_or_else(|p| p.into_inner()).keys().cloned().collect()
    }

    fn with_share_state<R>(&self, group: &str, read: impl FnOnce(Option<&SharePartition>) -> R) -> R {
        read(self.shares.lock().unwrap_or_else(|p| p.into_inner()).get(group))
    }

    /// One acquisition: plan it from the log and the group's state, propose it with `acks`, and
    /// read the batches holding what it acquired.
    async fn acquire_once(&self, request: &ShareFetchRequest, acks: Vec<(u64, Ack)>) -> Result<ShareFetched> {
        let settings = &request.settings;
        // One acquisition at a time per partition: two planned together would choose alike.
        let _acquiring = self.share_acquiring.lock().await;
        self.replica.proposing_term()?;
        let now_ms = wall_ms();
        let log_start = self.log_start_offset();
        let end = self.readable_end(settings.isolation);
        let start_if_new = match request.start {
            ShareStart::Earliest => log_start,
            ShareStart::Latest => end,
        };
        // The state as the acknowledgements leave it: a member at its cap that acknowledges
        // with its fetch acquires again in the same entry.
        let preview = |state: Option<&SharePartition>| {
            let mut state = state.cloned().unwrap_or_else(|| SharePartition::starting_at(start_if_new.max(log_start)));
            if !acks.is_empty() {
                let ack = ShareCommand::Acknowledge { member: request.member.clone(), acks: acks.clone(), now_ms };
                state.apply(&ack, settings);
            }
            state
        };
        let (state, is_new) = self.with_share_state(&request.group, |s| (preview(s), s.is_none()));
        let mut read = Vec::new();
        let mut plan = AcquirePlan::default();
        if let Some(from) = state.first_candidate(end, now_ms, settings) {
            let (batches, log) = self.read_for_share(from, end, request.max_bytes, settings.isolation)?;
            plan = state.plan_acquire(&request.member, request.max_records, now_ms, settings, &log);
            read = batches;
        }
        let mut out = ShareFetched {
            high_watermark: self.high_watermark(),
            log_start_offset: log_start,
            lock_until_ms: now_ms.saturating_add(i64::try_from(settings.lock_ms).unwrap_or(i64::MAX)),
            ..Default::default()
        };
        // A group's first fetch writes its entry even with nothing to acquire: it fixes where
        // the group starts (at the end, for `Latest`), so what is written next is the group's.
        if plan.is_empty() && acks.is_empty() && !is_new {
            return Ok(out);
        }
        let command = ShareCommand::Acquire {
            member: request.member.clone(),
            acks,
            skipped: plan.skipped,
            offsets: plan.offsets,
            now_ms,
        };
        let applied = if rill_rt::mutation::active(rill_rt::mutation::Mutation::ShareAcquireUnreplicated) {
            // Deliberate bug (simulation only): the acquisition lives in this leader's memory only.
            self.replica.proposing_term()?;
            let mut shares = self.shares.lock().unwrap_or_else(|p| p.into_inner());
            let state = shares
                .entry(request.group.clone())
                .or_insert_with(|| SharePartition::starting_at(start_if_new.max(log_start)));
            state.set_settings(settings);
            state.apply(&command, settings)
        } else {
            self.propose_share(&request.group, settings, start_if_new, command).await?
        };
        out.refused = applied.refused;
        out.archived = applied.archived;
        out.batches = read
            .into_iter()
            .filter(|b| {
                let span = BatchInfo::parse_stored(&b.data).map_or(1, |i| i.span());
                applied.acquired.iter().any(|(o, _)| *o >= b.base_offset && *o < b.base_offset + span)
            })
            .collect();
        out.acquired = applied.acquired;
        Ok(out)
    }

    /// Reads batches from `from` (below `end`, about `max_bytes`) and where the deliverable
    /// records among them are: control batches, aborted transactions' batches under
    /// `read_committed` and records compaction removed are gaps.
    fn read_for_share(
        &self,
        from: u64,
        end: u64,
        max_bytes: usize,
        isolation: Isolation,
    ) -> Result<(Vec<StoredBatch>, LogView)> {
        let mut fetched = self.fetch(from as i64, max_bytes, isolation)?;
        if isolation == Isolation::ReadCommitted {
            fetched.leave_out_aborted();
        }
        let scanned = from..fetched.next_offset.min(end).max(from);
        let mut records: Vec<std::ops::Range<u64>> = Vec::new();
        let mut push = |range: std::ops::Range<u64>| match records.last_mut() {
            Some(last) if last.end == range.start => last.end = range.end,
            _ => records.push(range),
        };
        let mut batches = Vec::with_capacity(fetched.batches.len());
        for batch in fetched.batches {
            let info = BatchInfo::parse_stored(&batch.data)
                .map_err(|e| PartitionError::Storage(format!("stored batch at offset {}: {e}", batch.base_offset)))?;
            if info.is_control() {
                continue;
            }
            let span = info.span();
            if u64::try_from(info.record_count).is_ok_and(|n| n == span) {
                push(batch.base_offset..batch.base_offset + span);
            } else {
                // Compacted: only the records it still has.
                let decoded = rill_records::decode(&batch.data, MAX_DECOMPRESSED_BATCH_BYTES).map_err(|e| {
                    PartitionError::Storage(format!("stored batch at offset {}: {e}", batch.base_offset))
                })?;
                for r in &decoded.records {
                    let offset = batch.base_offset + u64::try_from(r.offset_delta).unwrap_or(0);
                    push(offset..offset + 1);
                }
            }
            batches.push(batch);
        }
        Ok((batches, LogView { scanned, records }))
    }

    /// Proposes one share entry for `group` and waits until it is applied; what it did.
    pub(crate) async fn propose_share(
        &self,
        group: &str,
        settings: &ShareSettings,
        start_if_new: u64,
        command: ShareCommand,
    ) -> Result<super::Applied> {
        self.replica.proposing_term()?;
        let entry = ShareEntry { group: group.to_string(), settings: settings.clone(), start_if_new, command };
        let body = stored::encode_entry(&entry)
            .ok_or_else(|| PartitionError::Storage("a log start is not a share entry".into()))?;
        let _in_flight = InFlight::enter(&self.replica);
        self.quiescence.wake();
        let started = rill_rt::now();
        let write = self.raft.client_write(Payload { units: 0, body: command::encode_share(&body), proposal: 0 });
        let answer = match rill_rt::timeout(SHARE_WRITE_TIMEOUT, write).await {
            Err(_) => {
                return Err(PartitionError::Timeout {
                    waited_ms: SHARE_WRITE_TIMEOUT.as_millis() as u64,
                    what: "the share entry to commit",
                })
            }
            Ok(Ok(answer)) => answer.data.0,
            // Leadership moved while the entry was proposed: the next leader may still commit it,
            // so this is not "not the leader" (a refusal a client may safely send again) but an
            // outcome unknown.
            Ok(Err(openraft::error::RaftError::APIError(_))) => {
                return Err(PartitionError::Timeout {
                    waited_ms: started.elapsed().as_millis() as u64,
                    what: "the share entry to commit before this node stopped leading",
                })
            }
            Ok(Err(openraft::error::RaftError::Fatal(_))) => return Err(PartitionError::ShuttingDown),
        };
        stored::decode_applied(&answer).map_err(PartitionError::Storage)
    }

    /// Starts the lock timer if this replica leads and a record is acquired, unless it runs;
    /// wakes it when `lock_until_ms` (a lock just taken) ends before the deadline it sleeps to.
    pub fn ensure_share_timer(self: &std::sync::Arc<Self>, lock_until_ms: Option<i64>) {
        if self.leader_term().is_none() || !self.any_share_lock() {
            return;
        }
        if self.share_timer.running.compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst).is_ok() {
            rill_rt::spawn(share_timer(std::sync::Arc::downgrade(self)));
        } else if lock_until_ms.is_some_and(|until| until < self.share_timer.due_ms.load(Ordering::SeqCst)) {
            self.share_timer.wake.notify_one();
        }
    }

    fn any_share_lock(&self) -> bool {
        self.shares.lock().unwrap_or_else(|p| p.into_inner()).values().any(|s| s.next_lock_deadline().is_some())
    }

    /// Proposes the expiry of every lock that has run out, per group; the earliest deadline
    /// still ahead, if any lock is left.
    async fn expire_share_locks(&self) -> Result<Option<i64>> {
        let now_ms = wall_ms();
        let due: Vec<DueExpiries> = {
            let shares = self.shares.lock().unwrap_or_else(|p| p.into_inner());
            shares
                .iter()
                .filter_map(|(group, state)| {
                    let expired = state.expired_locks(now_ms);
                    (!expired.is_empty()).then(|| {
                        let settings = state.settings().clone();
                        let with_jitter = expired
                            .into_iter()
                            .map(|o| {
                                let count = state.in_flight().get(&o).map_or(1, |t| t.delivery_count);
                                (o, jitter(settings.backoff.after(count)))
                            })
                            .collect();
                        (group.clone(), settings, with_jitter)
                    })
                })
                .collect()
        };
        for (group, settings, offsets) in due {
            self.propose_share(&group, &settings, 0, ShareCommand::Expire { offsets, now_ms }).await?;
        }
        let shares = self.shares.lock().unwrap_or_else(|p| p.into_inner());
        Ok(shares.values().filter_map(|s| s.next_lock_deadline()).min())
    }
}

/// One group's expiries due: its settings, and each record with its jitter.
type DueExpiries = (String, ShareSettings, Vec<(u64, u64)>);

/// The lock timer's state on a partition (see [`share_timer`]).
#[derive(Debug, Default)]
pub(crate) struct ShareTimer {
    /// A timer task runs.
    running: std::sync::atomic::AtomicBool,
    /// The deadline it sleeps to (ms since the epoch).
    due_ms: std::sync::atomic::AtomicI64,
    /// Wakes it to look again (a lock that ends sooner was taken).
    wake: rill_rt::sync::Notify,
}

/// While its partition's replica leads and a record is acquired: sleeps until the earliest lock
/// deadline and proposes the expiries due. A renewal or an acknowledgement only makes the
/// earliest deadline later (woken early, the loop finds nothing due and sleeps again); a lock
/// ending sooner wakes it ([`Partition::ensure_share_timer`]). Exits when the replica stops
/// leading, the partition is dropped, or no lock is left — clearing its flag first and looking
/// again, so a lock taken meanwhile is not missed.
async fn share_timer(partition: std::sync::Weak<Partition>) {
    loop {
        let Some(p) = partition.upgrade() else { return };
        let next = if p.leader_term().is_none() {
            None
        } else {
            let expired = p.expire_share_locks().await;
            // Records out of attempts with their lock are archived: copy them.
            p.ensure_dead_letter_writer();
            match expired {
                Ok(next) => next,
                Err(e) => {
                    tracing::debug!(group = p.group, error = %e, "could not expire share locks");
                    Some(wall_ms().saturating_add(EXPIRY_RETRY_MS))
                }
            }
        };
        let Some(deadline) = next.filter(|_| p.leader_term().is_some()) else {
            p.share_timer.running.store(false, Ordering::SeqCst);
            let again = p.leader_term().is_some() && p.any_share_lock();
            if again && p.share_timer.running.compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst).is_ok()
            {
                continue;
            }
            return;
        };
        p.share_timer.due_ms.store(deadline, Ordering::SeqCst);
        tokio::select! {
            _ = rill_rt::sleep(ms_from_now(deadline)) => {}
            _ = p.share_timer.wake.notified() => {}
            _ = p.leadership_lost() => {}
        }
    }
}

/// How soon the timer tries again after an expiry could not be proposed.
const EXPIRY_RETRY_MS: i64 = 100;

fn wall_ms() -> i64 {
    rill_rt::wall_clock_ms()
}

/// The time from now until `at_ms` (the wall clock, ms since the epoch); zero when past.
fn ms_from_now(at_ms: i64) -> Duration {
    Duration::from_millis(u64::try_from(at_ms.saturating_sub(wall_ms())).unwrap_or(0))
}

/// A random jitter for a delay of `delay_ms`: up to [`JITTER_PERCENT`] of it.
fn jitter(delay_ms: u64) -> u64 {
    let most = delay_ms.saturating_mul(JITTER_PERCENT) / 100;
    if most == 0 {
        0
    } else {
        rill_rt::random_u64() % (most + 1)
    }
}
