//! Share groups, client-visible: what the members of one share group were handed and how their
//! acknowledgements were answered (docs/queues.md).
//!
//! Times are the cluster's clock in ms: a delivery's acquisition time is its lock deadline minus
//! the lock duration (both from the leader), an acknowledgement's `sent` and `returned` times are
//! the member's clock around the request — the leader applied it in between. The simulation has
//! one clock, so the two compare.
//!
//! * **Counts** ([`counts`]): a record's delivery counts, in the order it was acquired, go up
//!   (a failover or restart never resets or repeats one) and never pass the delivery limit.
//! * **Done is done** ([`redelivered_after_done`]): a record whose accept or reject was applied
//!   is never acquired again.
//! * **Delays** ([`delivered_early`]): a record released with a delay is not acquired again
//!   before the delay ends.
//! * **One holder** ([`lock_ended_early`]): while a member's lock on a record runs (its deadline,
//!   moved by the renewals applied), nobody else acquires the record — unless the member let it
//!   go first (an accept, release or reject it sent before).
//! * **Late acknowledgements** ([`late_ack_applied`]): an acknowledgement sent after its lock's
//!   deadline is refused and changes nothing.
//! * **Dead letters** ([`dead_letters`], once healed and every record done): the dead-letter
//!   topic holds each record at most once; every record whose reject was applied is there, and
//!   every one whose last allowed attempt (delivered at the limit) ended without an accept that
//!   was applied or may have been; none whose accept was applied is; a copy for running out of
//!   attempts says the limit.

use std::collections::BTreeMap;

use super::Violation;

/// One record a member was handed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivered {
    /// Which member (the scenario's numbering).
    pub member: usize,
    /// The record's partition.
    pub partition: u32,
    /// The record's offset.
    pub offset: u64,
    /// Its delivery count, as the leader answered it.
    pub count: u16,
    /// When the leader acquired it.
    pub acquired_ms: i64,
    /// When the lock runs out.
    pub lock_until_ms: i64,
}

/// How a member acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckWhat {
    /// Done.
    Accept,
    /// Again, after `delay_ms`.
    Release {
        /// The delay asked.
        delay_ms: u64,
    },
    /// Given up.
    Reject,
    /// The lock starts over.
    Renew,
}

/// What became of an acknowledgement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckOutcome {
    /// Applied (not refused).
    Applied,
    /// Refused: not held, or the lock had run out.
    Refused,
    /// Not known (the answer was lost, or the request went on after a leader change).
    Unknown,
}

/// One acknowledgement of a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acked {
    /// The delivery it acknowledges (an index into the deliveries).
    pub delivery: usize,
    /// How.
    pub what: AckWhat,
    /// When the member sent it.
    pub sent_ms: i64,
    /// When the member had the answer.
    pub returned_ms: i64,
    /// The answer.
    pub outcome: AckOutcome,
}

type Key = (u32, u64);

fn key(d: &Delivered) -> Key {
    (d.partition, d.offset)
}

fn violation(checker: &'static str, detail: String) -> Violation {
    Violation { checker, detail }
}

/// Per record, its deliveries in acquisition order (indices into `deliveries`).
fn by_record(deliveries: &[Delivered]) -> BTreeMap<Key, Vec<usize>> {
    let mut out: BTreeMap<Key, Vec<usize>> = BTreeMap::new();
    for (i, d) in deliveries.iter().enumerate() {
        out.entry(key(d)).or_default().push(i);
    }
    for list in out.values_mut() {
        list.sort_by_key(|i| (deliveries[*i].acquired_ms, deliveries[*i].count));
    }
    out
}

/// Delivery counts that did not go up from one acquisition to the next, or passed `limit`.
pub fn counts(deliveries: &[Delivered], limit: u16) -> Vec<Violation> {
    let mut out = Vec::new();
    for ((p, o), list) in by_record(deliveries) {
        let mut previous: Option<&Delivered> = None;
        for d in list.iter().map(|i| &deliveries[*i]) {
            if d.count > limit || d.count == 0 {
                out.push(violation("share-count", format!("{p}/{o} delivered with count {} (limit {limit})", d.count)));
            }
            if let Some(prev) = previous {
                if d.count <= prev.count {
                    out.push(violation(
                        "share-count",
                        format!(
                            "{p}/{o}: delivery count {} to member {} at {} after count {} to member {} at {}: an \
                             attempt was lost",
                            d.count, d.member, d.acquired_ms, prev.count, prev.member, prev.acquired_ms
                        ),
                    ));
                }
            }
            previous = Some(d);
        }
    }
    out
}

