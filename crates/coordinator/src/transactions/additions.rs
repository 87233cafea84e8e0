//! [`Additions`]: the partitions and groups a transaction gains at the same moment, recorded
//! with one write.
//!
//! A producer's first batches of a transaction leave for many partitions at once, and under
//! transactions v2 each partition's leader asks the coordinator to add its partition. Every
//! addition is a compare-and-set write on the transactional id's record, so sixteen of them at
//! once would be sixteen writes racing each other, most losing and deciding again. Instead the
//! additions of one transactional id queue up: whoever holds the id's turn takes everything
//! queued so far, writes it as one addition, and answers each of them; what arrives meanwhile
//! goes in the next write. A write that begins a transaction first waits `GATHER` (half a
//! millisecond), as the first batches' leaders ask within a moment of each other: usually one
//! write instead of sixteen, and no lost races. A caller is answered as soon as a write holds
//! its addition, whoever holds the turn.
//!
//! Only additions from the same producer id and epoch, speaking the same protocol, are merged
//! (anything else — a fenced instance, a v1 request — gets the answer its own request would).
//! Partitions and consumer groups (`AddOffsetsToTxn`) merge alike; when a merged write is
//! refused as invalid (too many groups in the transaction), each of its additions is written
//! on its own, so that refusal reaches only the request that caused it.
//!
//! A v2 producer's partitions and groups need not wait for the previous transaction's
//! markers: the turn holder writes them at once, beginning the next transaction beside the
//! decided one (`finishing`), and goes on writing those that arrive meanwhile. What must wait
//! (v1: [`transitions::must_wait`]) stays queued; a turn holder whose own addition is among
//! those waits the markers out (at most `PREPARED_WAIT`) and takes the queue — a producer
//! begins its next transaction as soon as `EndTxn` is answered, so what it adds arrives while
//! those markers are written, and becomes one write instead of a lone first one and the rest.
//! While it waits, v2 additions that arrive are still written at once. A turn holder whose
//! addition is answered passes the turn on.
//!
//! Leader-local and in memory: nothing here survives a restart or matters to another replica;
//! what is written is decided from the replicated record as before.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rill_broker::StatePartition;
use rill_rt::sync::oneshot;

use super::{add_once, prepared_deadline, transitions, wait_while, TransactionsMachine, TxnProtocol, TxnState};
use crate::error::{CoordinatorError, Result};
use crate::groups::assignor::TopicPartitions;

/// What one request adds to a transaction.
#[derive(Debug, Clone)]
pub(super) struct Wanted {
    /// The producer id and epoch asking.
    pub producer: (i64, i16),
    /// The protocol it speaks.
    pub protocol: TxnProtocol,
    /// Partitions to add.
    pub partitions: TopicPartitions,
    /// Consumer groups to add.
    pub groups: Vec<String>,
}

impl Wanted {
    /// Whether `other` may be written in the same addition as `self`.
    fn merges_with(&self, other: &Wanted) -> bool {
        self.producer == other.producer && self.protocol == other.protocol
    }

    /// Adds `other`'s partitions and groups to `self`'s.
    fn absorb(&mut self, other: &Wanted) {
        for (topic, ps) in &other.partitions {
            self.partitions.entry(topic.clone()).or_default().extend(ps.iter().copied());
        }
        for g in &other.groups {
            if !self.groups.contains(g) {
                self.groups.push(g.clone());
            }
        }
    }
}

/// A queued addition and where its answer goes.
struct Queued {
    wanted: Wanted,
    answer: oneshot::Sender<Result<()>>,
}

/// One transactional id's queue.
#[derive(Default)]
struct Queue {
    waiting: Mutex<Vec<Queued>>,
    /// Signalled when an addition is queued (the turn holder may be waiting on a completion).
    arrived: rill_rt::sync::Notify,
    /// Held while one caller writes what was queued.
    turn: rill_rt::sync::Mutex<()>,
}

/// The queues of the transactional ids of one `__transaction_state` partition this node leads
/// (see the module docs): its coordinator shard's, made at election. Across a re-election two
/// shards' queues may serve one id for a moment; each write is a compare-and-set on the id's
/// record, so that costs a retry, never a lost or doubled addition.
#[derive(Default)]
pub struct Additions {
    queues: Mutex<HashMap<String, Arc<Queue>>>,
}

impl std::fmt::Debug for Additions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids = self.queues.lock().map_or(0, |q| q.len());
        f.debug_struct("Additions").field("ids", &ids).finish()
    }
}

