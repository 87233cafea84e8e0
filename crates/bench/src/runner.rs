//! Runs one workload against one connected system and measures it.
//!
//! Every message carries its send time (wall clock, µs) and a sequence number in its first 16
//! bytes, so a consumer can measure end-to-end latency on the same machine. Publish latency is
//! timed from the moment the message is handed to the system's client to its acknowledgement.
//! A warm-up phase (connections, leader caches, JIT-less but cache-cold servers) is excluded.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::bail;
use bytes::{BufMut, Bytes, BytesMut};
use indicatif::{ProgressBar, ProgressStyle};
use rand::{Rng, SeedableRng};
use tokio::sync::Semaphore;

use crate::driver::{BenchConsumer, BenchProducer, Driver};
use crate::process::own_cpu_seconds;
use crate::stats::{Latencies, ProcessCpu, RunResult};
use crate::systems::{Deployment, Variant};
use crate::workload::{KeyDistributor, Workload};

/// How long stragglers (acks still in flight, consumers catching up) may take after the
/// produce phase before the run is cut short.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(60);

/// Run-wide settings that are not part of the workload.
#[derive(Debug, Clone)]
pub struct RunSettings {
    /// Produce-phase length (overrides the workload's `testDurationMinutes`).
    pub duration: Option<Duration>,
    /// Excluded from the measurement at the start of the produce phase.
    pub warmup: Duration,
    /// Show a progress bar (or, without a terminal, a line every few seconds).
    pub progress: bool,
    /// What the bytes after each message's 16-byte header are.
    pub payload: PayloadKind,
}

/// The filler bytes of the messages a run sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PayloadKind {
    /// Every message its own random bytes: nothing a system compresses gets smaller, as with
    /// real data that producers compress themselves.
    #[default]
    Distinct,
    /// The same random bytes in every message (the OpenMessaging Benchmark's single payload
    /// file): a system that compresses stored batches shrinks them many times over.
    Repeated,
}

impl PayloadKind {
    /// The name `--payload` takes.
    pub fn name(self) -> &'static str {
        match self {
            Self::Distinct => "distinct",
            Self::Repeated => "repeated",
        }
    }
}

impl std::str::FromStr for PayloadKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "distinct" => Ok(Self::Distinct),
            "repeated" => Ok(Self::Repeated),
            other => Err(format!("unknown payload kind {other:?} (expected distinct or repeated)")),
        }
    }
}

/// Random bytes the filler of every message is cut from.
struct Filler {
    pool: Bytes,
    /// Filler bytes per message.
    len: usize,
    kind: PayloadKind,
}

/// Distinct fillers are windows of a pool this many times larger than a message (within
/// [`DISTINCT_POOL_MAX`]), so two messages of one batch share bytes only by rare chance.
const DISTINCT_POOL_FACTOR: usize = 4096;
const DISTINCT_POOL_MAX: usize = 64 << 20;

impl Filler {
    fn new(message_size: usize, kind: PayloadKind) -> Self {
        let len = message_size.saturating_sub(16);
        let pool_len = match kind {
            PayloadKind::Distinct => (len * DISTINCT_POOL_FACTOR).min(DISTINCT_POOL_MAX).max(len),
            PayloadKind::Repeated => len,
        };
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let pool: Vec<u8> = (0..pool_len).map(|_| rng.gen::<u8>()).collect();
        Self { pool: pool.into(), len, kind }
    }

    /// The filler of message `seq`.
    fn for_message(&self, seq: u64) -> &[u8] {
        let start = match self.kind {
            PayloadKind::Repeated => 0,
            PayloadKind::Distinct => {
                // A multiplicative hash spreads consecutive messages over the pool.
                let room = (self.pool.len() - self.len + 1) as u64;
                (seq.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 16) % room
            }
        } as usize;
        &self.pool[start..start + self.len]
    }
}

/// Microseconds since the Unix epoch.
fn wall_us() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_micros() as u64).unwrap_or(0)
}

