//! The classic engine's deadlines: one queue for every group's join, sync, session, pending-member
//! and persist-retry deadlines.
//!
//! The queue holds **at most one entry per (group, kind)**: arming a deadline that is already
//! queued moves it (the old entry is removed), and the engine cancels the entries of members and
//! member ids that go away. So its size follows the deadlines that exist — a few per group plus
//! one per member and per member id handed out — never the request rate: a member heartbeating a
//! hundred thousand times still has one entry. A deadline the engine clears without cancelling
//! (a join phase that completes early, a session paused while its member is parked) leaves its one
//! entry behind; the engine checks every entry against the deadline the group holds when it comes
//! due and skips it unless they are equal (a *stale* entry).

use std::collections::{BTreeMap, BTreeSet};

/// What a deadline is for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum TimerKind {
    /// The group's join phase ends.
    Join,
    /// The group's members must have synced.
    Sync,
    /// A member's session ends.
    Session(String),
    /// A member id handed out with `MEMBER_ID_REQUIRED` expires unless used.
    Pending(String),
    /// Storing that the group became empty failed: try again.
    EmptyRetry,
}

/// A deadline: when, which group, what for.
pub(super) type Deadline = (i64, String, TimerKind);

/// Every queued deadline, earliest first (stale ones included), at most one per (group, kind).
#[derive(Debug, Default)]
pub(super) struct Timers {
    queue: BTreeSet<Deadline>,
    /// When each queued (group, kind) is due: the key to its entry in `queue`.
    queued: BTreeMap<(String, TimerKind), i64>,
}

impl Timers {
    /// Arms `kind` of `group_id` at `at_ms`, replacing the entry it had.
    pub(super) fn arm(&mut self, at_ms: i64, group_id: &str, kind: TimerKind) {
        let key = (group_id.to_string(), kind);
        match self.queued.insert(key.clone(), at_ms) {
            Some(old_ms) if old_ms == at_ms => {}
            Some(old_ms) => {
                let (group_id, kind) = key;
                self.queue.remove(&(old_ms, group_id.clone(), kind.clone()));
                self.queue.insert((at_ms, group_id, kind));
            }
            None => {
                let (group_id, kind) = key;
                self.queue.insert((at_ms, group_id, kind));
            }
        }
    }

    /// Removes the entry of `kind` of `group_id`, if queued.
    pub(super) fn cancel(&mut self, group_id: &str, kind: TimerKind) {
        let key = (group_id.to_string(), kind);
        if let Some(at_ms) = self.queued.remove(&key) {
            let (group_id, kind) = key;
            self.queue.remove(&(at_ms, group_id, kind));
        }
    }

    /// The earliest entry.
    pub(super) fn peek(&self) -> Option<&Deadline> {
        self.queue.first()
    }

    /// Drops the earliest entry.
    pub(super) fn pop(&mut self) -> Option<Deadline> {
        let (at_ms, group_id, kind) = self.queue.pop_first()?;
        let key = (group_id, kind);
        self.queued.remove(&key);
        let (group_id, kind) = key;
        Some((at_ms, group_id, kind))
    }

    /// Takes every entry due at `now_ms`, earliest first.
    pub(super) fn due(&mut self, now_ms: i64) -> Vec<Deadline> {
        let mut due = Vec::new();
        while self.peek().is_some_and(|(at, _, _)| *at <= now_ms) {
            due.extend(self.pop());
        }
        due
    }

    /// Number of entries (stale ones included).
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.queue.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_come_due_in_order() {
        let mut t = Timers::default();
        t.arm(30, "g", TimerKind::Sync);
        t.arm(10, "g", TimerKind::Session("a".into()));
        t.arm(20, "h", TimerKind::Join);
        assert_eq!(t.peek().map(|d| d.0), Some(10));
        assert!(t.due(5).is_empty());
        let due = t.due(20);
        assert_eq!(due.iter().map(|d| d.0).collect::<Vec<_>>(), [10, 20]);
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn arming_again_moves_the_one_entry_and_cancel_removes_it() {
        let mut t = Timers::default();
        for at_ms in (0..1_000).rev() {
            t.arm(at_ms, "g", TimerKind::Session("a".into()));
        }
        t.arm(500, "g", TimerKind::Session("b".into()));
        assert_eq!(t.len(), 2, "one entry per member, however often it is armed");
        assert_eq!(t.peek().map(|d| d.0), Some(0), "moved earlier");
        t.arm(700, "g", TimerKind::Session("a".into()));
        assert_eq!(t.peek().map(|d| d.0), Some(500), "and later");
        t.cancel("g", TimerKind::Session("b".into()));
        t.cancel("g", TimerKind::Pending("never armed".into()));
        assert_eq!(t.due(1_000), [(700, "g".to_string(), TimerKind::Session("a".into()))]);
        assert_eq!(t.len(), 0);
        t.arm(5, "g", TimerKind::Session("a".into()));
        assert_eq!(t.len(), 1, "popped entries can be armed again");
    }
}
