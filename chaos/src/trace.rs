//! [`Trace`]: what a simulation run observed, reduced to a hash. Two runs of one seed must give
//! the same hash; a difference means something escaped the determinism seam.

use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex};

/// An append-only record of observations. Cheap to clone (shared).
#[derive(Clone, Default)]
pub struct Trace {
    events: Arc<Mutex<Vec<String>>>,
}

impl Trace {
    /// An empty trace.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records one observation.
    pub fn record(&self, event: impl Into<String>) {
        self.events.lock().unwrap_or_else(|p| p.into_inner()).push(event.into());
    }

    /// Every observation, in order.
    pub fn events(&self) -> Vec<String> {
        self.events.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Number of observations.
    pub fn len(&self) -> usize {
        self.events.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A hash of every observation in order (SipHash with fixed keys: stable across processes).
    pub fn hash(&self) -> u64 {
        let mut h = DefaultHasher::new();
        for e in self.events.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            e.hash(&mut h);
        }
        h.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_events_same_hash_different_events_differ() {
        let (a, b, c) = (Trace::new(), Trace::new(), Trace::new());
        for t in [&a, &b] {
            t.record("ack p0@0");
            t.record("leader 2");
        }
        c.record("leader 2");
        c.record("ack p0@0");
        assert_eq!(a.hash(), b.hash());
        assert_ne!(a.hash(), c.hash());
    }
}