/// Acquisitions after an applied accept or reject of the record.
pub fn redelivered_after_done(deliveries: &[Delivered], acks: &[Acked]) -> Vec<Violation> {
    let mut out = Vec::new();
    let records = by_record(deliveries);
    for a in acks.iter().filter(|a| a.outcome == AckOutcome::Applied) {
        if !matches!(a.what, AckWhat::Accept | AckWhat::Reject) {
            continue;
        }
        let done = &deliveries[a.delivery];
        for later in records[&key(done)].iter().map(|i| &deliveries[*i]) {
            if later.acquired_ms > a.returned_ms {
                out.push(violation(
                    "share-done-again",
                    format!(
                        "{}/{}: {:?} by member {} applied by {}, yet acquired again by member {} at {}",
                        done.partition,
                        done.offset,
                        a.what,
                        done.member,
                        a.returned_ms,
                        later.member,
                        later.acquired_ms
                    ),
                ));
            }
        }
    }
    out
}

/// Acquisitions of a released record before its delay ended.
pub fn delivered_early(deliveries: &[Delivered], acks: &[Acked]) -> Vec<Violation> {
    let mut out = Vec::new();
    let records = by_record(deliveries);
    for a in acks.iter().filter(|a| a.outcome == AckOutcome::Applied) {
        let AckWhat::Release { delay_ms } = a.what else { continue };
        let released = &deliveries[a.delivery];
        let not_before = a.sent_ms.saturating_add(delay_ms as i64);
        for later in records[&key(released)].iter().map(|i| &deliveries[*i]) {
            if later.acquired_ms > a.returned_ms && later.acquired_ms < not_before {
                out.push(violation(
                    "share-early",
                    format!(
                        "{}/{}: released by member {} at {} with a delay of {delay_ms} ms, acquired again by member {} \
                         at {} ({} ms early)",
                        released.partition,
                        released.offset,
                        released.member,
                        a.sent_ms,
                        later.member,
                        later.acquired_ms,
                        not_before - later.acquired_ms
                    ),
                ));
            }
        }
    }
    out
}

/// The acknowledgements of each delivery, in the order sent.
fn acks_of(acks: &[Acked]) -> BTreeMap<usize, Vec<&Acked>> {
    let mut out: BTreeMap<usize, Vec<&Acked>> = BTreeMap::new();
    for a in acks {
        out.entry(a.delivery).or_default().push(a);
    }
    for list in out.values_mut() {
        list.sort_by_key(|a| a.sent_ms);
    }
    out
}

/// Acquisitions of a record by anyone while a member's lock on it still ran and the member had
/// not let it go. The lock runs at least to its deadline at acquisition, and to `lock_ms` past
/// the sending of each renewal that was applied.
pub fn lock_ended_early(deliveries: &[Delivered], acks: &[Acked], lock_ms: i64) -> Vec<Violation> {
    let mut out = Vec::new();
    let records = by_record(deliveries);
    let acks = acks_of(acks);
    for (i, held) in deliveries.iter().enumerate() {
        let mine = acks.get(&i).map(Vec::as_slice).unwrap_or_default();
        let let_go = mine
            .iter()
            .filter(|a| a.what != AckWhat::Renew && a.outcome != AckOutcome::Refused)
            .map(|a| a.sent_ms)
            .min()
            .unwrap_or(i64::MAX);
        let deadline = mine
            .iter()
            .filter(|a| a.what == AckWhat::Renew && a.outcome == AckOutcome::Applied && a.sent_ms < let_go)
            .map(|a| a.sent_ms + lock_ms)
            .fold(held.lock_until_ms, i64::max);
        for other in records[&key(held)].iter().map(|j| &deliveries[*j]) {
            if other.acquired_ms > held.acquired_ms && other.acquired_ms < deadline && other.acquired_ms < let_go {
                let said: Vec<String> = mine
                    .iter()
                    .map(|a| format!("{:?} sent {} back {} {:?}", a.what, a.sent_ms, a.returned_ms, a.outcome))
                    .collect();
                out.push(violation(
                    "share-lock-ended-early",
                    format!(
                        "{}/{}: member {} (acquired at {}, count {}, lock until {}; then {}) held it until at least \
                         {deadline}, yet member {} acquired it at {} (count {})",
                        held.partition,
                        held.offset,
                        held.member,
                        held.acquired_ms,
                        held.count,
                        held.lock_until_ms,
                        said.join(", "),
                        other.member,
                        other.acquired_ms,
                        other.count
                    ),
                ));
            }
        }
    }
    out
}

