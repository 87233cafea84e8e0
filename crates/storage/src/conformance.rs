//! The conformance suite every [`Engine`] must pass.
//!
//! An engine's tests implement [`Harness`] (how to open, restart and power-fail it) and call
//! [`run_all`]. Each case starts from a fresh harness. A new `Engine` method comes with its case
//! here.
//!
//! What a power failure may lose differs per engine (RocksDB cannot drop the OS page cache in a
//! test), so the shared cases assert only what every engine promises: synced writes survive,
//! batches are atomic, and what survives is a prefix of the write order. The memory engine's own
//! tests additionally assert that unsynced writes *are* lost.

#![allow(clippy::unwrap_used)] // a test suite: a failed unwrap is a failed case

use std::sync::Arc;

use crate::{Engine, Keyspace, WriteBatch};

/// How the suite drives one engine.
pub trait Harness {
    /// The engine type under test.
    type E: Engine;
    /// The engine as it is now (after any restart). The suite drops it before restarting.
    fn engine(&self) -> Arc<Self::E>;
    /// Closes and reopens the engine on the same storage (a process crash or clean restart).
    fn restart(&mut self);
    /// Simulates a power failure and reopens: unsynced writes may be lost.
    fn power_fail(&mut self);
}

/// A named case of the suite.
type Case<H> = (&'static str, fn(&mut H));

/// Runs every case, each on a fresh harness from `new`.
pub fn run_all<H: Harness>(new: impl Fn() -> H) {
    let cases: &[Case<H>] = &[
        ("put_get_delete", put_get_delete),
        ("keyspaces_are_isolated", keyspaces_are_isolated),
        ("batch_ops_apply_in_order", batch_ops_apply_in_order),
        ("scan_bounds_order_and_limit", scan_bounds_order_and_limit),
        ("scan_rev_bounds_order_and_limit", scan_rev_bounds_order_and_limit),
        ("delete_range_removes_half_open_range", delete_range_removes_half_open_range),
        ("empty_and_inverted_ranges", empty_and_inverted_ranges),
        ("restart_keeps_every_returned_write", restart_keeps_every_returned_write),
        ("power_failure_keeps_synced_writes", power_failure_keeps_synced_writes),
        ("power_failure_keeps_sync_flag_writes", power_failure_keeps_sync_flag_writes),
        ("power_failure_loses_only_a_suffix", power_failure_loses_only_a_suffix),
        ("large_values_round_trip", large_values_round_trip),
        ("value_bytes_sums_what_a_scan_returns", value_bytes_sums_what_a_scan_returns),
    ];
    for (name, case) in cases {
        let mut h = new();
        eprintln!("storage conformance: {name}");
        case(&mut h);
    }
}

fn put(e: &impl Engine, ks: Keyspace, k: &[u8], v: &[u8]) {
    let mut b = WriteBatch::new();
    b.put(ks, k.to_vec(), v.to_vec());
    e.write(b, false).unwrap();
}

fn keys(kvs: Vec<crate::KeyValue>) -> Vec<Vec<u8>> {
    kvs.into_iter().map(|(k, _)| k.to_vec()).collect()
}

fn value_bytes_sums_what_a_scan_returns<H: Harness>(h: &mut H) {
    for ks in [Keyspace::RaftLog, Keyspace::State] {
        let e = h.engine();
        // More keys than one chunk of the default implementation, of varied sizes.
        let mut b = WriteBatch::new();
        for i in 0u32..600 {
            b.put(ks, i.to_be_bytes().to_vec(), vec![7u8; (i % 37) as usize]);
        }
        e.write(b, false).unwrap();
        let (lo, hi) = (10u32.to_be_bytes(), 590u32.to_be_bytes());
        let scanned: u64 = e.scan(ks, &lo, &hi, usize::MAX).unwrap().iter().map(|(_, v)| v.len() as u64).sum();
        assert_eq!(e.value_bytes(ks, &lo, &hi).unwrap(), scanned, "{ks:?}");
        assert_eq!(e.value_bytes(ks, &hi, &lo).unwrap(), 0, "an inverted range holds nothing");
        let mut d = WriteBatch::new();
        d.delete_range(ks, 0u32.to_be_bytes().to_vec(), 1000u32.to_be_bytes().to_vec());
        e.write(d, false).unwrap();
        assert_eq!(e.value_bytes(ks, &lo, &hi).unwrap(), 0);
        drop(e);
        h.restart();
    }
}

fn put_get_delete<H: Harness>(h: &mut H) {
    let e = h.engine();
    assert_eq!(e.get(Keyspace::State, b"k").unwrap(), None);
    put(&*e, Keyspace::State, b"k", b"v1");
    assert_eq!(e.get(Keyspace::State, b"k").unwrap().as_deref(), Some(&b"v1"[..]));
    put(&*e, Keyspace::State, b"k", b"v2");
    assert_eq!(e.get(Keyspace::State, b"k").unwrap().as_deref(), Some(&b"v2"[..]));
    let mut b = WriteBatch::new();
    b.delete(Keyspace::State, b"k".to_vec());
    b.delete(Keyspace::State, b"never-existed".to_vec());
    e.write(b, false).unwrap();
    assert_eq!(e.get(Keyspace::State, b"k").unwrap(), None);
}

fn keyspaces_are_isolated<H: Harness>(h: &mut H) {
    let e = h.engine();
    for (i, ks) in Keyspace::ALL.iter().enumerate() {
        put(&*e, *ks, b"same-key", &[i as u8]);
    }
    for (i, ks) in Keyspace::ALL.iter().enumerate() {
        assert_eq!(e.get(*ks, b"same-key").unwrap().as_deref(), Some(&[i as u8][..]));
        assert_eq!(e.scan(*ks, b"", b"\xff", 10).unwrap().len(), 1);
    }
}

fn batch_ops_apply_in_order<H: Harness>(h: &mut H) {
    let e = h.engine();
    let mut b = WriteBatch::new();
    b.put(Keyspace::RaftLog, b"a".to_vec(), b"1".to_vec());
    b.delete(Keyspace::RaftLog, b"a".to_vec());
    b.put(Keyspace::RaftLog, b"b".to_vec(), b"1".to_vec());
    b.put(Keyspace::RaftLog, b"c".to_vec(), b"1".to_vec());
    b.delete_range(Keyspace::RaftLog, b"b".to_vec(), b"c".to_vec());
    b.put(Keyspace::RaftLog, b"b".to_vec(), b"2".to_vec());
    e.write(b, false).unwrap();
    assert_eq!(e.get(Keyspace::RaftLog, b"a").unwrap(), None);
    assert_eq!(e.get(Keyspace::RaftLog, b"b").unwrap().as_deref(), Some(&b"2"[..]));
    assert_eq!(e.get(Keyspace::RaftLog, b"c").unwrap().as_deref(), Some(&b"1"[..]));
}

fn fill_numbers(e: &impl Engine, n: u64) {
    let mut b = WriteBatch::new();
    for i in 0..n {
        b.put(Keyspace::LogIndex, i.to_be_bytes().to_vec(), i.to_le_bytes().to_vec());
    }
    e.write(b, false).unwrap();
}

fn scan_bounds_order_and_limit<H: Harness>(h: &mut H) {
    let e = h.engine();
    fill_numbers(&*e, 100);
    let got = e.scan(Keyspace::LogIndex, &10u64.to_be_bytes(), &20u64.to_be_bytes(), 1000).unwrap();
    assert_eq!(keys(got.clone()), (10u64..20).map(|i| i.to_be_bytes().to_vec()).collect::<Vec<_>>());
    assert_eq!(got[0].1.as_ref(), &10u64.to_le_bytes()[..]);
    let limited = e.scan(Keyspace::LogIndex, &10u64.to_be_bytes(), &20u64.to_be_bytes(), 3).unwrap();
    assert_eq!(keys(limited), (10u64..13).map(|i| i.to_be_bytes().to_vec()).collect::<Vec<_>>());
    assert!(e.scan(Keyspace::LogIndex, &200u64.to_be_bytes(), &300u64.to_be_bytes(), 10).unwrap().is_empty());
}

fn scan_rev_bounds_order_and_limit<H: Harness>(h: &mut H) {
    let e = h.engine();
    fill_numbers(&*e, 100);
    let got = e.scan_rev(Keyspace::LogIndex, &10u64.to_be_bytes(), &20u64.to_be_bytes(), 1000).unwrap();
    assert_eq!(keys(got), (10u64..20).rev().map(|i| i.to_be_bytes().to_vec()).collect::<Vec<_>>());
    let last = e.scan_rev(Keyspace::LogIndex, &0u64.to_be_bytes(), &u64::MAX.to_be_bytes(), 1).unwrap();
    assert_eq!(keys(last), vec![99u64.to_be_bytes().to_vec()]);
    // "the last key <= 55": the seek-for-prev pattern the offset index relies on.
    let prev = e.scan_rev(Keyspace::LogIndex, &0u64.to_be_bytes(), &56u64.to_be_bytes(), 1).unwrap();
    assert_eq!(keys(prev), vec![55u64.to_be_bytes().to_vec()]);
}

fn delete_range_removes_half_open_range<H: Harness>(h: &mut H) {
    let e = h.engine();
    fill_numbers(&*e, 50);
    let mut b = WriteBatch::new();
    b.delete_range(Keyspace::LogIndex, 10u64.to_be_bytes().to_vec(), 40u64.to_be_bytes().to_vec());
    e.write(b, false).unwrap();
    let left = keys(e.scan(Keyspace::LogIndex, &0u64.to_be_bytes(), &u64::MAX.to_be_bytes(), 1000).unwrap());
    let want: Vec<Vec<u8>> = (0u64..10).chain(40..50).map(|i| i.to_be_bytes().to_vec()).collect();
    assert_eq!(left, want);
    // Writes after a range delete are visible again.
    put(&*e, Keyspace::LogIndex, &20u64.to_be_bytes(), b"back");
    assert_eq!(e.get(Keyspace::LogIndex, &20u64.to_be_bytes()).unwrap().as_deref(), Some(&b"back"[..]));
}

fn empty_and_inverted_ranges<H: Harness>(h: &mut H) {
    let e = h.engine();
    fill_numbers(&*e, 10);
    assert!(e.scan(Keyspace::LogIndex, &5u64.to_be_bytes(), &5u64.to_be_bytes(), 10).unwrap().is_empty());
    assert!(e.scan(Keyspace::LogIndex, &7u64.to_be_bytes(), &3u64.to_be_bytes(), 10).unwrap().is_empty());
    assert!(e.scan_rev(Keyspace::LogIndex, &7u64.to_be_bytes(), &3u64.to_be_bytes(), 10).unwrap().is_empty());
    assert!(e.scan(Keyspace::LogIndex, &0u64.to_be_bytes(), &10u64.to_be_bytes(), 0).unwrap().is_empty());
    let mut b = WriteBatch::new();
    b.delete_range(Keyspace::LogIndex, 7u64.to_be_bytes().to_vec(), 3u64.to_be_bytes().to_vec());
    e.write(b, false).unwrap();
    assert_eq!(e.scan(Keyspace::LogIndex, &0u64.to_be_bytes(), &10u64.to_be_bytes(), 100).unwrap().len(), 10);
}

fn restart_keeps_every_returned_write<H: Harness>(h: &mut H) {
    {
        let e = h.engine();
        put(&*e, Keyspace::RaftLog, b"synced", b"1");
        e.sync().unwrap();
        put(&*e, Keyspace::RaftLog, b"unsynced", b"2");
    }
    h.restart();
    let e = h.engine();
    assert_eq!(e.get(Keyspace::RaftLog, b"synced").unwrap().as_deref(), Some(&b"1"[..]));
    assert_eq!(e.get(Keyspace::RaftLog, b"unsynced").unwrap().as_deref(), Some(&b"2"[..]));
}

fn power_failure_keeps_synced_writes<H: Harness>(h: &mut H) {
    {
        let e = h.engine();
        for i in 0u64..20 {
            put(&*e, Keyspace::RaftLog, &i.to_be_bytes(), b"x");
        }
        e.sync().unwrap();
    }
    h.power_fail();
    let e = h.engine();
    for i in 0u64..20 {
        assert!(e.get(Keyspace::RaftLog, &i.to_be_bytes()).unwrap().is_some(), "synced key {i} lost");
    }
    // The engine keeps working after recovery.
    put(&*e, Keyspace::RaftLog, b"after", b"y");
    e.sync().unwrap();
    assert!(e.get(Keyspace::RaftLog, b"after").unwrap().is_some());
}

fn power_failure_keeps_sync_flag_writes<H: Harness>(h: &mut H) {
    {
        let e = h.engine();
        let mut b = WriteBatch::new();
        b.put(Keyspace::RaftMeta, b"vote".to_vec(), b"term-7".to_vec());
        e.write(b, true).unwrap();
    }
    h.power_fail();
    assert_eq!(h.engine().get(Keyspace::RaftMeta, b"vote").unwrap().as_deref(), Some(&b"term-7"[..]));
}

fn power_failure_loses_only_a_suffix<H: Harness>(h: &mut H) {
    {
        let e = h.engine();
        put(&*e, Keyspace::RaftLog, b"base", b"0");
        e.sync().unwrap();
        for i in 0u64..30 {
            // Each batch writes two keys; atomicity means both or neither survive.
            let mut b = WriteBatch::new();
            b.put(Keyspace::RaftLog, i.to_be_bytes().to_vec(), b"a".to_vec());
            b.put(Keyspace::LogIndex, i.to_be_bytes().to_vec(), b"b".to_vec());
            e.write(b, false).unwrap();
        }
    }
    h.power_fail();
    let e = h.engine();
    assert!(e.get(Keyspace::RaftLog, b"base").unwrap().is_some());
    let mut survived = Vec::new();
    for i in 0u64..30 {
        let a = e.get(Keyspace::RaftLog, &i.to_be_bytes()).unwrap().is_some();
        let b = e.get(Keyspace::LogIndex, &i.to_be_bytes()).unwrap().is_some();
        assert_eq!(a, b, "batch {i} survived only in part");
        survived.push(a);
    }
    let first_lost = survived.iter().position(|s| !s).unwrap_or(survived.len());
    assert!(survived[first_lost..].iter().all(|s| !s), "a later batch survived an earlier lost one");
}

fn large_values_round_trip<H: Harness>(h: &mut H) {
    let value: Vec<u8> = (0..(4 << 20)).map(|i: u32| (i % 251) as u8).collect();
    {
        let e = h.engine();
        put(&*e, Keyspace::RaftLog, b"big", &value);
        e.sync().unwrap();
    }
    h.restart();
    assert_eq!(h.engine().get(Keyspace::RaftLog, b"big").unwrap().as_deref(), Some(&value[..]));
}
