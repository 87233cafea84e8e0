//! The classic engine's deadlines: one queue for every group's join, sync, session and
//! pending-member deadlines.
//!
//! Arming a deadline pushes an entry; nothing is ever removed when a deadline moves or is
//! cancelled. Instead the engine checks each entry against the deadline the group holds now when
//! it comes due, and skips it unless they are equal (a *stale* entry). So re-arming a session on
//! every heartbeat is one push, and the queue holds at most a few entries per member per session
//! timeout.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

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
}

/// A deadline: when, which group, what for.
pub(super) type Deadline = (i64, String, TimerKind);

/// Every armed deadline, earliest first (stale ones included).
#[derive(Debug, Default)]
pub(super) struct Timers {
    queue: BinaryHeap<Reverse<Deadline>>,
}

impl Timers {
    /// Arms `kind` of `group_id` at `at_ms`.
    pub(super) fn arm(&mut self, at_ms: i64, group_id: &str, kind: TimerKind) {
        self.queue.push(Reverse((at_ms, group_id.to_string(), kind)));
    }

    /// The earliest entry.
    pub(super) fn peek(&self) -> Option<&Deadline> {
        self.queue.peek().map(|Reverse(d)| d)
    }

    /// Drops the earliest entry.
    pub(super) fn pop(&mut self) -> Option<Deadline> {
        self.queue.pop().map(|Reverse(d)| d)
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
}
