//! `rill-bench` (also run as `rill bench`): workloads against Rill and its peers in one run
//! (see `docs/benchmarks.md`). A binary of its own, so `rill` does not link the peers' client
//! libraries (NATS, Redis, RabbitMQ).

/// mimalloc rather than the system allocator: the bench's clients (Rill's and the peers')
/// allocate per record; glibc's malloc/free took ~18% of the bench client's CPU at max rate.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Parser;
use rill_bench::groups::heartbeats::HeartbeatSettings;
use rill_bench::groups::rebalance::RebalanceSettings;
use rill_bench::runner::{PayloadKind, RunSettings};
use rill_bench::systems::{Env, Variant};
use rill_bench::workload::Workload;
use rill_bench::{disk, groups, report, scenarios, BenchPlan};
use serde_json::json;

/// Output style.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Default)]
enum Output {
    /// Human-readable tables.
    #[default]
    Table,
    /// JSON.
    Json,
}

/// Benchmark Rill (and, with --peers, NATS JetStream, RabbitMQ, Redis) on this machine.
#[derive(Debug, Parser)]
#[command(name = "rill-bench", version, about = "Benchmark Rill and its peers on this machine, in one run")]
struct BenchArgs {
    /// Workload files, or names of files in --workloads-dir (repeatable).
    #[arg(long = "workload", short = 'w')]
    workloads: Vec<String>,
    /// Where workload names are looked up.
    #[arg(long, default_value = "bench/workloads")]
    workloads_dir: PathBuf,
    /// Peers to run the same workloads against: nats, rabbitmq, redis (comma-separated).
    #[arg(long, value_delimiter = ',')]
    peers: Vec<String>,
    /// Exact system variants to run instead of Rill's three plus --peers (comma-separated;
    /// e.g. rill-acks-all-rf3,nats-r3-lazy).
    #[arg(long, value_delimiter = ',')]
    systems: Vec<String>,
    /// Produce-phase length per run (overrides testDurationMinutes).
    #[arg(long, value_parser = humantime::parse_duration)]
    duration: Option<Duration>,
    /// Excluded from measurement at the start of each run.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "5s")]
    warmup: Duration,
    /// Repeat every (system, workload) this many times, alternating systems; the table shows
    /// the median run by throughput.
    #[arg(long, default_value_t = 1)]
    rounds: u32,
    /// Also run each max-rate workload at 50% of the first system's measured maximum.
    #[arg(long)]
    half_rate: bool,
    /// Override messageSize of every workload.
    #[arg(long)]
    message_size: Option<usize>,
    /// Override producerRate (msg/s, 0 = max) of every workload.
    #[arg(long)]
    rate: Option<u64>,
    /// Override partitionsPerTopic of every workload.
    #[arg(long)]
    partitions: Option<u32>,
    /// Override maxInFlight (messages awaiting acknowledgement per producer).
    #[arg(long)]
    in_flight: Option<usize>,
    /// Also run Rill-only scenarios: idle, failover, restart, compaction, soak, catch-up,
    /// group-rebalance, group-failover, group-heartbeats, transactions (comma-separated), or skip the
    /// throughput runs with --scenarios-only.
    #[arg(long, value_delimiter = ',')]
    scenario: Vec<String>,
    /// Run only the scenarios, no workloads.
    #[arg(long)]
    scenarios_only: bool,
    /// Partitions for the idle scenario.
    #[arg(long, default_value_t = 1000)]
    idle_partitions: u32,
    /// Payload megabytes written before the restart scenario's restart.
    #[arg(long, default_value_t = 1000)]
    restart_mb: u64,
    /// Rounds per topic in the compaction scenario (alternating plain and compacted).
    #[arg(long, default_value_t = 3)]
    compaction_rounds: u32,
    /// Length of one round of the compaction scenario.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "40s")]
    compaction_round: Duration,
    /// Distinct keys the compaction scenario writes.
    #[arg(long, default_value_t = 10_000)]
    compaction_keys: u32,
    /// `retention.bytes` per partition of the soak scenario, in MiB.
    #[arg(long, default_value_t = 64)]
    soak_retention_mb: u64,
    /// How many times its retention the soak scenario writes to each partition.
    #[arg(long, default_value_t = 10)]
    soak_factor: u64,
    /// Payload megabytes the catch-up scenario's follower misses.
    #[arg(long, default_value_t = 1000)]
    catch_up_mb: u64,
    /// `retention.bytes` (MiB per partition) of the catch-up scenario's second round, which the
    /// follower catches up from by a snapshot carrying that much per partition.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=1 << 20))]
    catch_up_retention_mb: u64,
    /// Leader kills in the failover scenario.
    #[arg(long, default_value_t = 5)]
    failover_kills: u32,
    /// Consumer group members' heartbeat interval in the group scenarios (the nodes'
    /// `[groups] heartbeat-interval`; 5s is Rill's and Kafka's default).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "5s")]
    group_heartbeat_interval: Duration,
    /// Records per second (over 6 partitions) in the group-rebalance scenario.
    #[arg(long, default_value_t = 600)]
    group_rebalance_rate: u64,
    /// Members the group-rebalance scenario grows to, one join at a time.
    #[arg(long, default_value_t = 6)]
    group_rebalance_members: usize,
    /// Least wait after the group is stable before the next member joins (group-rebalance);
    /// each join adds a different fraction of the heartbeat interval, so joins fall at spread
    /// phases of the members' heartbeats.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "3s")]
    group_join_after: Duration,
    /// How long each member's poll waits for records in the group-rebalance scenario (a
    /// member acts on a new assignment only inside poll).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "100ms")]
    group_poll_timeout: Duration,
    /// Coordinator kills in the group-failover scenario.
    #[arg(long, default_value_t = 5)]
    group_failover_kills: u32,
    /// Groups (3 members each) in the group-heartbeats scenario.
    #[arg(long, default_value_t = 1000)]
    heartbeat_groups: u32,
    /// CPU measuring window of the group-heartbeats scenario (idle, then with the groups).
    #[arg(long, value_parser = humantime::parse_duration, default_value = "30s")]
    heartbeat_measure: Duration,
    /// In the group-heartbeats scenario, heartbeats answered at once with a sleep between them,
    /// instead of one held at the coordinator as the client keeps (a long poll).
    #[arg(long)]
    heartbeats_plain: bool,
    /// How long each producer mode runs per round in the transactions scenario.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    txn_round: Duration,
    /// Rounds of every producer mode in the transactions scenario (the median is kept).
    #[arg(long, default_value_t = 3)]
    txn_rounds: u32,
    /// Message filler: `distinct` random bytes per message (what a system's own compression
    /// cannot shrink), or `repeated`, the same bytes in every message (the OpenMessaging
    /// Benchmark's single payload file, which flatters systems that compress stored batches).
    #[arg(long, default_value = "distinct")]
    payload: PayloadKind,
    /// Rill producers without idempotence (plain retries; shows what deduplication costs).
    #[arg(long)]
    no_idempotence: bool,
    /// Data directory for every system (on disk, not tmpfs).
    #[arg(long, default_value = "/var/tmp/rill-bench")]
    data_dir: PathBuf,
    /// First loopback port the bench may use (it takes about 80 from here).
    #[arg(long, default_value_t = 17000)]
    base_port: u16,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Output::Table)]
    output: Output,
}

