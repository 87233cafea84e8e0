//! The history of a run: every client operation, recorded when invoked and when completed.
//!
//! Completion types follow Jepsen: `ok` (definitely happened), `fail` (definitely did not) and
//! `info` (unknown — a timeout, a lost connection, any error after the request may have reached a
//! leader). When in doubt the workload records `info`, never `fail`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

/// A partition number.
pub type Partition = u32;

/// What an operation tried to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpKind {
    /// Append a record to `partition`. `value` is unique in the run and identifies the record:
    /// it is the record's value, or (keyed workloads) its `id` header — so a tombstone, whose
    /// value is null, is identified too.
    Send {
        /// Partition.
        partition: Partition,
        /// The record's unique id.
        value: String,
        /// The record's key (keyed workloads only).
        key: Option<String>,
        /// A tombstone: the key with a null value.
        tombstone: bool,
    },
    /// Read `partition` from `offset`.
    Poll { partition: Partition, offset: u64 },
    /// Delete the records of `partition` below `before` (`DeleteRecords`).
    Trim { partition: Partition, before: u64 },
}

/// How an operation ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Not completed (the run ended first): treated like `Info`.
    Pending,
    /// The send was acknowledged at `offset`.
    SendOk { offset: u64 },
    /// The poll returned these (offset, value) records, in order.
    PollOk { records: Vec<(u64, String)> },
    /// The trim was committed; the partition's log start offset is at least `log_start`.
    TrimOk { log_start: u64 },
    /// Definitely had no effect.
    Fail(String),
    /// Unknown effect.
    Info(String),
}

/// One operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Op {
    /// Order of invocation.
    pub id: usize,
    /// The client process that ran it.
    pub process: u32,
    /// What it did.
    pub kind: OpKind,
    /// How it ended.
    pub outcome: Outcome,
    /// The history's logical clock when it was invoked.
    pub invoked_at: u64,
    /// The logical clock when it completed (`None` while pending): an operation invoked after
    /// another completed (`invoked_at > completed_at`) followed it in real time.
    pub completed_at: Option<u64>,
}

/// A whole run's history plus the final reads taken after healing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct History {
    /// Every operation in invocation order.
    pub ops: Vec<Op>,
    /// What a fresh consumer read from each partition after the cluster healed, from its log
    /// start offset.
    pub final_reads: BTreeMap<Partition, Vec<(u64, String)>>,
    /// The log start offset each final read began at (0 unless records were deleted).
    pub final_starts: BTreeMap<Partition, u64>,
    /// Ticks at every invocation and completion.
    pub clock: u64,
    /// Whether acknowledged sends promise their offset (acks=all) or not (acks=1, where an
    /// acknowledged write may be lost and its offset reused).
    pub acks_promise_offsets: bool,
    /// Whether the topic is compacted: offsets then have gaps where compaction removed records.
    pub compacted: bool,
    /// Compacted topics: per partition, the highest cleaning point `(clean_to,
    /// tombstones_before)` any replica had applied once the final reads were done (white-box;
    /// points only move forward, so every compaction the final reads saw was to at most it).
    pub cleaning: BTreeMap<Partition, (u64, u64)>,
    /// Compacted topics: `(clock, partition, clean_to)` whenever the highest `clean_to` any
    /// replica had applied was seen to change (white-box, sampled): at any clock value, no
    /// replica had compacted past the first sample taken at or after it.
    pub cleaning_samples: Vec<(u64, Partition, u64)>,
}

impl History {
    /// An empty history.
    pub fn new(acks_promise_offsets: bool) -> Self {
        Self { acks_promise_offsets, ..Default::default() }
    }

    /// Acknowledged sends: (process, partition, value, offset), in invocation order.
    pub fn acked_sends(&self) -> impl Iterator<Item = (u32, Partition, &str, u64)> {
        self.ops.iter().filter_map(|op| match (&op.kind, &op.outcome) {
            (OpKind::Send { partition, value, .. }, Outcome::SendOk { offset }) => {
                Some((op.process, *partition, value.as_str(), *offset))
            }
            _ => None,
        })
    }

