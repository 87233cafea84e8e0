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
    /// Append `value` (unique in the run) to `partition`.
    Send { partition: Partition, value: String },
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
}

impl History {
    /// An empty history.
    pub fn new(acks_promise_offsets: bool) -> Self {
        Self { acks_promise_offsets, ..Default::default() }
    }

    /// Acknowledged sends: (process, partition, value, offset), in invocation order.
    pub fn acked_sends(&self) -> impl Iterator<Item = (u32, Partition, &str, u64)> {
        self.ops.iter().filter_map(|op| match (&op.kind, &op.outcome) {
            (OpKind::Send { partition, value }, Outcome::SendOk { offset }) => {
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
        OpKind::Send { partition: 0, value: v.into() }
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