fn load_workloads(args: &BenchArgs) -> anyhow::Result<Vec<Workload>> {
    let names = if args.workloads.is_empty() {
        vec!["max-rate-1-topic-16-partitions-1kb".to_string()]
    } else {
        args.workloads.clone()
    };
    let mut out = Vec::new();
    for name in names {
        let path = if Path::new(&name).is_file() {
            PathBuf::from(&name)
        } else {
            args.workloads_dir.join(format!("{name}.yaml"))
        };
        if !path.is_file() {
            bail!("no workload {name} ({} does not exist)", path.display());
        }
        let mut w = Workload::load(&path)?;
        if let Some(s) = args.message_size {
            w.message_size = s;
        }
        if let Some(r) = args.rate {
            w.producer_rate = r;
        }
        if let Some(p) = args.partitions {
            w.partitions_per_topic = p;
        }
        if let Some(f) = args.in_flight {
            w.max_in_flight = f;
        }
        w.validate().with_context(|| format!("workload {} after overrides", w.name))?;
        out.push(w);
    }
    Ok(out)
}

fn variants(args: &BenchArgs) -> anyhow::Result<Vec<Variant>> {
    if !args.systems.is_empty() {
        return args.systems.iter().map(|s| Variant::parse(s)).collect();
    }
    let mut v = Variant::RILL.to_vec();
    v.extend(Variant::of_peers(&args.peers)?);
    Ok(v)
}