    /// Successful polls: (process, partition, requested offset, records), in invocation order.
    pub fn polls(&self) -> impl Iterator<Item = (u32, Partition, u64, &[(u64, String)])> {
        self.ops.iter().filter_map(|op| match (&op.kind, &op.outcome) {
            (OpKind::Poll { partition, offset }, Outcome::PollOk { records }) => {
                Some((op.process, *partition, *offset, records.as_slice()))
            }
            _ => None,
        })
    }

    /// Compacted topics: an offset no replica had compacted to (none had a `clean_to` above it)
    /// at logical time `at` — the first sample taken at or after `at`, else the final point
    /// (`u64::MAX` when neither is known).
    pub fn cleaning_bound(&self, partition: Partition, at: u64) -> u64 {
        // Samples are in clock order.
        let from = self.cleaning_samples.partition_point(|(clock, _, _)| *clock < at);
        let sampled = self.cleaning_samples[from..].iter().find(|(_, p, _)| *p == partition);
        match (sampled, self.cleaning.get(&partition)) {
            (Some((_, _, clean_to)), _) => *clean_to,
            (None, Some((clean_to, _))) => *clean_to,
            (None, None) => u64::MAX,
        }
    }

    /// Every send, whatever its outcome: (op, partition, id, key, tombstone), in invocation order.
    pub fn sends(&self) -> impl Iterator<Item = (&Op, Partition, &str, Option<&str>, bool)> {
        self.ops.iter().filter_map(|op| match &op.kind {
            OpKind::Send { partition, value, key, tombstone } => {
                Some((op, *partition, value.as_str(), key.as_deref(), *tombstone))
            }
            _ => None,
        })
    }

    /// Compacted topics: the cleaning point of `partition` (`(0, 0)` when none is known).
    pub fn cleaning_point(&self, partition: Partition) -> (u64, u64) {
        self.cleaning.get(&partition).copied().unwrap_or((0, 0))
    }

    /// Committed trims: (partition, log start afterwards, completion time), in invocation order.
    pub fn trims(&self) -> impl Iterator<Item = (Partition, u64, u64)> + '_ {
        self.ops.iter().filter_map(|op| match (&op.kind, &op.outcome, op.completed_at) {
            (OpKind::Trim { partition, .. }, Outcome::TrimOk { log_start }, Some(at)) => {
                Some((*partition, *log_start, at))
            }
            _ => None,
        })
    }

    /// Every (partition, offset, value) observation: polls, final reads and — when acks promise
    /// offsets — acknowledged sends. `source` names where each came from.
    pub fn observations(&self) -> Vec<(Partition, u64, &str, String)> {
        let mut out = Vec::new();
        if self.acks_promise_offsets {
            for (process, p, v, o) in self.acked_sends() {
                out.push((p, o, v, format!("ack to process {process}")));
            }
        }
        for (process, p, _, records) in self.polls() {
            for (o, v) in records {
                out.push((p, *o, v.as_str(), format!("poll by process {process}")));
            }
        }
        for (p, records) in &self.final_reads {
            for (o, v) in records {
                out.push((*p, *o, v.as_str(), "final read".to_string()));
            }
        }
        out
    }
}

/// A history being recorded by concurrent client tasks. Cheap to clone (shared).
#[derive(Clone, Default)]
pub struct Recorder {
    inner: Arc<Mutex<History>>,
}

impl Recorder {
    /// A recorder for a run whose acknowledgements do (`true`) or do not promise offsets.
    pub fn new(acks_promise_offsets: bool) -> Self {
        Self { inner: Arc::new(Mutex::new(History::new(acks_promise_offsets))) }
    }

    fn lock(&self) -> MutexGuard<'_, History> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records an invocation; returns its id for [`Recorder::complete`].
    pub fn invoke(&self, process: u32, kind: OpKind) -> usize {
        let mut h = self.lock();
        let id = h.ops.len();
        h.clock += 1;
        let invoked_at = h.clock;
        h.ops.push(Op { id, process, kind, outcome: Outcome::Pending, invoked_at, completed_at: None });
        id
    }

