//! One simulation run of a scenario: boot, workload under faults, heal, liveness, checks.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::Rng;
use rill_client::Acks;
use rill_raft::GroupId;

use crate::checkers::deleted_records::ReplicaStart;
use crate::checkers::{self, Violation};
use crate::cluster::{connect, SimCluster, SimOptions};
use crate::faults::{self, FaultCounts};
use crate::history::{History, Recorder};
use crate::oracle::{self, AckOracle};
use crate::scenarios::{AcksLevel, Scenario};
use crate::trace::Trace;
use crate::workload::{self, Workload};

/// Simulated time allowed for elections, catch-up and final reads once faults stop.
pub const LIVENESS_BOUND: Duration = Duration::from_secs(60);
/// How often replica watermarks are sampled.
const SAMPLE_EVERY: Duration = Duration::from_millis(25);
/// The workload topic.
const TOPIC: &str = "chaos";

/// What a run found.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Operations recorded.
    pub ops: usize,
    /// Acknowledged sends.
    pub acked: usize,
    /// Faults applied.
    pub faults: FaultCounts,
    /// Broken guarantees.
    pub violations: Vec<Violation>,
    /// Hash of the run's trace.
    pub trace_hash: u64,
    /// Events in the trace.
    pub events: usize,
    /// Compacted topics: the lowest final `clean_to` of any partition, and how many
    /// acknowledged records compaction removed (absent from the final reads).
    pub compaction: Option<(u64, usize)>,
}

impl Report {
    /// The report of a generated scenario's run: `ops` operations, `acked` of them acknowledged,
    /// the faults applied and the violations found. Ends `trace` (printed with
    /// `RILL_PRINT_TRACE`).
    pub fn of_generated(
        trace: &Trace,
        ops: usize,
        acked: usize,
        faults: FaultCounts,
        violations: Vec<Violation>,
    ) -> Self {
        trace.record(format!("end at {:?}", elapsed()));
        if std::env::var_os("RILL_PRINT_TRACE").is_some() {
            for e in trace.events() {
                println!("trace: {e}");
            }
        }
        Report { ops, acked, faults, violations, trace_hash: trace.hash(), events: trace.len(), compaction: None }
    }

    /// Prints the report in the form `chaos/run` parses.
    pub fn print(&self) {
        for v in &self.violations {
            println!("violation: {v}");
        }
        let compaction = self
            .compaction
            .map(|(clean_to, removed)| format!(" clean_to={clean_to} removed={removed}"))
            .unwrap_or_default();
        println!(
            "stats: ops={} acked={} crash={} power={} partition={} pause={} loss={} delay={} violations={}{compaction}",
            self.ops,
            self.acked,
            self.faults.get("crash"),
            self.faults.get("power"),
            self.faults.get("partition"),
            self.faults.get("pause"),
            self.faults.get("loss"),
            self.faults.get("delay"),
            self.violations.len()
        );
        println!("trace-hash: {:016x} events={}", self.trace_hash, self.events);
    }
}

fn elapsed() -> Duration {
    madsim::time::TimeHandle::current().elapsed()
}

/// How much longer a generated scenario's fault phase is with `RILL_SIM_LONG` set
/// (`chaos/run --long`): ten times the operations and faults per seed.
pub const LONG_FACTOR: u32 = 10;

/// The fault phase of `scenario` in this run: `LONG_FACTOR` times longer with `RILL_SIM_LONG`.
fn fault_phase(scenario: &Scenario) -> Duration {
    fault_phase_of(scenario.fault_phase)
}

/// A fault phase of `base` in this run: `LONG_FACTOR` times longer with `RILL_SIM_LONG`.
pub fn fault_phase_of(base: Duration) -> Duration {
    let long = std::env::var("RILL_SIM_LONG").is_ok_and(|v| !v.is_empty() && v != "0");
    if long {
        base * LONG_FACTOR
    } else {
        base
    }
}

