//! What a node decodes from its own disk and from a snapshot a leader sends: every Raft group's
//! persisted snapshot (`StoredSnapshot`, read when a group opens), the snapshot stream an
//! install receives (`RILLSNP1`: its header, `SnapshotData`, and the entries it carries,
//! staged as they arrive) and the state machines' own snapshot and command formats — a partition's
//! (time index, idempotent producers, share groups; append, expire-producers and share entries), `__consumer_offsets`
//! (commits), `__transaction_state` (transactional ids) and the metadata.
//!
//! Input: the bytes, given to every decoder.
//!
//! Properties: no panic; a snapshot a machine accepts re-encodes to a snapshot that restores
//! to the same state; applying the bytes as a log entry leaves a state that round-trips too;
//! the heap a restore holds is a small multiple of its input, and so is what receiving a stream
//! holds; a stream is taken whole only when it is a valid one.
#![no_main]

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use openraft::CommittedLeaderId;
use prost::Message;
use rill_broker::command::decode_append;
use rill_broker::machine::SharedState;
use rill_coordinator::{OffsetsMachine, TransactionsMachine};
use rill_fuzz::{peak_during, Counting};
use rill_meta::MetaStateMachine;
use rill_raft::log_store::{LogStore, TailBudget};
use rill_raft::state_machine::SmStore;
use rill_raft::transfer::SnapshotStream;
use rill_raft::types::LogId;
use rill_raft::{keys, GroupStateMachine, Payload};
use rill_storage::{Engine, Keyspace, MemEngine, Syncer, WriteBatch};
use tokio::io::AsyncWriteExt;

/// One runtime for every input: a group's log spawns its flusher task on it when it opens.
fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| tokio::runtime::Builder::new_current_thread().build().expect("a runtime"))
}

/// One engine and group 7's log on it, for every input: opening a log per input spawns tasks
/// that outlive it, which makes libFuzzer run a leak scan after every input.
fn group() -> &'static (Arc<dyn Engine>, LogStore) {
    static GROUP: OnceLock<(Arc<dyn Engine>, LogStore)> = OnceLock::new();
    GROUP.get_or_init(|| {
        let _entered = runtime().enter();
        let engine: Arc<dyn Engine> = Arc::new(MemEngine::new());
        let log = LogStore::open(7, engine.clone(), Syncer::start(engine.clone()), TailBudget::new(1 << 20))
            .expect("the log opens");
        (engine, log)
    })
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Heap a restore may hold per input byte: prost's message and the machine's maps, for as
/// little as two bytes per repeated element.
const BYTES_PER_INPUT_BYTE: usize = 256;
/// Fixed overhead.
const SLACK_BYTES: usize = 16 << 10;

/// A fresh machine of each kind.
fn machines() -> Vec<(&'static str, Box<dyn GroupStateMachine>)> {
    vec![
        ("partition", Box::new(SharedState::new().state_machine())),
        ("offsets", Box::new(OffsetsMachine::new())),
        ("transactions", Box::new(TransactionsMachine::new())),
        ("metadata", Box::new(MetaStateMachine::new().0)),
    ]
}

/// The machine `name`'s snapshot restores into a fresh machine, whose snapshot is the same.
fn snapshot_round_trips(name: &str, m: &dyn GroupStateMachine) {
    let first = m.snapshot().expect("a restored machine snapshots");
    let mut fresh = machines().into_iter().find(|(n, _)| *n == name).map(|(_, m)| m).expect("known machine");
    fresh.restore(&first).unwrap_or_else(|e| panic!("{name}: its own snapshot is refused: {e}"));
    assert_eq!(fresh.snapshot().expect("snapshots"), first, "{name}: snapshot round trip");
}

fuzz_target!(|data: &[u8]| {
    let bytes = Bytes::copy_from_slice(data);
    let log_id = LogId::new(CommittedLeaderId::new(3, 1), 42);

    for (name, mut m) in machines() {
        let (restored, peak) = peak_during(|| m.restore(data));
        assert!(
            peak <= BYTES_PER_INPUT_BYTE * data.len() + SLACK_BYTES,
            "{name}: restore held {peak} bytes for {} bytes",
            data.len()
        );
        if restored.is_ok() {
            snapshot_round_trips(name, m.as_ref());
        }
        // The same bytes as a committed log entry of the group, one record per byte.
        let (_, mut m) = machines().into_iter().find(|(n, _)| *n == name).expect("known machine");
        let units = u32::try_from(data.len()).unwrap_or(u32::MAX);
        let _answer = m.apply(&log_id, 1000, &Payload { units, body: bytes.clone(), proposal: 0 });
        snapshot_round_trips(name, m.as_ref());
    }

    // A partition entry's batches are slices of the entry.
    if let Ok(batches) = decode_append(bytes.clone()) {
        assert!(batches.iter().map(|b| b.len() + 4).sum::<usize>() <= data.len());
    }

    // The group's persisted snapshot, read when it opens (and the form an install carries).
    let (engine, log) = group();
    let mut b = WriteBatch::new();
    b.put(Keyspace::State, keys::group_tag(7, keys::SNAPSHOT).to_vec(), bytes.clone());
    engine.write(b, true).expect("the memory engine writes");
    let (opened, peak) =
        peak_during(|| SmStore::open(7, engine.clone(), log.clone(), SharedState::new().state_machine()).map(|_| ()));
    assert!(peak <= BYTES_PER_INPUT_BYTE * data.len() + SLACK_BYTES, "opening a group held {peak} bytes");
    drop(opened);
    let _ = SmStore::open(7, engine.clone(), log.clone(), OffsetsMachine::new());
    let _ = SmStore::open(7, engine.clone(), log.clone(), TransactionsMachine::new());
    let _ = SmStore::open(7, engine.clone(), log.clone(), MetaStateMachine::new().0);
    if let Ok(wire) = rill_proto::raft::SnapshotData::decode(bytes.clone()) {
        for (_, mut m) in machines() {
            let _ = m.restore(&wire.data);
        }
    }

    // The bytes as a snapshot stream a follower receives, as the magic and the header's length
    // prefix followed by the input (so the header decoder and the entry frames are reached).
    let mut framed = b"RILLSNP1".to_vec();
    framed.extend_from_slice(&(data.len().min(64) as u32).to_be_bytes());
    framed.extend_from_slice(data);
    for stream in [data, &framed[..]] {
        let (received, peak) = peak_during(|| {
            runtime().block_on(async {
                let mut s = SnapshotStream::incoming(log.clone());
                let written = s.write_all(stream).await;
                let shut = s.shutdown().await;
                written.is_ok() && shut.is_ok() && s.received().is_some()
            })
        });
        log.forget_expected_install();
        log.clear_staging().expect("the memory engine writes");
        assert!(peak <= 4 * stream.len() + SLACK_BYTES, "receiving a stream held {peak} bytes for {}", stream.len());
        if received {
            // Only a well-formed stream is taken whole: its entries fit together and its
            // checksum matched.
            assert!(stream.len() >= 8 + 4 + 4, "a complete stream has a magic, a header and a trailer");
        }
    }
});