    /// Records how operation `id` ended.
    pub fn complete(&self, id: usize, outcome: Outcome) {
        let mut h = self.lock();
        h.clock += 1;
        let now = h.clock;
        if let Some(op) = h.ops.get_mut(id) {
            op.outcome = outcome;
            op.completed_at = Some(now);
        }
    }

    /// Records the final read of `partition`, which began at offset `start`.
    pub fn final_read(&self, partition: Partition, start: u64, records: Vec<(u64, String)>) {
        let mut h = self.lock();
        h.final_starts.insert(partition, start);
        h.final_reads.insert(partition, records);
    }

    /// Marks the topic compacted (offsets may have gaps where compaction removed records).
    pub fn set_compacted(&self) {
        self.lock().compacted = true;
    }

    /// Notes the highest `clean_to` any replica of `partition` has applied now (kept unless the
    /// previous sample has the same clock and point).
    pub fn sample_cleaning(&self, partition: Partition, clean_to: u64) {
        let mut h = self.lock();
        let clock = h.clock;
        let last = h.cleaning_samples.iter().rev().find(|(_, p, _)| *p == partition);
        if last != Some(&(clock, partition, clean_to)) {
            h.cleaning_samples.push((clock, partition, clean_to));
        }
    }

    /// Records the cleaning point of `partition` after the final reads.
    pub fn final_cleaning_point(&self, partition: Partition, point: (u64, u64)) {
        self.lock().cleaning.insert(partition, point);
    }

    /// Number of operations so far.
    pub fn len(&self) -> usize {
        self.lock().ops.len()
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A copy of the history.
    pub fn snapshot(&self) -> History {
        self.lock().clone()
    }
}

/// Builders for hand-made histories in checker tests.
#[cfg(test)]
pub mod build {
    use super::*;

    /// A history with the given ops (ids assigned in order) and final reads.
    pub fn history(ops: Vec<(u32, OpKind, Outcome)>, finals: Vec<(Partition, Vec<(u64, &str)>)>) -> History {
        let mut h = History::new(true);
        for (id, (process, kind, outcome)) in ops.into_iter().enumerate() {
            // Sequential: each op completes before the next is invoked.
            let invoked_at = 2 * id as u64 + 1;
            h.ops.push(Op { id, process, kind, outcome, invoked_at, completed_at: Some(invoked_at + 1) });
        }
        h.clock = 2 * h.ops.len() as u64;
        for (p, recs) in finals {
            h.final_reads.insert(p, recs.into_iter().map(|(o, v)| (o, v.to_string())).collect());
        }
        h
    }

    /// A send of `v` to partition 0.
    pub fn send(v: &str) -> OpKind {
        OpKind::Send { partition: 0, value: v.into(), key: None, tombstone: false }
    }

    /// A send of record `id` with key `k` to partition 0.
    pub fn send_keyed(id: &str, k: &str) -> OpKind {
        OpKind::Send { partition: 0, value: id.into(), key: Some(k.into()), tombstone: false }
    }

    /// A send of tombstone `id` for key `k` to partition 0.
    pub fn send_tombstone(id: &str, k: &str) -> OpKind {
        OpKind::Send { partition: 0, value: id.into(), key: Some(k.into()), tombstone: true }
    }

    /// Acknowledged at `o`.
    pub fn ok(o: u64) -> Outcome {
        Outcome::SendOk { offset: o }
    }

    /// A poll of partition 0 from `o`.
    pub fn poll(o: u64) -> OpKind {
        OpKind::Poll { partition: 0, offset: o }
    }

    /// A poll result.
    pub fn read(recs: &[(u64, &str)]) -> Outcome {
        Outcome::PollOk { records: recs.iter().map(|(o, v)| (*o, v.to_string())).collect() }
    }

    /// A trim of partition 0 below `before`.
    pub fn trim(before: u64) -> OpKind {
        OpKind::Trim { partition: 0, before }
    }

    /// A committed trim.
    pub fn trimmed(log_start: u64) -> Outcome {
        Outcome::TrimOk { log_start }
    }

    /// Unknown outcome.
    pub fn info() -> Outcome {
        Outcome::Info("timeout".into())
    }
}
