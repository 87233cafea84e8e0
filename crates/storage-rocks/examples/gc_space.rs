//! What value log collection gives back and what it costs: an idle group beside a busy one whose
//! retention deletes its old entries (docs/benchmarks.md, "Value log collection").
//!
//! ```text
//! cargo run --release -p rill-storage-rocks --example gc_space [-- <MiB written> <segment MiB> <A every> <collector MiB/s>]
//! ```
//!
//! 1. Without collection: B writes 16 KiB entries and keeps its newest 64 MiB, A writes one entry
//!    for every 64 of B's (or `<A every>`). The value log's size against its live bytes.
//! 2. One pass (`run_gc_once`, unpaced) while a third group writes 1 KiB entries as fast as it
//!    can: how long the pass takes, and what it does to that writer's latency.
//! 3. The same load on a fresh engine with the background collector (1 s interval, the default
//!    pace or `<collector MiB/s>`): the most disk seen, the disk at the end, and the write
//!    amplification.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::time::{Duration, Instant};

use rill_storage::{Engine, Keyspace, WriteBatch};
use rill_storage_rocks::{EngineConfig, RocksEngine};

type Result<T, E = Box<dyn std::error::Error + Send + Sync>> = std::result::Result<T, E>;

const VALUE_BYTES: u64 = 16 << 10;
/// A (the idle group) writes one entry for every this many of B's, by default.
const A_EVERY: u64 = 64;
/// B's retention: it keeps its newest this many bytes, deleting in steps of `DELETE_STEP_BYTES`.
const RETAINED_BYTES: u64 = 64 << 20;
const DELETE_STEP_BYTES: u64 = 8 << 20;
const A: u64 = 1;
const B: u64 = 2;
const C: u64 = 3;

fn key(g: u64, i: u64) -> Vec<u8> {
    let mut k = g.to_be_bytes().to_vec();
    k.extend_from_slice(&i.to_be_bytes());
    k
}

/// Distinct, incompressible-looking bytes per entry.
fn value(g: u64, i: u64, len: u64) -> Vec<u8> {
    let mut x = (g << 56) ^ i ^ 0x9e37_79b9_7f4a_7c15;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn vlog_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir.join("vlog"))
        .map_or(0, |d| d.flatten().filter_map(|f| f.metadata().ok()).map(|m| m.len()).sum())
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}

#[allow(clippy::disallowed_methods)] // a measurement tool outside any simulation
fn now() -> Instant {
    Instant::now()
}

/// Writes `total_bytes` of A's and B's entries, B keeping its newest `RETAINED_BYTES`.
/// Returns the bytes of values written.
fn write_load(e: &RocksEngine, total_bytes: u64, a_every: u64) -> Result<u64> {
    let (mut b_start, mut b_next, mut a_next, mut written) = (0u64, 0u64, 0u64, 0u64);
    while written < total_bytes {
        let mut batch = WriteBatch::new();
        batch.put(Keyspace::RaftLog, key(B, b_next), value(B, b_next, VALUE_BYTES));
        b_next += 1;
        written += VALUE_BYTES;
        if b_next % a_every == 0 {
            batch.put(Keyspace::RaftLog, key(A, a_next), value(A, a_next, VALUE_BYTES));
            a_next += 1;
            written += VALUE_BYTES;
        }
        e.write(batch, b_next % 64 == 0)?;
        let retained = RETAINED_BYTES / VALUE_BYTES;
        if b_next - b_start >= retained + DELETE_STEP_BYTES / VALUE_BYTES {
            let mut purge = WriteBatch::new();
            purge.delete_range(Keyspace::RaftLog, key(B, b_start), key(B, b_next - retained));
            e.write(purge, false)?;
            b_start = b_next - retained;
        }
    }
    Ok(written)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted.get(((sorted.len() as f64 * p) as usize).min(sorted.len().saturating_sub(1))).copied().unwrap_or_default()
}

/// Writes 1 KiB entries to group C until `stop`, returning each write's latency.
fn small_writer(e: &RocksEngine, stop: &AtomicBool, next: &AtomicU64) -> Result<Vec<Duration>> {
    let mut latencies = Vec::new();
    while !stop.load(SeqCst) {
        let i = next.fetch_add(1, SeqCst);
        let mut b = WriteBatch::new();
        b.put(Keyspace::RaftLog, key(C, i), value(C, i, 1024));
        let t = now();
        e.write(b, false)?;
        latencies.push(t.elapsed());
    }
    latencies.sort();
    Ok(latencies)
}

fn report(what: &str, mut latencies: Vec<Duration>) {
    latencies.sort();
    println!(
        "  {what}: {} writes, p50 {:?}, p99 {:?}, p99.9 {:?}, max {:?}",
        latencies.len(),
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        percentile(&latencies, 0.999),
        latencies.last().copied().unwrap_or_default()
    );
}