impl Additions {
    /// No queues yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records `wanted` in the transaction of `transactional_id` on `partition` (its
    /// coordinator), together with whatever else is queued for that id.
    pub(super) async fn add(
        &self,
        partition: &StatePartition<TransactionsMachine>,
        transactional_id: &str,
        wanted: Wanted,
        timeout: Duration,
    ) -> Result<()> {
        let held = Held::new(self, transactional_id);
        let (tx, mut rx) = oneshot::channel();
        lock(&held.queue.waiting).push(Queued { wanted, answer: tx });
        held.queue.arrived.notify_one();
        // Answered by whoever holds the turn, or take the turn: a holder that waits for a
        // completion on a group's behalf must not hold back the partitions it already wrote.
        let _turn = tokio::select! {
            answer = &mut rx => return answer.unwrap_or_else(|_| Err(interrupted())),
            turn = held.queue.turn.lock() => turn,
        };
        let prepared_until = prepared_deadline(timeout);
        let mut gathered = false;
        loop {
            match rx.try_recv() {
                // This turn's write, or an earlier turn's, answered it: the turn passes on.
                Ok(answer) => return answer,
                Err(oneshot::error::TryRecvError::Closed) => return Err(interrupted()),
                Err(oneshot::error::TryRecvError::Empty) => {}
            }
            if !gathered {
                gathered = true;
                // The first batches of a transaction leave for every partition at once and their
                // leaders ask within a moment of each other: a write that begins the
                // transaction waits that moment, so that it takes them all instead of the first
                // alone and the rest one write later.
                let partitions_queued = lock(&held.queue.waiting).iter().any(|q| eager(&q.wanted));
                if partitions_queued && begins_transaction(partition, transactional_id) {
                    rill_rt::sleep(GATHER).await;
                }
            }
            let arrived = held.queue.arrived.notified();
            // A v2 producer's additions go at once, whatever else is queued: a v1 one queued
            // among them waits for the previous transaction's completion without holding them
            // back — neither those queued now nor those arriving while it waits.
            let at_once = take_where(&held.queue.waiting, eager);
            if !at_once.is_empty() {
                write_all(partition, transactional_id, at_once, prepared_until, timeout).await;
                continue;
            }
            // Only additions that must wait are queued, this caller's among them.
            let (producers, protocol) = {
                let waiting = lock(&held.queue.waiting);
                let producers: Vec<(i64, i16)> = waiting.iter().map(|q| q.wanted.producer).collect();
                // The strictest of what is queued decides whether the turn waits.
                let v1 = waiting.iter().any(|q| q.wanted.protocol == TxnProtocol::V1);
                (producers, if v1 { TxnProtocol::V1 } else { TxnProtocol::V2 })
            };
            tokio::select! {
                // What arrives meanwhile and must wait too joins this write (module docs).
                () = wait_while(partition, transactional_id, &producers, prepared_until, |m| {
                    transitions::must_wait(m, protocol)
                }) => {
                    let queued = std::mem::take(&mut *lock(&held.queue.waiting));
                    write_all(partition, transactional_id, queued, prepared_until, timeout).await;
                }
                // Something arrived: a v2 producer's partitions are written before waiting on.
                () = arrived => {}
            }
        }
    }

    /// Number of transactional ids with additions under way.
    #[cfg(test)]
    fn pending_ids(&self) -> usize {
        lock(&self.queues).len()
    }
}

/// Whether `wanted` is written at once: a v2 producer's partitions and groups (see the module
/// docs).
fn eager(wanted: &Wanted) -> bool {
    wanted.protocol == TxnProtocol::V2
}

/// How long a write that begins a transaction waits for the rest of its first additions.
/// Shorter than one replicated write of the coordinator (about a millisecond on an idle
/// cluster, several under load), which is what the additions arriving just after the first
/// would otherwise wait for.
const GATHER: Duration = Duration::from_micros(500);

/// Whether an addition now would begin the transactional id's next transaction (none is
/// ongoing).
fn begins_transaction(partition: &StatePartition<TransactionsMachine>, transactional_id: &str) -> bool {
    let state = partition.read(|m| m.state().get(transactional_id).map(|r| r.state));
    !matches!(state, Ok(Some(TxnState::Ongoing)))
}

/// Writes `queued` (merged where they may be) and answers each.
async fn write_all(
    partition: &StatePartition<TransactionsMachine>,
    transactional_id: &str,
    queued: Vec<Queued>,
    prepared_until: rill_rt::Instant,
    timeout: Duration,
) {
    for (wanted, parts) in merge(queued) {
        let answer = add_once(partition, transactional_id, &wanted, prepared_until, timeout).await;
        if matches!(answer, Err(CoordinatorError::InvalidRequest(_))) && parts.len() > 1 {
            // One of them made the merged write invalid: each gets its own answer.
            for part in parts {
                let _ = part
                    .answer
                    .send(add_once(partition, transactional_id, &part.wanted, prepared_until, timeout).await);
            }
            continue;
        }
        for part in parts {
            let _ = part.answer.send(answer.clone());
        }
    }
}

/// Takes the queued additions `wanted` picks, in their order; the rest stay queued.
fn take_where(waiting: &Mutex<Vec<Queued>>, wanted: impl Fn(&Wanted) -> bool) -> Vec<Queued> {
    let mut waiting = lock(waiting);
    let (taken, kept): (Vec<Queued>, Vec<Queued>) =
        std::mem::take(&mut *waiting).into_iter().partition(|q| wanted(&q.wanted));
    *waiting = kept;
    taken
}

