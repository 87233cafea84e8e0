//! Helpers shared by Rill's fuzz targets (`fuzz_targets/`, one per decoder family):
//!
//! * [`Counting`]: the global allocator of every target; [`peak_during`] measures the most heap
//!   one call held at once, so a target can assert that no input makes a decoder allocate more
//!   than a small multiple of its own size.
//! * [`fix_batch`]: makes arbitrary bytes carry a right length and CRC, so the fuzzer reaches
//!   the record parser and the decompressors instead of stopping at the checksum.
//!
//! Only Rust allocations are counted: zstd's decoder is C and allocates with `malloc` (its
//! window is capped by `rill_records::compression::ZSTD_MAX_WINDOW_LOG`; libFuzzer's
//! `-malloc_limit_mb`, set by `scripts/fuzz.sh`, catches single huge C allocations).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

/// The system allocator, counting the bytes held and their peak.
pub struct Counting;

// SAFETY: every call is forwarded unchanged to the system allocator; only counters are added.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        CURRENT.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            // Counted as the new block arriving before the old one leaves (a moving realloc
            // holds both for a moment).
            grew(new_size);
            CURRENT.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        p
    }
}

fn grew(size: usize) {
    let now = CURRENT.fetch_add(size, Ordering::Relaxed) + size;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

/// Runs `f` and returns its result and the most heap bytes held at once during it, beyond what
/// was held when it started. (libFuzzer runs one input at a time on one thread.)
pub fn peak_during<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let start = CURRENT.load(Ordering::Relaxed);
    PEAK.store(start, Ordering::Relaxed);
    let r = f();
    (r, PEAK.load(Ordering::Relaxed).saturating_sub(start))
}

/// Rewrites the `batchLength` and CRC fields of a record batch so that they match its bytes
/// (a no-op for inputs too short to hold a header).
pub fn fix_batch(batch: &mut [u8]) {
    if batch.len() < rill_records::BATCH_HEADER_LEN {
        return;
    }
    let length = u32::try_from(batch.len() - 12).unwrap_or(u32::MAX);
    batch[8..12].copy_from_slice(&length.to_be_bytes());
    let crc = crc32c::crc32c(&batch[21..]);
    batch[17..21].copy_from_slice(&crc.to_be_bytes());
}

/// A limit from one input byte: 256 bytes to 1 MiB in powers of two.
pub fn limit_from(byte: u8) -> usize {
    1usize << (8 + usize::from(byte % 13))
}

/// A small cluster's metadata, built through its own commands: three registered nodes, the two
/// internal topics and one client topic `orders` of 3 partitions — what fuzzed commands and
/// requests are applied to and checked against.
pub fn base_cluster() -> rill_meta::MetaState {
    use rill_meta::{MetaCommand, MetaResult, MetaState, NodeInfo, PartitionKind};
    let mut state = MetaState::default();
    let nodes = (1..=3)
        .map(|id| NodeInfo { id, addr: format!("10.0.0.{id}:7001"), internal_addr: format!("10.0.0.{id}:7101"), kafka_addr: String::new() })
        .collect();
    let commands = [
        MetaCommand::RegisterNodes { nodes },
        MetaCommand::CreateTopic {
            name: rill_meta::CONSUMER_OFFSETS_TOPIC.into(),
            topic_id: [1; 16],
            kind: PartitionKind::ConsumerOffsets,
            partitions: 4,
            replication_factor: 3,
            configs: vec![],
            live_nodes: vec![],
        },
        MetaCommand::CreateTopic {
            name: rill_meta::TRANSACTION_STATE_TOPIC.into(),
            topic_id: [2; 16],
            kind: PartitionKind::TransactionState,
            partitions: 4,
            replication_factor: 3,
            configs: vec![],
            live_nodes: vec![],
        },
        MetaCommand::CreateTopic {
            name: "orders".into(),
            topic_id: [3; 16],
            kind: PartitionKind::Records,
            partitions: 3,
            replication_factor: 3,
            configs: vec![("min.insync.replicas".into(), "2".into())],
            live_nodes: vec![1, 2, 3],
        },
        MetaCommand::AllocateProducerIds { count: 1000 },
    ];
    for c in commands {
        let result = state.apply(c);
        assert!(!matches!(result, MetaResult::Refused(_)), "the base cluster builds: {result:?}");
    }
    state
}
