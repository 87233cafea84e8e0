//! Deliberate bugs, for proving the simulation's checkers can fail.
//!
//! Each [`Mutation`] breaks one guarantee at one site in node or client code. The simulation switches one
//! on for a run and expects its checkers to report violations. In a normal build
//! [`active`] is a constant `false`, so the mutated branches are compiled out of the real
//! server.

/// A deliberately broken guarantee.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mutation {
    /// Report log appends as flushed before the sync (acknowledge before durable).
    AckBeforeSync,
    /// Serve fetches up to the log end instead of the high watermark.
    ReadAboveHw,
    /// A follower keeps its divergent log tail instead of truncating it.
    SkipTruncate,
    /// Idempotent producer deduplication is off (a retried batch is appended again).
    NoDedupe,
    /// A state partition's snapshot (a coordinator's state) carries no state.
    EmptyStateSnapshot,
    /// Fetches serve records below the log start offset (deleted records stay readable).
    ServeBelowLogStart,
    /// A record partition purges its log at its snapshot, not below its log start offset
    /// (retained records are deleted).
    PurgeAheadOfLogStart,
    /// A compacted partition compacts its whole log, above its cleaning point, its snapshot
    /// and the high watermark (records that are not superseded below the cleaning point go).
    CompactAboveHw,
    /// A consumer group's coordinator hands a member its target partitions at once, even while
    /// another member still owns them (two owners of one partition).
    DoubleAssign,
    /// A consumer commits what it has fetched, not what `poll` has returned: records still
    /// buffered count as processed, so a crash skips them.
    CommitBeforeProcess,
    /// A transaction coordinator does not bump a v2 producer's epoch at `EndTxn` (the
    /// KAFKA-17754 case): a late or retried batch of one transaction can land in the next.
    NoEpochBump,
    /// A partition's last stable offset is one past the first offset of its oldest open
    /// transaction: `read_committed` readers see that transaction's first record early.
    LsoOffByOne,
    /// A group's partition treats a transaction's abort marker as a commit: offsets committed
    /// in an aborted transaction become the group's (its input is skipped, its output dropped).
    TxnOffsetsOnAbort,
    /// A transaction coordinator removes an idle transactional id even while its transaction is
    /// open or its markers are being written: nothing then finishes that transaction.
    ExpireOpenTransactions,
    /// A leader counts a follower as holding a request's entries without asking it (the probe
    /// that replaces resending what the follower may already hold answers "holds" unasked).
    ProbeClaimsAll,
    /// A full producer table forgets producers however recently they wrote (a least recently
    /// used table), so a retry of a batch stored just before is stored again, or refused as
    /// from an unknown producer although it was stored.
    EvictActiveProducers,
    /// A consumer group's coordinator answers `FetchOffsets` from its own state without
    /// confirming that it still leads: a deposed coordinator that has not noticed yet answers
    /// an offset its successor has moved past.
    StaleOffsetsRead,
    /// A partition lets a marker decide whatever transaction of its producer is open, even when
    /// the transaction it names was decided here already: a late copy of one transaction's
    /// marker commits or aborts the producer's next transaction.
    RepeatedMarkerDecides,
    /// A partition takes the first batch of a v2 producer's next transaction while the previous
    /// one is still open there (its marker not yet written): the batch joins the previous
    /// transaction and is decided with it.
    BatchBeforeMarker,
    /// A group's coordinator takes the offsets of a v2 producer's next transaction before the
    /// marker of the decided one, still being written: the decided transaction's offsets,
    /// pending in the group, are dropped as orphaned although it commits.
    GroupOffsetsBeforeMarker,
    /// A transaction coordinator answers `DescribeTransactions` and `ListTransactions` from
    /// its own state without confirming that it still leads: a deposed coordinator shows the
    /// transaction its successor has moved past.
    StaleTransactionsRead,
    /// A classic group's coordinator answers a SyncGroup with the member's assignment of the
    /// previous generation instead of the one the leader just gave it: two members of one
    /// generation are handed the same partitions.
    StaleSyncAssignment,
    /// A subscription pattern matches a topic whose name merely contains a match, not only one
    /// it matches whole: a member subscribed by the pattern `grouped` is assigned `grouped-decoy`
    /// too.
    UnanchoredPattern,
    /// A partition's leader acquires records for a share group in its own memory only, without
    /// a replicated entry: a failover forgets the deliveries (counts repeat, locks vanish).
    ShareAcquireUnreplicated,
    /// A share partition's lock expiry ignores renewals: the leader ends a lock at its first
    /// deadline and the expiry applies whatever the lock's deadline is now.
    ExpiryIgnoresRenewal,
    /// A share group acknowledgement whose lock has run out is applied anyway while its member
    /// still holds the record (the expiry not yet applied).
    LateAckApplied,
    /// A share partition's dead-letter writer marks records done before their copies are
    /// stored: a copy that then fails (its partition unreachable, a leader change) is lost.
    DeadLetteredBeforeCopy,
}