/// The start every generated scenario shares: prints and traces `scenario`'s seed and the armed
/// mutation, and starts 3 nodes with `client_hosts` client hosts, a seed-drawn sync latency,
/// `transactional_id_expiration` (`None`: the server's default) and the consumer group members'
/// `groups` timeouts (`None`: [`SimOptions::groups`]'s). Returns the trace, the fault phase
/// (`base`, longer with `RILL_SIM_LONG`) and the cluster.
pub fn start_generated(
    scenario: &str,
    base: Duration,
    client_hosts: u32,
    transactional_id_expiration: Option<Duration>,
    groups: Option<rill_coordinator::groups::Timeouts>,
) -> (Trace, Duration, Arc<SimCluster>) {
    let seed = madsim::runtime::Handle::current().seed();
    println!("seed: {seed}");
    let trace = Trace::new();
    trace.record(format!("scenario {scenario} seed {seed}"));
    if let Some(m) = arm_mutation() {
        println!("mutation: {m}");
        trace.record(format!("mutation {m}"));
    }
    let phase = fault_phase_of(base);
    let cluster = Arc::new(SimCluster::start_with(SimOptions {
        nodes: 3,
        client_hosts,
        sync_latency: Duration::from_micros(rill_rt::rng().gen_range(500..8000)),
        transactional_id_expiration,
        groups,
        producer_limits: None,
        transaction_state_partitions: None,
    }));
    if let Some(t) = groups {
        println!("groups: session {} ms, heartbeat interval {} ms", t.session_ms, t.heartbeat_interval_ms);
        trace.record(format!("groups: session {} ms, heartbeat interval {} ms", t.session_ms, t.heartbeat_interval_ms));
    }
    (trace, phase, cluster)
}

/// Until `phase` has passed: every 1.5–4 s, one of `controls` (drawn from the seed) is told to
/// crash its instance (`who` names them in the trace). Returns how many crashes it ordered.
pub async fn crash_now_and_then(controls: &[Arc<AtomicU8>], phase: Duration, trace: &Trace, who: &str) -> u32 {
    let mut rng = rill_rt::rng();
    let end = rill_rt::now() + phase;
    let mut crashes = 0u32;
    while rill_rt::now() < end {
        rill_rt::sleep(Duration::from_millis(rng.gen_range(1500..4000))).await;
        let pick = rng.gen_range(0..controls.len());
        controls[pick].store(crate::group_run::CRASH, Ordering::SeqCst);
        let at = madsim::time::TimeHandle::current().elapsed();
        trace.record(format!("{who} {pick}'s instance crashes at {at:?}"));
        crashes += 1;
    }
    crashes
}

/// Switches on the mutation named in `RILL_MUTATION`, if any. Returns its name.
pub fn arm_mutation() -> Option<&'static str> {
    let name = std::env::var("RILL_MUTATION").ok().filter(|n| !n.is_empty())?;
    let Some(m) = rill_rt::mutation::Mutation::from_name(&name) else {
        panic!("RILL_MUTATION={name} is not a known mutation");
    };
    rill_rt::mutation::set(&[m]);
    Some(m.name())
}