/// Builds the payload of message `seq`: send time, sequence, then its filler (the message size
/// the filler was made for).
fn payload(filler: &Filler, seq: u64) -> Bytes {
    let fill = filler.for_message(seq);
    let mut b = BytesMut::with_capacity(16 + fill.len());
    b.put_u64_le(wall_us());
    b.put_u64_le(seq);
    b.put_slice(fill);
    b.freeze()
}

/// The send time carried by a payload.
fn sent_us(payload: &[u8]) -> Option<u64> {
    payload.get(..8).and_then(|b| b.try_into().ok()).map(u64::from_le_bytes)
}

#[derive(Default)]
struct ProduceStats {
    publish: Latencies,
    /// Acknowledged messages sent inside the measured window.
    measured: u64,
    /// Every acknowledged message.
    acked: u64,
    acked_bytes: u64,
    errors: u64,
    first_error: Option<String>,
}

struct Shared {
    produce: Mutex<ProduceStats>,
    e2e: Mutex<Latencies>,
    consumed: AtomicU64,
    /// Wall-clock µs when the measured window opens (messages sent earlier are warm-up).
    measure_from_us: AtomicU64,
    stop_producing: AtomicBool,
    stop_consuming: AtomicBool,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// The workload's topics for one run: unique per run so every run starts empty.
pub fn topic_names(workload: &Workload, variant: Variant, run_id: &str) -> Vec<String> {
    let base: String = format!("bench-{}-{}-{run_id}", workload.name, variant.name())
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .collect();
    (0..workload.topics).map(|t| format!("{base}-t{t}")).collect()
}

/// Runs `workload` on `driver` and measures it.
pub async fn run(
    driver: &dyn Driver,
    deployment: &mut Deployment,
    variant: Variant,
    workload: &Workload,
    settings: &RunSettings,
    run_id: &str,
) -> anyhow::Result<RunResult> {
    let topics = topic_names(workload, variant, run_id);
    for t in &topics {
        driver.create_topic(t, workload.partitions_per_topic).await?;
    }
    let shared = Arc::new(Shared {
        produce: Mutex::new(ProduceStats::default()),
        e2e: Mutex::new(Latencies::default()),
        consumed: AtomicU64::new(0),
        measure_from_us: AtomicU64::new(u64::MAX),
        stop_producing: AtomicBool::new(false),
        stop_consuming: AtomicBool::new(false),
    });
    let backlog = workload.backlog_bytes();

    // Consumers first (live workloads), so nothing waits on a consumer's start-up.
    let mut consumers = Vec::new();
    if backlog == 0 {
        consumers = start_consumers(driver, workload, &topics, &shared).await?;
    }

    let duration = settings.duration.unwrap_or_else(|| workload.duration());
    // A backlog run is bounded by size, not time: every message of it counts.
    let warmup = if backlog > 0 { Duration::ZERO } else { settings.warmup.min(duration / 2) };
    let mut producers = Vec::new();
    for t in &topics {
        for _ in 0..workload.producers_per_topic {
            producers.push((t.clone(), driver.producer(t).await?));
        }
    }
    let total_producers = producers.len() as f64;
    let filler = Arc::new(Filler::new(workload.message_size, settings.payload));
    let mut producer_tasks = Vec::new();
    for (i, (_topic, producer)) in producers.into_iter().enumerate() {
        let rate = workload.producer_rate as f64 / total_producers;
        producer_tasks.push(tokio::spawn(produce_loop(
            producer,
            shared.clone(),
            workload.clone(),
            filler.clone(),
            rate,
            i as u64,
        )));
    }

    let progress = Progress::new(settings.progress, &format!("{} {}", variant.name(), workload.name), duration);
    // Warm-up, then the measured window.
    wait_or_fail(warmup, deployment, &progress, &shared).await?;
    shared.measure_from_us.store(wall_us(), Ordering::SeqCst);
    let cpu_before = deployment.cpu_seconds();
    let client_cpu_before = own_cpu_seconds();
    let measure_start = Instant::now();
    let mut measured_for = duration - warmup;
    if backlog > 0 {
        // Produce until the backlog is there (or the time is up).
        let deadline = measure_start + measured_for;
        while lock(&shared.produce).acked_bytes < backlog && Instant::now() < deadline {
            wait_or_fail(Duration::from_millis(200), deployment, &progress, &shared).await?;
        }
        measured_for = measure_start.elapsed();
    } else {
        wait_or_fail(measured_for, deployment, &progress, &shared).await?;
    }
    shared.stop_producing.store(true, Ordering::SeqCst);
    let measure_end_cpu = deployment.cpu_seconds();
    let client_cpu = own_cpu_seconds() - client_cpu_before;
    for task in producer_tasks {
        if tokio::time::timeout(DRAIN_TIMEOUT, task).await.is_err() {
            bail!("acknowledgements still outstanding {DRAIN_TIMEOUT:?} after the produce phase");
        }
    }
    progress.finish();
    let produced = lock(&shared.produce).acked;
    let subscriptions = u64::from(workload.subscriptions_per_topic);

    // Catch-up: read the backlog from the beginning.
    let mut catch_up = None;
    if backlog > 0 {
        // Reading a backlog measures catch-up, not end-to-end latency: record none.
        shared.measure_from_us.store(u64::MAX, Ordering::SeqCst);
        let read_start = Instant::now();
        consumers = start_consumers(driver, workload, &topics, &shared).await?;
        wait_consumed(&shared, produced * subscriptions, deployment).await?;
        catch_up = Some(produced as f64 * subscriptions as f64 / read_start.elapsed().as_secs_f64());
    } else {
        wait_consumed(&shared, produced * subscriptions, deployment).await?;
    }
    shared.stop_consuming.store(true, Ordering::SeqCst);
    for c in consumers {
        let _ = tokio::time::timeout(Duration::from_secs(5), c).await;
    }
    let stats = lock(&shared.produce);
    if stats.acked == 0 {
        bail!("no message was acknowledged; first error: {}", stats.first_error.as_deref().unwrap_or("none"));
    }
    let seconds = measured_for.as_secs_f64();
    let msgs_per_sec = stats.measured as f64 / seconds;
    let e2e = lock(&shared.e2e).summary();
    let publish = stats.publish.summary();
    let server_cpu = cpu_before
        .iter()
        .zip(measure_end_cpu)
        .map(|((name, before), (_, after))| ProcessCpu { process: name.clone(), cpu_seconds: after - before })
        .collect();
    Ok(RunResult {
        system: variant.name().to_string(),
        durability: variant.durability().to_string(),
        workload: workload.name.clone(),
        shape: format!("{}, {} payloads", workload.shape(), settings.payload.name()),
        seconds,
        messages: stats.measured,
        msgs_per_sec,
        mb_per_sec: msgs_per_sec * workload.message_size as f64 / 1e6,
        errors: stats.errors,
        publish_p50_ms: publish.p50_ms,
        publish_p99_ms: publish.p99_ms,
        publish_p999_ms: publish.p999_ms,
        publish_max_ms: publish.max_ms,
        e2e_p50_ms: e2e.p50_ms,
        e2e_p99_ms: e2e.p99_ms,
        e2e_p999_ms: e2e.p999_ms,
        e2e_max_ms: e2e.max_ms,
        consumed: shared.consumed.load(Ordering::SeqCst),
        catch_up_msgs_per_sec: catch_up,
        server_cpu,
        client_cpu_seconds: client_cpu,
    })
}

/// Sleeps `d`, updating the progress display and failing early if a server process died.
async fn wait_or_fail(
    d: Duration,
    deployment: &mut Deployment,
    progress: &Progress,
    shared: &Shared,
) -> anyhow::Result<()> {
    let end = Instant::now() + d;
    loop {
        deployment.check_running()?;
        progress.update(shared);
        let now = Instant::now();
        if now >= end {
            return Ok(());
        }
        tokio::time::sleep((end - now).min(Duration::from_millis(250))).await;
    }
}

/// Waits until consumers have read `target` messages (or fails after [`DRAIN_TIMEOUT`]).
async fn wait_consumed(shared: &Shared, target: u64, deployment: &mut Deployment) -> anyhow::Result<()> {
    let deadline = Instant::now() + DRAIN_TIMEOUT;
    while shared.consumed.load(Ordering::SeqCst) < target {
        deployment.check_running()?;
        if Instant::now() > deadline {
            bail!(
                "consumers read {} of {target} messages within {DRAIN_TIMEOUT:?} after producing stopped",
                shared.consumed.load(Ordering::SeqCst)
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

async fn start_consumers(
    driver: &dyn Driver,
    workload: &Workload,
    topics: &[String],
    shared: &Arc<Shared>,
) -> anyhow::Result<Vec<tokio::task::JoinHandle<()>>> {
    let mut tasks = Vec::new();
    for t in topics {
        for s in 0..workload.subscriptions_per_topic {
            for m in 0..workload.consumer_per_subscription {
                let consumer = driver.consumer(t, s, m, workload.consumer_per_subscription).await?;
                tasks.push(tokio::spawn(consume_loop(consumer, shared.clone())));
            }
        }
    }
    Ok(tasks)
}

async fn consume_loop(mut consumer: Box<dyn BenchConsumer>, shared: Arc<Shared>) {
    let mut local = Latencies::default();
    while !shared.stop_consuming.load(Ordering::SeqCst) {
        match consumer.poll().await {
            Ok(payloads) => {
                let now = wall_us();
                let from = shared.measure_from_us.load(Ordering::SeqCst);
                for p in &payloads {
                    if let Some(sent) = sent_us(p) {
                        if sent >= from {
                            local.record_us(now.saturating_sub(sent));
                        }
                    }
                }
                shared.consumed.fetch_add(payloads.len() as u64, Ordering::SeqCst);
                if local.count() > 0 {
                    lock(&shared.e2e).merge(&local);
                    local = Latencies::default();
                }
            }
            Err(e) => {
                tracing::warn!("consumer poll failed: {e:#}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn produce_loop(
    producer: Box<dyn BenchProducer>,
    shared: Arc<Shared>,
    workload: Workload,
    filler: Arc<Filler>,
    rate: f64,
    producer_index: u64,
) {
    let in_flight = Arc::new(Semaphore::new(workload.max_in_flight));
    let start = tokio::time::Instant::now();
    let mut rng = rand::rngs::StdRng::seed_from_u64(producer_index);
    let keys = u64::from(workload.partitions_per_topic).max(1) * 4;
    let mut seq: u64 = 0;
    while !shared.stop_producing.load(Ordering::SeqCst) {
        if rate > 0.0 {
            // Open-loop schedule: message n is due at start + n / rate.
            let due = start + Duration::from_secs_f64(seq as f64 / rate);
            tokio::time::sleep_until(due).await;
        }
        let Ok(permit) = in_flight.clone().acquire_owned().await else { break };
        let key = match workload.key_distributor {
            KeyDistributor::NoKey => None,
            KeyDistributor::KeyRoundRobin => Some(Bytes::from(format!("key-{}", seq % keys))),
            KeyDistributor::RandomNano => Some(Bytes::from(format!("key-{}", rng.gen::<u64>()))),
        };
        let t0 = Instant::now();
        let sent_at = wall_us();
        let measured = sent_at >= shared.measure_from_us.load(Ordering::SeqCst);
        let size = workload.message_size as u64;
        match producer.send(key, payload(&filler, seq)).await {
            Ok(ack) => {
                let shared = shared.clone();
                tokio::spawn(async move {
                    let result = ack.await;
                    let latency = t0.elapsed();
                    let mut s = lock(&shared.produce);
                    match result {
                        Ok(()) => {
                            s.acked += 1;
                            s.acked_bytes += size;
                            if measured {
                                s.measured += 1;
                                s.publish.record_us(latency.as_micros() as u64);
                            }
                        }
                        Err(e) => record_error(&mut s, e),
                    }
                    drop(permit);
                });
            }
            Err(e) => record_error(&mut lock(&shared.produce), e),
        }
        seq += 1;
    }
    // Every acknowledgement is in when all permits are back.
    let _ = in_flight.acquire_many(workload.max_in_flight as u32).await;
    producer.close().await;
}

fn record_error(s: &mut ProduceStats, e: anyhow::Error) {
    s.errors += 1;
    if s.first_error.is_none() {
        tracing::warn!("send failed: {e:#}");
        s.first_error = Some(format!("{e:#}"));
    }
}

/// A progress bar on a terminal; a line every 5 s otherwise.
struct Progress {
    bar: ProgressBar,
    started: Instant,
    total: Duration,
    label: String,
    last: Mutex<(Instant, u64, Instant)>,
    enabled: bool,
}

impl Progress {
    fn new(enabled: bool, label: &str, total: Duration) -> Self {
        let bar = if enabled { ProgressBar::new(total.as_millis() as u64) } else { ProgressBar::hidden() };
        if let Ok(style) = ProgressStyle::with_template("{prefix:40} [{bar:30}] {elapsed:>4}/{duration:4} {msg}") {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_prefix(label.to_string());
        let now = Instant::now();
        Self { bar, started: now, total, label: label.to_string(), last: Mutex::new((now, 0, now)), enabled }
    }

    fn update(&self, shared: &Shared) {
        if !self.enabled {
            return;
        }
        let now = Instant::now();
        let acked = lock(&shared.produce).acked;
        let mut last = lock(&self.last);
        let dt = now.duration_since(last.0).as_secs_f64();
        if dt < 1.0 {
            return;
        }
        let rate = (acked - last.1) as f64 / dt;
        *last = (now, acked, last.2);
        let consumed = shared.consumed.load(Ordering::SeqCst);
        let msg = format!("{rate:>9.0} msg/s  acked {acked}  consumed {consumed}");
        self.bar.set_position(self.started.elapsed().min(self.total).as_millis() as u64);
        self.bar.set_message(msg.clone());
        if self.bar.is_hidden() && now.duration_since(last.2) >= Duration::from_secs(5) {
            last.2 = now;
            eprintln!("  {} {:>3}s {msg}", self.label, self.started.elapsed().as_secs());
        }
    }

    fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distinct_payloads_differ_and_repeated_ones_do_not() {
        let distinct = Filler::new(1024, PayloadKind::Distinct);
        let fillers: std::collections::HashSet<&[u8]> = (0..1000).map(|seq| distinct.for_message(seq)).collect();
        assert_eq!(fillers.len(), 1000);
        assert!(fillers.iter().all(|f| f.len() == 1008));
        let repeated = Filler::new(1024, PayloadKind::Repeated);
        assert_eq!(repeated.for_message(1), repeated.for_message(999));
        assert_eq!(Filler::new(16, PayloadKind::Distinct).for_message(3), b"");
        for kind in [PayloadKind::Distinct, PayloadKind::Repeated] {
            assert_eq!(kind.name().parse::<PayloadKind>(), Ok(kind));
        }
        assert!("zeros".parse::<PayloadKind>().is_err());
    }

    #[test]
    fn payload_carries_send_time_and_has_the_asked_size() {
        let filler = Filler::new(100, PayloadKind::Distinct);
        let before = wall_us();
        let p = payload(&filler, 42);
        assert_eq!(p.len(), 100);
        let sent = sent_us(&p).unwrap_or(0);
        assert!(sent >= before && sent <= wall_us());
        assert_eq!(u64::from_le_bytes(p[8..16].try_into().unwrap_or_default()), 42);
        assert_eq!(sent_us(b"short"), None);
    }

    #[test]
    fn topic_names_are_unique_per_run_and_valid_everywhere() {
        let w: Workload = serde_yaml::from_str("name: a.b c\ntopics: 2\nmessageSize: 100\n").unwrap();
        let names = topic_names(&w, Variant::NatsR3Lazy, "r1");
        assert_eq!(names, vec!["bench-abc-nats-r3-lazy-r1-t0", "bench-abc-nats-r3-lazy-r1-t1"]);
    }
}