impl Mutation {
    /// Every mutation.
    pub const ALL: [Mutation; 27] = [
        Mutation::AckBeforeSync,
        Mutation::ReadAboveHw,
        Mutation::SkipTruncate,
        Mutation::NoDedupe,
        Mutation::EmptyStateSnapshot,
        Mutation::ServeBelowLogStart,
        Mutation::PurgeAheadOfLogStart,
        Mutation::CompactAboveHw,
        Mutation::DoubleAssign,
        Mutation::CommitBeforeProcess,
        Mutation::NoEpochBump,
        Mutation::LsoOffByOne,
        Mutation::TxnOffsetsOnAbort,
        Mutation::ExpireOpenTransactions,
        Mutation::ProbeClaimsAll,
        Mutation::EvictActiveProducers,
        Mutation::StaleOffsetsRead,
        Mutation::RepeatedMarkerDecides,
        Mutation::BatchBeforeMarker,
        Mutation::GroupOffsetsBeforeMarker,
        Mutation::StaleTransactionsRead,
        Mutation::StaleSyncAssignment,
        Mutation::UnanchoredPattern,
        Mutation::ShareAcquireUnreplicated,
        Mutation::ExpiryIgnoresRenewal,
        Mutation::LateAckApplied,
        Mutation::DeadLetteredBeforeCopy,
    ];

    /// The name used on the command line (`chaos/run --mutation NAME`).
    pub fn name(self) -> &'static str {
        match self {
            Mutation::AckBeforeSync => "ack-before-sync",
            Mutation::ReadAboveHw => "read-above-hw",
            Mutation::SkipTruncate => "skip-truncate",
            Mutation::NoDedupe => "no-dedupe",
            Mutation::EmptyStateSnapshot => "empty-state-snapshot",
            Mutation::ServeBelowLogStart => "serve-below-log-start",
            Mutation::PurgeAheadOfLogStart => "purge-ahead-of-log-start",
            Mutation::CompactAboveHw => "compact-above-hw",
            Mutation::DoubleAssign => "double-assign",
            Mutation::CommitBeforeProcess => "commit-before-process",
            Mutation::NoEpochBump => "no-epoch-bump",
            Mutation::LsoOffByOne => "lso-off-by-one",
            Mutation::TxnOffsetsOnAbort => "txn-offsets-on-abort",
            Mutation::ExpireOpenTransactions => "expire-open-transactions",
            Mutation::ProbeClaimsAll => "probe-claims-all",
            Mutation::EvictActiveProducers => "evict-active-producers",
            Mutation::StaleOffsetsRead => "stale-offsets-read",
            Mutation::RepeatedMarkerDecides => "repeated-marker-decides",
            Mutation::BatchBeforeMarker => "batch-before-marker",
            Mutation::GroupOffsetsBeforeMarker => "group-offsets-before-marker",
            Mutation::StaleTransactionsRead => "stale-transactions-read",
            Mutation::StaleSyncAssignment => "stale-sync-assignment",
            Mutation::UnanchoredPattern => "unanchored-pattern",
            Mutation::ShareAcquireUnreplicated => "share-acquire-unreplicated",
            Mutation::ExpiryIgnoresRenewal => "expiry-ignores-renewal",
            Mutation::LateAckApplied => "late-ack-applied",
            Mutation::DeadLetteredBeforeCopy => "dead-lettered-before-copy",
        }
    }

    /// Parses a command-line name.
    pub fn from_name(name: &str) -> Option<Mutation> {
        Self::ALL.into_iter().find(|m| m.name() == name)
    }

    #[cfg_attr(not(madsim), allow(dead_code))]
    fn bit(self) -> u32 {
        1 << (self as u32)
    }
}

#[cfg(madsim)]
static ACTIVE: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// Switches the mutations of this simulation run (simulation builds only).
#[cfg(madsim)]
pub fn set(mutations: &[Mutation]) {
    let bits = mutations.iter().fold(0u32, |acc, m| acc | m.bit());
    ACTIVE.store(bits, std::sync::atomic::Ordering::Relaxed);
}

/// True when `m` is switched on. Always `false` outside the simulation.
#[inline(always)]
pub fn active(m: Mutation) -> bool {
    #[cfg(madsim)]
    {
        ACTIVE.load(std::sync::atomic::Ordering::Relaxed) & m.bit() != 0
    }
    #[cfg(not(madsim))]
    {
        let _ = m;
        false
    }
}