/// Runs `scenario` on the current simulation seed.
pub async fn run(scenario: &Scenario) -> Report {
    let seed = madsim::runtime::Handle::current().seed();
    println!("seed: {seed}");
    let trace = Trace::new();
    trace.record(format!("scenario {} seed {seed}", scenario.name));
    if let Some(m) = arm_mutation() {
        println!("mutation: {m}");
        trace.record(format!("mutation {m}"));
    }
    let phase = fault_phase(scenario);
    trace.record(format!("fault phase {phase:?}"));
    let sync_latency = Duration::from_micros(rill_rt::rng().gen_range(500..8000));
    trace.record(format!("disk sync latency {sync_latency:?}"));
    let processes = scenario.producers + scenario.consumers + u32::from(scenario.trimmer);
    let cluster = Arc::new(SimCluster::start_with(SimOptions {
        nodes: scenario.nodes,
        client_hosts: processes + 1,
        sync_latency,
        transactional_id_expiration: None,
        groups: None,
        producer_limits: scenario.producer_churn.map(|c| rill_broker::producers::ProducerLimits {
            max_per_partition: c.max_per_partition,
            evictable_after: c.evictable_after,
        }),
        transaction_state_partitions: None,
    }));
    let mut violations = Vec::new();

    // --- setup: the workload topic, with every partition led
    let admin = cluster.client().await;
    let rf = scenario.replication_factor;
    let parts = scenario.partitions;
    let topic_configs = scenario.topic_configs;
    let c = admin.clone();
    let created = cluster
        .on_client(async move {
            let mut configs = vec![("replica.lag.time.max.ms".to_string(), "3000".to_string())];
            configs.extend(topic_configs.iter().map(|(k, v)| (k.to_string(), v.to_string())));
            loop {
                match c.create_topic(TOPIC, parts, rf, &configs).await {
                    Ok(_) => return Ok(()),
                    Err(e) if e.code() == Some(rill_client::ErrorCode::TopicAlreadyExists) => return Ok(()),
                    Err(e) if e.is_retriable_without_effect() || e.code().is_none() => {
                        rill_rt::sleep(Duration::from_millis(200)).await
                    }
                    Err(e) => return Err(e.to_string()),
                }
            }
        })
        .await;
    if let Err(e) = created {
        panic!("cannot create the workload topic: {e}");
    }
    if let Err(e) = wait_for_leaders(&cluster, &admin, LIVENESS_BOUND).await {
        panic!("setup: {e}");
    }
    let groups: Vec<GroupId> = {
        let node = cluster.ids().into_iter().find_map(|id| cluster.node(id)).expect("a node is up");
        let meta = node.meta();
        meta.topics.get(TOPIC).expect("topic exists").partitions.iter().map(|p| p.group).collect()
    };
    trace.record(format!("setup done at {:?}, groups {groups:?}", elapsed()));

    // --- fault phase: workload, watermark sampling, faults
    let (acks, required) = match scenario.acks {
        AcksLevel::All => (Acks::All, rf as usize / 2 + 1),
        AcksLevel::Leader => (Acks::Leader, 1),
    };
    let recorder = Recorder::new(scenario.acks == AcksLevel::All);
    if scenario.compacted() {
        recorder.set_compacted();
    }
    let oracle = AckOracle::new(&cluster, groups.clone(), scenario.compacted());
    if scenario.acks == AcksLevel::Leader {
        oracle.watch_leader_acks();
    }
    let w = Workload {
        topic: TOPIC.into(),
        partitions: parts,
        acks,
        required_copies: required,
        produce_timeout: Duration::from_secs(2),
        deadline: rill_rt::now() + phase,
        retry_grace: Duration::from_secs(30),
        recorder: recorder.clone(),
        oracle: oracle.clone(),
        keys_per_partition: scenario.keys_per_partition,
        churn: scenario.producer_churn,
        acked_producers: Default::default(),
    };
    let mut workers = Vec::new();
    for i in 0..processes {
        let host = cluster.client_host(i as usize + 1).clone();
        let bootstrap = cluster.bootstrap();
        let w = w.clone();
        let is_producer = i < scenario.producers;
        let is_trimmer = i >= scenario.producers + scenario.consumers;
        let idempotent = scenario.idempotent;
        workers.push(host.spawn(async move {
            let client = connect(bootstrap).await;
            match (is_producer, idempotent) {
                _ if is_trimmer => workload::trimmer(i, client, w).await,
                (true, true) => workload::idempotent_producer(i, client, w).await,
                (true, false) => workload::producer(i, client, w).await,
                (false, _) => workload::consumer(i, client, w).await,
            }
        }));
    }
    let samples = Arc::new(Mutex::new(Vec::new()));
    let sampling = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = {
        let cluster = cluster.clone();
        let samples = samples.clone();
        let sampling = sampling.clone();
        // Compacted topics: how far replicas may have compacted, as polls complete.
        let cleaning = scenario.compacted().then(|| (groups.clone(), recorder.clone()));
        madsim::task::spawn(async move {
            while sampling.load(std::sync::atomic::Ordering::Relaxed) {
                oracle::sample_watermarks(&cluster, &mut samples.lock().unwrap_or_else(|p| p.into_inner()));
                if let Some((groups, recorder)) = &cleaning {
                    for (p, g) in groups.iter().enumerate() {
                        recorder.sample_cleaning(p as u32, cleaning_point(&cluster, *g).0);
                    }
                }
                rill_rt::sleep(SAMPLE_EVERY).await;
            }
        })
    };
    let enabled = faults::enabled_faults(scenario.faults);
    trace.record(format!("enabled faults {enabled:?}"));
    let fault_counts = faults::inject(&cluster, &enabled, phase, &trace).await;
    for worker in workers {
        let _ = worker.await;
    }
    trace.record(format!("fault phase over at {:?}", elapsed()));

    // --- liveness: leaders, convergence, every acknowledged write readable
    if let Err(e) = wait_for_leaders(&cluster, &admin, LIVENESS_BOUND).await {
        violations.push(Violation { checker: "liveness", detail: e });
    }
    if let Err(e) = wait_for_convergence(&cluster, &groups, LIVENESS_BOUND).await {
        violations.push(Violation { checker: "liveness", detail: e });
    }
    let starts = log_starts(&cluster, &groups);
    trace.record(format!("log starts (node, applied index, start) {starts:?}"));
    violations.extend(checkers::deleted_records::check_replicas(&starts));
    sampling.store(false, std::sync::atomic::Ordering::Relaxed);
    let _ = sampler.await;
    let history_so_far = recorder.snapshot();
    let mut must_reach: BTreeMap<u32, u64> = BTreeMap::new();
    if history_so_far.acks_promise_offsets {
        for (_, p, _, o) in history_so_far.acked_sends() {
            let e = must_reach.entry(p).or_insert(0);
            *e = (*e).max(o + 1);
        }
    }
    let reader = cluster.client().await;
    let w2 = w.clone();
    if let Err(e) = cluster.on_client(workload::final_reads(reader, w2, must_reach, LIVENESS_BOUND)).await {
        violations.push(Violation { checker: "liveness", detail: e });
    }
    trace.record(format!("final reads done at {:?}", elapsed()));
    let compaction = if scenario.compacted() {
        for (p, g) in groups.iter().enumerate() {
            let point = cleaning_point(&cluster, *g);
            trace.record(format!("partition {p} cleaning point {point:?}"));
            recorder.final_cleaning_point(p as u32, point);
        }
        let (lowest, removed) = compaction_done(&recorder.snapshot());
        if lowest == 0 || removed == 0 {
            violations.push(Violation {
                checker: "compaction-idle",
                detail: format!(
                    "the scenario tested no compaction: lowest final clean_to {lowest}, {removed} acknowledged records removed"
                ),
            });
        }
        Some((lowest, removed))
    } else {
        None
    };

    if let Some(churn) = scenario.producer_churn {
        let acked = w.acked_producers.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let counts: Vec<usize> = (0..parts).map(|p| acked.get(&p).map_or(0, |s| s.len())).collect();
        trace.record(format!("producers acknowledged per partition {counts:?}"));
        println!("producers acknowledged per partition: {counts:?} (a table holds {})", churn.max_per_partition);
        if counts.iter().any(|n| *n <= churn.max_per_partition) {
            violations.push(Violation {
                checker: "churn-idle",
                detail: format!(
                    "the scenario tested no eviction: producers acknowledged per partition {counts:?}, a table holds {}",
                    churn.max_per_partition
                ),
            });
        }
    }

    // --- checkers
    let history: History = recorder.snapshot();
    violations.extend(checkers::check_history(&history));
    violations.extend(checkers::ack_durability::check(&oracle.checks()));
    violations.extend(checkers::watermarks::check(&samples.lock().unwrap_or_else(|p| p.into_inner())));
    match oracle::replica_logs(&cluster) {
        Ok(logs) => {
            for l in &logs {
                trace.record(format!(
                    "replica node {} group {} hw {} entries {}",
                    l.node,
                    l.group,
                    l.high_watermark,
                    l.entries.len()
                ));
            }
            violations.extend(checkers::replicas_agree::check(&logs));
        }
        Err(e) => {
            violations.push(Violation { checker: "replicas-agree", detail: format!("cannot read a replica log: {e}") })
        }
    }
    for op in &history.ops {
        trace.record(format!("op {} p{} {:?} -> {:?}", op.id, op.process, op.kind, op.outcome));
    }
    for (p, r) in &history.final_reads {
        trace.record(format!("final {p}: {r:?}"));
    }
    trace.record(format!("end at {:?}", elapsed()));
    if std::env::var_os("RILL_PRINT_TRACE").is_some() {
        for e in trace.events() {
            println!("trace: {e}");
        }
    }
    Report {
        ops: history.ops.len(),
        acked: history.acked_sends().count(),
        faults: fault_counts,
        violations,
        trace_hash: trace.hash(),
        events: trace.len(),
        compaction,
    }
}

