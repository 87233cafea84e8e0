//! Probes: moments in node code the simulation's white-box oracles observe.
//!
//! Some promises can only be checked at the instant a node makes them — "this acks=1 entry is
//! synced in the leader's log *now*" — not when the client hears of it later, because a new
//! leader may legitimately truncate the entry in between. Node code calls [`emit`] at such
//! moments; the simulation registers a hook that inspects the simulated disks synchronously. In
//! a normal build `emit` does nothing and the hook cannot be set.

/// An observed moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// A leader is about to answer acks=1 for records `offset .. offset + count` of `group`.
    LeaderAck {
        /// The answering node.
        node: u64,
        /// The partition's Raft group.
        group: u64,
        /// First offset acknowledged.
        offset: u64,
        /// Records acknowledged.
        count: u32,
    },
}

#[cfg(madsim)]
type Hook = Box<dyn Fn(&Probe) + Send + Sync>;

#[cfg(madsim)]
static HOOK: std::sync::Mutex<Option<Hook>> = std::sync::Mutex::new(None);

/// Installs the simulation's hook (replacing any earlier one).
#[cfg(madsim)]
pub fn set_hook(hook: impl Fn(&Probe) + Send + Sync + 'static) {
    *HOOK.lock().unwrap_or_else(|p| p.into_inner()) = Some(Box::new(hook));
}

/// Reports `probe` to the simulation's hook, if any. Does nothing outside the simulation.
#[inline(always)]
pub fn emit(probe: Probe) {
    #[cfg(madsim)]
    {
        if let Some(hook) = HOOK.lock().unwrap_or_else(|p| p.into_inner()).as_ref() {
            hook(&probe);
        }
    }
    #[cfg(not(madsim))]
    {
        let _ = probe;
    }
}