/// Acknowledgements sent after their lock's deadline (the latest it can have been, renewals
/// counted from their answers) that were applied.
pub fn late_ack_applied(deliveries: &[Delivered], acks: &[Acked], lock_ms: i64) -> Vec<Violation> {
    let mut out = Vec::new();
    for (i, list) in acks_of(acks) {
        let held = &deliveries[i];
        let mut latest_deadline = held.lock_until_ms;
        for a in list {
            if a.outcome == AckOutcome::Applied && a.sent_ms > latest_deadline {
                out.push(violation(
                    "share-late-ack",
                    format!(
                        "{}/{}: member {}'s {:?} sent at {}, after its lock ran out (by {latest_deadline} at the \
                         latest), was applied",
                        held.partition, held.offset, held.member, a.what, a.sent_ms
                    ),
                ));
            }
            if a.what == AckWhat::Renew && a.outcome != AckOutcome::Refused {
                latest_deadline = latest_deadline.max(a.returned_ms + lock_ms);
            }
        }
    }
    out
}

/// A copy found in the dead-letter topic, by its evidence headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeadLetterCopy {
    /// The record's partition.
    pub partition: u32,
    /// Its offset.
    pub offset: u64,
    /// Whether it was rejected (else it ran out of attempts).
    pub rejected: bool,
    /// Its delivery count, as the copy says.
    pub count: u16,
}

/// The dead-letter topic's copies against what members saw (see the module's list).
pub fn dead_letters(deliveries: &[Delivered], acks: &[Acked], limit: u16, copies: &[DeadLetterCopy]) -> Vec<Violation> {
    let mut out = Vec::new();
    let mut found: BTreeMap<Key, usize> = BTreeMap::new();
    for c in copies {
        *found.entry((c.partition, c.offset)).or_default() += 1;
        if !c.rejected && c.count != limit {
            out.push(violation(
                "share-dlq-evidence",
                format!(
                    "{}/{}: copied for running out of attempts at count {} (limit {limit})",
                    c.partition, c.offset, c.count
                ),
            ));
        }
    }
    for ((p, o), n) in &found {
        if *n > 1 {
            out.push(violation("share-dlq-twice", format!("{p}/{o} is in the dead-letter topic {n} times")));
        }
    }
    let acks = acks_of(acks);
    for ((p, o), list) in by_record(deliveries) {
        let acks_on = |i: usize| acks.get(&i).cloned().unwrap_or_default();
        let applied = |i: usize, what: fn(&AckWhat) -> bool| {
            acks_on(i).iter().any(|a| what(&a.what) && a.outcome == AckOutcome::Applied)
        };
        let accepted = list.iter().any(|i| applied(*i, |w| *w == AckWhat::Accept));
        let rejected = list.iter().any(|i| applied(*i, |w| *w == AckWhat::Reject));
        let in_dlq = found.contains_key(&(p, o));
        if accepted && in_dlq {
            out.push(violation("share-dlq-accepted", format!("{p}/{o}: accepted, yet in the dead-letter topic")));
        }
        let last = list.iter().copied().find(|i| deliveries[*i].count == limit);
        let exhausted = last
            .is_some_and(|i| !acks_on(i).iter().any(|a| a.what == AckWhat::Accept && a.outcome != AckOutcome::Refused));
        if (rejected || exhausted) && !accepted && !in_dlq {
            let why = if rejected { "its reject was applied" } else { "its last attempt ended without an accept" };
            out.push(violation("share-dlq-missing", format!("{p}/{o}: {why}, yet it is not in the dead-letter topic")));
        }
    }
    out
}