fn main() -> ExitCode {
    let args = BenchArgs::parse();
    init_logging();
    let runtime = match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The Rill-only scenarios `--scenario` accepts.
const SCENARIOS: [&str; 10] = [
    "idle",
    "failover",
    "restart",
    "compaction",
    "soak",
    "catch-up",
    "group-rebalance",
    "group-failover",
    "group-heartbeats",
    "transactions",
];

/// Runs the bench, stopping it when its data directory's file system runs low or on Ctrl-C
/// (see [`rill_bench::disk`]).
async fn run(args: BenchArgs) -> anyhow::Result<()> {
    let env = Env {
        data_dir: args.data_dir.clone(),
        base_port: args.base_port,
        rill_server: rill_launcher::server_binary(),
        rill_idempotence: !args.no_idempotence,
        created: Default::default(),
    };
    std::fs::create_dir_all(&env.data_dir).with_context(|| format!("cannot create {}", env.data_dir.display()))?;
    disk::ensure_room(&env.data_dir, disk::MIN_FREE_BYTES)?;
    let mut measuring = Box::pin(measure(args, env.clone()));
    let stopped = tokio::select! {
        done = &mut measuring => return done,
        e = disk::exhausted(&env.data_dir, disk::MIN_FREE_BYTES) => e,
        () = interrupted() => anyhow::anyhow!("interrupted; the run's data is removed"),
    };
    // Stopping the systems can take a while (each process gets a grace period): a second
    // Ctrl-C exits at once.
    eprintln!("stopping: {stopped:#} (Ctrl-C again to exit at once)");
    tokio::spawn(async {
        interrupted().await;
        std::process::exit(130);
    });
    // Dropping the run stops every system it started, before their directories go.
    drop(measuring);
    env.created.remove_all();
    Err(stopped)
}

/// Resolves on Ctrl-C; never, if the signal cannot be waited for.
async fn interrupted() {
    if tokio::signal::ctrl_c().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Runs every set-up and scenario asked for, and prints the results.
async fn measure(args: BenchArgs, env: Env) -> anyhow::Result<()> {
    for s in &args.scenario {
        if !SCENARIOS.contains(&s.as_str()) {
            bail!("unknown scenario {s}; known: {}", SCENARIOS.join(", "));
        }
    }
    let json_out = args.output == Output::Json;
    let mut results = Vec::new();
    if !args.scenarios_only {
        let plan = BenchPlan {
            workloads: load_workloads(&args)?,
            variants: variants(&args)?,
            half_rate: args.half_rate,
            rounds: args.rounds,
            env: env.clone(),
            settings: RunSettings {
                duration: args.duration,
                warmup: args.warmup,
                progress: !json_out,
                payload: args.payload,
            },
        };
        eprintln!(
            "systems: {}\nworkloads: {}",
            plan.variants.iter().map(|v| v.name()).collect::<Vec<_>>().join(", "),
            plan.workloads.iter().map(|w| format!("{} ({})", w.name, w.shape())).collect::<Vec<_>>().join("; ")
        );
        results = report::medians(rill_bench::run_plan(&plan).await?);
    }
    let ratios = report::ratios(&results);

    let mut idle = None;
    let mut failover = None;
    let mut restart = None;
    let mut compaction = None;
    let mut soak = None;
    let mut catch_up = None;
    let mut group_rebalance = None;
    let mut group_failover = None;
    let mut group_heartbeats = None;
    let mut txn = None;
    for s in &args.scenario {
        match s.as_str() {
            "group-rebalance" => {
                let settings = RebalanceSettings {
                    rate: args.group_rebalance_rate,
                    max_members: args.group_rebalance_members,
                    join_after: args.group_join_after,
                    heartbeat_interval: args.group_heartbeat_interval,
                    poll_timeout: args.group_poll_timeout,
                };
                group_rebalance = Some(groups::rebalance::group_rebalance(&env, &settings).await?)
            }
            "group-failover" => {
                group_failover = Some(
                    groups::failover::group_failover(&env, args.group_failover_kills, args.group_heartbeat_interval)
                        .await?,
                )
            }
            "group-heartbeats" => {
                let settings = HeartbeatSettings {
                    groups: args.heartbeat_groups,
                    heartbeat_interval: args.group_heartbeat_interval,
                    measure: args.heartbeat_measure,
                    held: !args.heartbeats_plain,
                };
                group_heartbeats = Some(groups::heartbeats::group_heartbeats(&env, &settings).await?)
            }
            "transactions" => {
                txn = Some(rill_bench::transactions::transactions(&env, args.txn_round, args.txn_rounds).await?)
            }
            "idle" => {
                idle = Some(scenarios::idle_partitions(&env, args.idle_partitions, Duration::from_secs(30)).await?)
            }
            "failover" => failover = Some(scenarios::failover(&env, args.failover_kills, 2000).await?),
            "soak" => soak = Some(scenarios::soak(&env, args.soak_retention_mb, args.soak_factor).await?),
            "catch-up" => {
                catch_up = Some(scenarios::catch_up(&env, args.catch_up_mb, args.catch_up_retention_mb).await?)
            }
            "compaction" => {
                compaction = Some(
                    scenarios::compaction(&env, args.compaction_rounds, args.compaction_round, args.compaction_keys)
                        .await?,
                )
            }
            _ => restart = Some(scenarios::restart(&env, args.restart_mb).await?),
        }
    }

    if json_out {
        let doc = json!({
            "results": results,
            "ratios": ratios,
            "idle": idle,
            "failover": failover,
            "restart": restart,
            "compaction": compaction,
            "soak": soak,
            "catch_up": catch_up,
            "group_rebalance": group_rebalance,
            "group_failover": group_failover,
            "group_heartbeats": group_heartbeats,
            "transactions": txn,
        });
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(());
    }
    if !results.is_empty() {
        println!("{}", report::table(&results));
        println!("{}", report::legend(&results));
        let r = report::ratio_table(&ratios);
        if !r.is_empty() {
            println!("{r}");
        }
    }
    if let Some(i) = idle {
        let per_node: Vec<String> = i.cpu_percent_per_node.iter().map(|c| format!("{c:.1}%")).collect();
        println!(
            "idle: {} partitions (RF 3), CPU per node over {:.0} s: {} (quiescent at start/end: {}/{})",
            i.partitions,
            i.seconds,
            per_node.join(", "),
            i.quiescent_partitions.0,
            i.quiescent_partitions.1
        );
    }
    if let Some(f) = failover {
        let ms: Vec<String> = f.failover_ms.iter().map(|m| format!("{m:.0}")).collect();
        println!(
            "failover: SIGKILL leader → first acks=all write: {} ms (load {} msg/s, {} failed sends)",
            ms.join(", "),
            f.load_msgs_per_sec,
            f.load_errors
        );
    }
    if let Some(r) = restart {
        println!(
            "restart: {:.0} MB payload ({:.0} MB on disk), start → every partition writable at its old HW: {:.0} ms; \
             one node alone → every partition takes an acks=all write with it in sync: {:.0} ms",
            r.payload_bytes as f64 / 1e6,
            r.disk_bytes as f64 / 1e6,
            r.restart_ms,
            r.one_node_restart_ms
        );
    }
    if let Some(s) = soak {
        let mb = |v: &[u64]| v.iter().map(|b| format!("{:.0}", *b as f64 / 1e6)).collect::<Vec<_>>().join(", ");
        println!(
            "soak: {:.0} MB written in {:.0} s to {} partitions keeping {:.0} MB each ({} MiB segments): \
             largest data directory per node {} MB, at the end {} MB (bound {:.0} MB)",
            s.payload_bytes as f64 / 1e6,
            s.write_seconds,
            s.partitions,
            s.retention_bytes as f64 / 1e6,
            s.segment_bytes >> 20,
            mb(&s.max_node_bytes),
            mb(&s.final_node_bytes),
            s.bound_bytes as f64 / 1e6
        );
    }
    if let Some(c) = catch_up {
        println!(
            "catch-up: a follower that missed {:.0} MB is back in every ISR {:.0} ms after it starts (by replication); \
             {:.0} ms when retention ({} MiB per partition) deleted what it had (by a snapshot carrying the retained records)",
            c.missed_bytes as f64 / 1e6,
            c.replicated_ms,
            c.snapshot_ms,
            c.retention_mib
        );
    }
    if let Some(c) = compaction {
        let rates = |v: &[f64]| v.iter().map(|r| format!("{r:.0}")).collect::<Vec<_>>().join(", ");
        println!(
            "compaction: {} keys, 1 KB values, {:.0} s rounds: plain {} msg/s; compacted {} msg/s; median ratio {:.2}; \
             compacted partition 0 holds {} records in {} offsets",
            c.keys,
            c.round_seconds,
            rates(&c.plain_msgs_per_sec),
            rates(&c.compacted_msgs_per_sec),
            c.ratio,
            c.partition0_records,
            c.partition0_offsets
        );
    }
    if let Some(t) = &txn {
        print!("{}", rill_bench::transactions::summary(t));
    }
    if let Some(r) = group_rebalance {
        println!("{}", groups::report::group_rebalance_table(&r));
    }
    if let Some(f) = group_failover {
        println!("{}", groups::report::group_failover_summary(&f));
    }
    if let Some(h) = group_heartbeats {
        println!("{}", groups::report::group_heartbeats_summary(&h));
    }
    Ok(())
}

/// Client-side logs (retries, refusals) go to stderr when `RILL_LOG` is set, in `RUST_LOG`
/// syntax (e.g. `RILL_LOG=rill_client=debug`), as for `rill`: what a slow scenario is waiting on.
fn init_logging() {
    let Ok(filter) = std::env::var("RILL_LOG") else { return };
    let filter = tracing_subscriber::EnvFilter::try_new(&filter).unwrap_or_else(|e| {
        eprintln!("warning: RILL_LOG={filter:?} is not a valid filter ({e}); logging warnings only");
        tracing_subscriber::EnvFilter::new("warn")
    });
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
}