fn main() -> Result<()> {
    let args: Vec<u64> = std::env::args().skip(1).map(|a| a.parse()).collect::<Result<_, _>>()?;
    let total = args.first().copied().unwrap_or(1024) << 20;
    let segment = args.get(1).copied().unwrap_or(16) << 20;
    let a_every = args.get(2).copied().unwrap_or(A_EVERY).max(1);
    let gc_bytes_per_second = args.get(3).map_or(EngineConfig::default().gc_bytes_per_second, |m| m << 20);
    let config = EngineConfig {
        segment_bytes: segment,
        flush_after_log_bytes: segment,
        gc_interval: None,
        ..EngineConfig::default()
    };
    println!(
        "{} MiB of 16 KiB entries, {} MiB segments, B keeps {} MiB, A writes 1 in {}",
        total >> 20,
        segment >> 20,
        RETAINED_BYTES >> 20,
        a_every + 1
    );

    println!("1. without collection");
    let dir = tempfile::tempdir()?;
    let e = RocksEngine::open_with(dir.path(), config.clone())?;
    let t = now();
    let written = write_load(&e, total, a_every)?;
    let space = e.space()?;
    println!(
        "  wrote {:.0} MiB in {:.1?}: value log {:.0} MiB ({} segments) for {:.0} MiB live",
        mib(written),
        t.elapsed(),
        mib(space.file_bytes),
        space.segments,
        mib(space.live_bytes)
    );

    println!("2. one pass, unpaced, beside a writer of 1 KiB entries");
    let stop = AtomicBool::new(false);
    let next = AtomicU64::new(0);
    let baseline = std::thread::scope(|s| {
        let h = s.spawn(|| small_writer(&e, &stop, &next));
        std::thread::sleep(Duration::from_secs(2));
        stop.store(true, SeqCst);
        h.join().map_err(|_| "writer panicked")?
    })?;
    report("writer alone", baseline);
    stop.store(false, SeqCst);
    let (pass, took, during) = std::thread::scope(|s| {
        let h = s.spawn(|| small_writer(&e, &stop, &next));
        let t = now();
        let pass = e.run_gc_once();
        let took = t.elapsed();
        stop.store(true, SeqCst);
        let during = h.join().map_err(|_| "writer panicked")?;
        Result::<_>::Ok((pass?, took, during?))
    })?;
    let space = e.space()?;
    println!(
        "  pass: {took:.1?}, relocated {:.0} MiB ({} values), read {:.0} MiB, deleted {} segments; \
         value log {:.0} MiB ({} segments) for {:.0} MiB live ({:.2}x)",
        mib(pass.relocated_bytes),
        pass.relocated_values,
        mib(pass.read_bytes),
        pass.segments_deleted,
        mib(space.file_bytes),
        space.segments,
        mib(space.live_bytes),
        space.file_bytes as f64 / space.live_bytes.max(1) as f64
    );
    report("writer during the pass", during);
    drop(e);

    println!("3. the same load with the background collector (1 s interval, {} MiB/s)", gc_bytes_per_second >> 20);
    let dir = tempfile::tempdir()?;
    let config = EngineConfig { gc_interval: Some(Duration::from_secs(1)), gc_bytes_per_second, ..config };
    let e = RocksEngine::open_with(dir.path(), config)?;
    let done = AtomicBool::new(false);
    let t = now();
    let (written, max_disk) = std::thread::scope(|s| {
        let sampler = s.spawn(|| {
            let mut max = 0;
            while !done.load(SeqCst) {
                max = max.max(vlog_bytes(dir.path()));
                std::thread::sleep(Duration::from_millis(100));
            }
            max
        });
        let written = write_load(&e, total, a_every);
        done.store(true, SeqCst);
        let max = sampler.join().map_err(|_| "sampler panicked")?;
        Result::<_>::Ok((written?, max))
    })?;
    let took = t.elapsed();
    let at_end = e.space()?;
    // Let the collector catch up with the last deletes, as a node's would while serving.
    let settle = now();
    while settle.elapsed() < Duration::from_secs(60) {
        let s = e.space()?;
        if s.gc_passes > at_end.gc_passes + 2 && s.file_bytes < 2 * s.live_bytes + 3 * segment {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let space = e.space()?;
    println!(
        "  wrote {:.0} MiB in {took:.1?}; most value log seen {:.0} MiB; at the end {:.0} MiB, {:.1?} later {:.0} MiB \
         for {:.0} MiB live; relocated {:.0} MiB: {:.2} bytes written to the value log per byte written",
        mib(written),
        mib(max_disk),
        mib(at_end.file_bytes),
        settle.elapsed(),
        mib(space.file_bytes),
        mib(space.live_bytes),
        mib(space.relocated_bytes),
        (written + space.relocated_bytes) as f64 / written as f64
    );
    Ok(())
}