/// Every client-visible share checker.
pub fn check(deliveries: &[Delivered], acks: &[Acked], limit: u16, lock_ms: i64) -> Vec<Violation> {
    let mut out = counts(deliveries, limit);
    out.extend(redelivered_after_done(deliveries, acks));
    out.extend(delivered_early(deliveries, acks));
    out.extend(lock_ended_early(deliveries, acks, lock_ms));
    out.extend(late_ack_applied(deliveries, acks, lock_ms));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOCK: i64 = 1_000;

    fn d(member: usize, count: u16, at: i64) -> Delivered {
        Delivered { member, partition: 0, offset: 7, count, acquired_ms: at, lock_until_ms: at + LOCK }
    }

    fn ack(delivery: usize, what: AckWhat, sent: i64, outcome: AckOutcome) -> Acked {
        Acked { delivery, what, sent_ms: sent, returned_ms: sent + 5, outcome }
    }

    #[test]
    fn a_correct_history_passes() {
        // Member 0 renews, then releases with a delay; member 1 gets it after the delay and
        // accepts; a late accept by member 0 was refused.
        let deliveries = vec![d(0, 1, 0), d(1, 2, 1_800)];
        let acks = vec![
            ack(0, AckWhat::Renew, 800, AckOutcome::Applied),
            ack(0, AckWhat::Release { delay_ms: 300 }, 1_400, AckOutcome::Applied),
            ack(1, AckWhat::Accept, 1_900, AckOutcome::Applied),
            ack(0, AckWhat::Accept, 2_000, AckOutcome::Refused),
        ];
        assert_eq!(check(&deliveries, &acks, 3, LOCK), vec![]);
    }

    #[test]
    fn each_broken_guarantee_is_found() {
        let only = |v: Vec<Violation>, checker: &str| {
            assert!(!v.is_empty() && v.iter().all(|x| x.checker == checker), "{v:?}");
        };
        // A count that repeats after a failover; one past the limit.
        only(counts(&[d(0, 1, 0), d(1, 1, 2_000)], 3), "share-count");
        only(counts(&[d(0, 4, 0)], 3), "share-count");
        // Acquired again after an applied accept.
        let deliveries = [d(0, 1, 0), d(1, 2, 600)];
        only(
            redelivered_after_done(&deliveries, &[ack(0, AckWhat::Accept, 100, AckOutcome::Applied)]),
            "share-done-again",
        );
        // Acquired 200 ms into a 500 ms delay.
        let release = ack(0, AckWhat::Release { delay_ms: 500 }, 400, AckOutcome::Applied);
        only(delivered_early(&deliveries, &[release]), "share-early");
        // A renewed lock ended at its first deadline: member 1 acquired it at 1,100.
        let deliveries = [d(0, 1, 0), d(1, 2, 1_100)];
        let renew = ack(0, AckWhat::Renew, 700, AckOutcome::Applied);
        only(lock_ended_early(&deliveries, &[renew], LOCK), "share-lock-ended-early");
        // Acquired by another member within the first lock, nothing let go.
        only(lock_ended_early(&[d(0, 1, 0), d(1, 2, 500)], &[], LOCK), "share-lock-ended-early");
        // An accept sent 100 ms after the deadline, applied.
        let late = ack(0, AckWhat::Accept, LOCK + 100, AckOutcome::Applied);
        only(late_ack_applied(&[d(0, 1, 0)], &[late], LOCK), "share-late-ack");
    }

    #[test]
    fn the_dead_letter_topic_holds_exactly_the_given_up_records_once() {
        let copy = |rejected, count| DeadLetterCopy { partition: 0, offset: 7, rejected, count };
        let only = |v: Vec<Violation>, checker: &str| {
            assert!(!v.is_empty() && v.iter().all(|x| x.checker == checker), "{v:?}");
        };
        let reject = [ack(0, AckWhat::Reject, 100, AckOutcome::Applied)];
        assert_eq!(dead_letters(&[d(0, 1, 0)], &reject, 3, &[copy(true, 1)]), vec![]);
        only(dead_letters(&[d(0, 1, 0)], &reject, 3, &[]), "share-dlq-missing");
        only(dead_letters(&[d(0, 1, 0)], &reject, 3, &[copy(true, 1), copy(true, 1)]), "share-dlq-twice");
        // Three attempts, the last one's lock ran out: in the topic, at the limit.
        let exhausted = [d(0, 1, 0), d(1, 2, 1_500), d(0, 3, 3_000)];
        assert_eq!(dead_letters(&exhausted, &[], 3, &[copy(false, 3)]), vec![]);
        only(dead_letters(&exhausted, &[], 3, &[]), "share-dlq-missing");
        only(dead_letters(&exhausted, &[], 3, &[copy(false, 2)]), "share-dlq-evidence");
        // Accepted on its last attempt (or maybe: the answer was lost): not missing; applied and
        // in the topic: wrong.
        let accept = |outcome| [ack(2, AckWhat::Accept, 3_100, outcome)];
        assert_eq!(dead_letters(&exhausted, &accept(AckOutcome::Unknown), 3, &[]), vec![]);
        only(dead_letters(&exhausted, &accept(AckOutcome::Applied), 3, &[copy(false, 3)]), "share-dlq-accepted");
    }
}
