//! confluent-kafka (librdkafka), a Kafka client no one here wrote, through the Kafka listener of
//! a 3-node cluster while its world fails under it.
//!
//! * An idempotent producer (`examples/python/gapless_producer.py`: acks=all, five requests in
//!   flight, `enable.gapless.guarantee`) writes numbered records while two partition leaders are
//!   SIGKILLed in turn: no delivery or fatal error, and every partition holds its numbers in
//!   order, once each, with no gap, read through Kafka and through gRPC.
//! * The exactly-once job of `examples/python/eos_job.py` — consuming, transforming and producing
//!   in transactions with `send_offsets_to_transaction` — while the leader of an input partition
//!   is SIGKILLed, then the leader of the job's transaction coordinator partition, then the job
//!   itself (its producer and its group's only member) mid-transaction; a second job with the
//!   same transactional id fences the first and finishes. The output at `read_committed`, read
//!   through Kafka and through `rill consume` (gRPC), holds every input exactly once, and the
//!   group's offsets are the input's ends.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use rill_client::Coordinator;

use crate::harness::{init_logs, read_all, text, wait_for, TestCluster};
use crate::t70_cli::rill;

const INPUT: &str = "eos-in";
const OUTPUT: &str = "eos-out";
const GROUP: &str = "t13-eos";
/// Enough input that the job is still running after three rounds of faults (about 25 records a
/// transaction, a third of them aborted and redone).
const RECORDS: usize = 6_000;
/// Committed transactions to wait for between faults: the job makes progress through each.
const PROGRESS: usize = 3;
/// How long the job and each wait may take on a busy machine.
const JOB_DEADLINE: Duration = Duration::from_secs(300);

fn examples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../examples/python")
}

/// The Python of the examples' virtual environment, made by its setup script (confluent-kafka
/// from PyPI).
fn python() -> Result<PathBuf> {
    let setup = Command::new(examples().join("setup.sh")).stdout(Stdio::null()).status().context("setup.sh")?;
    if !setup.success() {
        bail!("examples/python/setup.sh failed");
    }
    Ok(examples().join(".venv/bin/python"))
}

/// `script args…` with the examples' Python, its stderr appended to `log`.
fn script(python: &PathBuf, script: &str, args: &[&str], log: &std::path::Path) -> Result<Child> {
    let log = std::fs::OpenOptions::new().create(true).append(true).open(log)?;
    Command::new(python)
        .arg(examples().join(script))
        .args(args)
        .stdout(Stdio::piped())
        .stderr(log)
        .spawn()
        .with_context(|| format!("starting {script}"))
}

/// `eos_job.py step` against the cluster, its stderr to `log`.
fn job(python: &PathBuf, step: &str, bootstrap: &str, log: &std::path::Path, extra: &[&str]) -> Result<Child> {
    let records = RECORDS.to_string();
    let deadline = JOB_DEADLINE.as_secs().to_string();
    let mut args = vec![step, INPUT, OUTPUT, "--bootstrap", bootstrap, "--group", GROUP];
    args.extend(["--records", &records, "--deadline", &deadline]);
    args.extend(extra);
    script(python, "eos_job.py", &args, log)
}

/// Waits for `child` to exit; its stdout, or an error with the log's tail.
fn finished(child: Child, log: &std::path::Path) -> Result<String> {
    let output = child.wait_with_output()?;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    if !output.status.success() {
        let log = std::fs::read_to_string(log).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(30).collect();
        bail!("the script failed: {stdout}\n{}", tail.into_iter().rev().collect::<Vec<_>>().join("\n"));
    }
    Ok(stdout)
}

/// Transactions the job has committed so far, by its log.
fn committed(log: &std::path::Path) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("committed a transaction"))
        .count()
}

/// Waits until the job has committed `more` transactions beyond `from`.
async fn progress(log: &std::path::Path, from: usize, more: usize, what: &str) -> Result<usize> {
    wait_for(JOB_DEADLINE, what, || async {
        let now = committed(log);
        (now >= from + more).then_some(now)
    })
    .await
}

/// Records the idempotent producer writes (at most 400 a second and 500 unacknowledged: long
/// enough for two leader kills).
const GAPLESS_RECORDS: usize = 8_000;

/// The last `acknowledged N` the producer logged.
fn acknowledged(log: &std::path::Path) -> usize {
    let log = std::fs::read_to_string(log).unwrap_or_default();
    log.lines().filter_map(|l| l.strip_prefix("acknowledged ")?.parse().ok()).max().unwrap_or(0)
}