/// The highest cleaning point any live replica of `group` applied (points move forward along
/// one replicated sequence, so the furthest replica's is the newest).
fn cleaning_point(cluster: &SimCluster, group: GroupId) -> (u64, u64) {
    cluster
        .ids()
        .into_iter()
        .filter_map(|id| cluster.node(id).and_then(|n| n.partition_by_group(group)))
        .map(|p| p.cleaning_point())
        .max()
        .unwrap_or_default()
}

/// Proof that compaction ran: the lowest final `clean_to` over the partitions, and how many
/// acknowledged records (at or after the final read's start) the final reads lack.
fn compaction_done(history: &History) -> (u64, usize) {
    let lowest = history.cleaning.values().map(|(clean_to, _)| *clean_to).min().unwrap_or(0);
    let present: std::collections::HashSet<(u32, &str)> = history
        .final_reads
        .iter()
        .flat_map(|(p, records)| records.iter().map(move |(_, id)| (*p, id.as_str())))
        .collect();
    let removed = history
        .acked_sends()
        .filter(|(_, p, id, o)| {
            *o >= history.final_starts.get(p).copied().unwrap_or(0) && !present.contains(&(*p, *id))
        })
        .count();
    (lowest, removed)
}

/// Each group's replicas with the last log index each applied and its log start offset.
fn log_starts(cluster: &SimCluster, groups: &[GroupId]) -> BTreeMap<GroupId, Vec<ReplicaStart>> {
    groups
        .iter()
        .map(|g| {
            let starts = cluster
                .ids()
                .into_iter()
                .filter_map(|id| cluster.node(id).and_then(|n| n.partition_by_group(*g)).map(|p| (id, p)))
                .map(|(id, p)| {
                    let applied = p.state_machine().applied().log_id.map_or(0, |l| l.index);
                    (id, applied, p.log_start_offset())
                })
                .collect();
            (*g, starts)
        })
        .collect()
}