/// The turn that was writing this addition was abandoned (its request went away).
fn interrupted() -> CoordinatorError {
    CoordinatorError::NotAvailable("the addition was interrupted; retry".into())
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Groups queued additions into writes, in arrival order: consecutive mergeable additions
/// become one (their partitions and groups united), each with the additions it is made of.
fn merge(queued: Vec<Queued>) -> Vec<(Wanted, Vec<Queued>)> {
    let mut writes: Vec<(Wanted, Vec<Queued>)> = Vec::new();
    for q in queued {
        match writes.last_mut() {
            Some((w, parts)) if w.merges_with(&q.wanted) => {
                w.absorb(&q.wanted);
                parts.push(q);
            }
            _ => writes.push((q.wanted.clone(), vec![q])),
        }
    }
    writes
}

/// A caller's hold on its id's queue; the queue is forgotten when its last caller leaves
/// (also when a caller's request is dropped midway).
struct Held<'a> {
    additions: &'a Additions,
    transactional_id: &'a str,
    queue: Arc<Queue>,
}

impl<'a> Held<'a> {
    fn new(additions: &'a Additions, transactional_id: &'a str) -> Self {
        let queue = lock(&additions.queues).entry(transactional_id.to_string()).or_default().clone();
        Self { additions, transactional_id, queue }
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        let mut queues = lock(&self.additions.queues);
        // The map's reference and this one: nobody else is using the queue.
        if Arc::strong_count(&self.queue) == 2 {
            queues.remove(self.transactional_id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wanted(producer: (i64, i16), partitions: &[(&str, u32)], groups: &[&str]) -> Wanted {
        let mut tp = TopicPartitions::new();
        for (t, p) in partitions {
            tp.entry(t.to_string()).or_default().insert(*p);
        }
        Wanted {
            producer,
            protocol: TxnProtocol::V2,
            partitions: tp,
            groups: groups.iter().map(|g| g.to_string()).collect(),
        }
    }

    fn queued(w: Wanted) -> (Queued, oneshot::Receiver<Result<()>>) {
        let (tx, rx) = oneshot::channel();
        (Queued { wanted: w, answer: tx }, rx)
    }

    #[test]
    fn one_producers_partitions_become_one_write() {
        let (a, _ra) = queued(wanted((7, 1), &[("t", 0)], &[]));
        let (b, _rb) = queued(wanted((7, 1), &[("t", 1), ("u", 0)], &[]));
        let (c, _rc) = queued(wanted((7, 1), &[("t", 0)], &[]));
        let writes = merge(vec![a, b, c]);
        assert_eq!(writes.len(), 1);
        let (w, parts) = &writes[0];
        assert_eq!(parts.len(), 3);
        assert_eq!(w.partitions.get("t").map(|s| s.len()), Some(2));
        assert_eq!(w.partitions.get("u").map(|s| s.len()), Some(1));
    }

    #[test]
    fn groups_merge_with_partitions_and_each_group_is_named_once() {
        let (a, _ra) = queued(wanted((7, 1), &[("t", 0)], &["g"]));
        let (b, _rb) = queued(wanted((7, 1), &[("t", 1)], &["g", "h"]));
        let (c, _rc) = queued(wanted((7, 1), &[], &["h"]));
        let writes = merge(vec![a, b, c]);
        assert_eq!(writes.len(), 1);
        let (w, parts) = &writes[0];
        assert_eq!(parts.len(), 3);
        assert_eq!(w.groups, ["g", "h"]);
        assert_eq!(w.partitions.get("t").map(|s| s.len()), Some(2));
        // Each part keeps its own request, for answering on its own.
        assert_eq!(parts[2].wanted.groups, ["h"]);
    }

    #[test]
    fn other_producers_and_protocols_are_written_on_their_own() {
        let (a, _ra) = queued(wanted((7, 1), &[("t", 0)], &[]));
        let (b, _rb) = queued(wanted((7, 0), &[("t", 1)], &[]));
        let (c, _rc) = queued(wanted((7, 0), &[("t", 2)], &["g"]));
        let mut v1 = wanted((7, 1), &[("t", 3)], &[]);
        v1.protocol = TxnProtocol::V1;
        let (d, _rd) = queued(v1);
        let (e, _re) = queued(wanted((7, 1), &[("t", 4)], &[]));
        let (f, _rf) = queued(wanted((7, 1), &[("t", 5)], &[]));
        let writes = merge(vec![a, b, c, d, e, f]);
        let shapes: Vec<(i16, usize, usize)> =
            writes.iter().map(|(w, parts)| (w.producer.1, w.groups.len(), parts.len())).collect();
        assert_eq!(shapes, vec![(1, 0, 1), (0, 1, 2), (1, 0, 1), (1, 0, 2)]);
    }

    #[test]
    fn a_queue_is_forgotten_when_its_last_caller_leaves() {
        let additions = Additions::new();
        let first = Held::new(&additions, "a");
        let second = Held::new(&additions, "a");
        assert_eq!(additions.pending_ids(), 1);
        drop(first);
        assert_eq!(additions.pending_ids(), 1);
        drop(second);
        assert_eq!(additions.pending_ids(), 0);
    }
}