/// Waits until the producer has `more` acknowledgements beyond `from`.
async fn acknowledged_beyond(log: &std::path::Path, from: usize, more: usize, what: &str) -> Result<usize> {
    wait_for(JOB_DEADLINE, what, || async {
        let now = acknowledged(log);
        (now >= from + more).then_some(now)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idempotent_kafka_producer_leaves_no_gap_or_duplicate_while_leaders_are_sigkilled() -> Result<()> {
    init_logs();
    let python = python()?;
    let mut cluster = TestCluster::start(3).await?;
    let client = cluster.client().await?;
    const TOPIC: &str = "gapless";
    const PARTITIONS: u32 = 3;
    // acks=all waits for a killed follower to leave the ISR: after 5 s rather than the default
    // 30, so both kills land while the producer is still well short of its last record.
    cluster.create_topic(&client, TOPIC, PARTITIONS, 3, &[("replica.lag.time.max.ms", "5000")]).await?;
    let bootstrap = cluster.local().kafka_bootstrap().join(",");
    let dir = tempfile::tempdir()?;
    let log = dir.path().join("producer.log");
    let records = GAPLESS_RECORDS.to_string();
    let producer =
        script(&python, "gapless_producer.py", &[TOPIC, "--bootstrap", &bootstrap, "--records", &records], &log)?;

    let mut seen = acknowledged_beyond(&log, 0, 1_000, "the first acknowledgements").await?;
    for partition in [0, 1] {
        let described = cluster.wait_for_leaders(&client, TOPIC).await?;
        let leader = described.partitions[partition].leader.context("a leader")?;
        if seen + 2_000 > GAPLESS_RECORDS {
            bail!("the producer is nearly done ({seen} acknowledged) before the faults: raise GAPLESS_RECORDS");
        }
        tracing::info!(partition, leader, seen, "--- SIGKILL of the partition's leader under the producer");
        let killed_at = std::time::Instant::now();
        cluster.kill(leader)?;
        seen = acknowledged_beyond(&log, seen, 500, "acknowledgements after the kill").await?;
        tracing::info!(partition, waited_ms = killed_at.elapsed().as_millis() as u64, "acknowledgements resumed");
        cluster.start_node(leader)?;
        seen = acknowledged_beyond(&log, seen, 500, "acknowledgements after the restart").await?;
    }
    let produced = finished(producer, &log)?;
    assert!(produced.contains("no delivery or fatal error"), "{produced}");

    let check = script(
        &python,
        "gapless_producer.py",
        &[TOPIC, "--bootstrap", &bootstrap, "--records", &records, "--check"],
        &log,
    )?;
    let checked = finished(check, &log)?;
    assert!(checked.contains("in order, once each, with no gap"), "{checked}");
    // The same through gRPC.
    for partition in 0..PARTITIONS {
        let values: Vec<String> = read_all(&client, TOPIC, partition).await?.iter().map(|r| text(&r.value)).collect();
        let expected: Vec<String> =
            (partition as usize..GAPLESS_RECORDS).step_by(PARTITIONS as usize).map(|i| i.to_string()).collect();
        assert!(
            values == expected,
            "partition {partition} over gRPC: {} records, not its {} in order",
            values.len(),
            expected.len()
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exactly_once_job_survives_leader_coordinator_and_member_sigkills() -> Result<()> {
    init_logs();
    let python = python()?;
    let mut cluster = TestCluster::start(3).await?;
    let client = cluster.client().await?;
    let input = cluster.create_topic(&client, INPUT, 3, 3, &[]).await?;
    cluster.create_topic(&client, OUTPUT, 3, 3, &[]).await?;
    let bootstrap = cluster.local().kafka_bootstrap().join(",");
    let dir = tempfile::tempdir()?;
    let log = dir.path().join("job.log");

    let fill = job(&python, "fill", &bootstrap, &log, &[])?;
    finished(fill, &log)?;

    tracing::info!("--- the job runs; an input partition's leader is SIGKILLed under it");
    let first = job(&python, "run", &bootstrap, &log, &[])?;
    let seen = progress(&log, 0, PROGRESS, "the job's first transactions").await?;
    let leader = input.partitions[0].leader.context("a leader of eos-in/0")?;
    cluster.kill(leader)?;
    let seen = progress(&log, seen, PROGRESS, "transactions after the input leader's kill").await?;
    cluster.start_node(leader)?;

    tracing::info!("--- the leader of the job's transaction coordinator partition is SIGKILLed");
    let (coordinator, _) = client.find_coordinator(Coordinator::Transaction, &format!("{GROUP}-producer")).await?;
    cluster.kill(coordinator)?;
    let seen = progress(&log, seen, PROGRESS, "transactions after the coordinator's kill").await?;
    cluster.start_node(coordinator)?;
    let seen = progress(&log, seen, PROGRESS, "transactions after the coordinator's restart").await?;

    tracing::info!("--- the job itself is SIGKILLed mid-run; a second one fences it and finishes");
    let mut first = first;
    if first.try_wait()?.is_some() {
        bail!("the job finished before it could be killed ({seen} transactions): raise RECORDS");
    }
    first.kill()?;
    first.wait()?;
    let second = job(&python, "run", &bootstrap, &log, &[])?;
    finished(second, &log)?;

    let job_log = std::fs::read_to_string(&log)?;
    let count = |prefix: &str| job_log.lines().filter(|l| l.starts_with(prefix)).count();
    tracing::info!(
        committed = count("committed a transaction"),
        aborted_by_faults = count("aborting:"),
        retried = job_log.lines().filter(|l| l.ends_with("; retrying")).count(),
        "the jobs' log"
    );

    let dump = dir.path().join("output");
    let verify = job(&python, "verify", &bootstrap, &log, &["--dump", dump.to_str().context("a path")?])?;
    let verified = finished(verify, &log)?;
    assert!(verified.contains(&format!("each of the {RECORDS} inputs is in the output exactly once")), "{verified}");
    assert!(verified.contains("the group's offsets, committed in the transactions, are the input's ends"));

    // The same output through gRPC, by the rill CLI at read_committed.
    let records = RECORDS.to_string();
    let consumed = rill(
        &cluster,
        &[
            "consume",
            OUTPUT,
            "--from-beginning",
            "--isolation-level",
            "read_committed",
            "--max-messages",
            &records,
            "--timeout-ms",
            "10000",
        ],
        None,
    )?;
    let mut through_grpc: Vec<String> = String::from_utf8_lossy(&consumed.stdout).lines().map(str::to_string).collect();
    through_grpc.sort();
    let through_kafka: Vec<String> = std::fs::read_to_string(&dump)?.lines().map(str::to_string).collect();
    assert_eq!(through_grpc.len(), RECORDS);
    assert!(through_grpc == through_kafka, "rill consume and the Kafka reader disagree");
    Ok(())
}