/// Waits until every partition of the workload topic reports a leader.
async fn wait_for_leaders(cluster: &SimCluster, admin: &rill_client::Client, bound: Duration) -> Result<(), String> {
    let c = admin.clone();
    cluster
        .on_client(async move {
            c.wait_for_leaders(TOPIC, bound)
                .await
                .map(|_| ())
                .map_err(|e| format!("some partition of {TOPIC} had no leader {bound:?} after the faults stopped: {e}"))
        })
        .await
}

/// Waits until every replica of every group is up, caught up and at one high watermark.
async fn wait_for_convergence(cluster: &SimCluster, groups: &[GroupId], bound: Duration) -> Result<(), String> {
    let deadline = rill_rt::now() + bound;
    loop {
        let mut pending = Vec::new();
        for g in groups {
            let states: Vec<_> = cluster
                .ids()
                .into_iter()
                .filter_map(|id| cluster.node(id))
                .filter_map(|n| n.partition_by_group(*g))
                .map(|p| p.state())
                .collect();
            let expected = cluster
                .node(cluster.ids()[0])
                .and_then(|n| n.meta().topics.get(TOPIC).map(|t| t.replication_factor as usize));
            let converged = Some(states.len()) == expected
                && states
                    .iter()
                    .all(|s| s.high_watermark == s.log_end_offset && s.high_watermark == states[0].high_watermark);
            if !converged {
                pending.push(format!(
                    "group {g}: {:?}",
                    states.iter().map(|s| (s.high_watermark, s.log_end_offset)).collect::<Vec<_>>()
                ));
            }
        }
        if pending.is_empty() {
            return Ok(());
        }
        if rill_rt::now() > deadline {
            return Err(format!("replicas did not converge within {bound:?}: {}", pending.join("; ")));
        }
        rill_rt::sleep(Duration::from_millis(100)).await;
    }
}
