//! Rill-only measurements beyond throughput: CPU of idle partitions, leader failover under
//! load, restart time with a large log, produce throughput while compaction runs, disk use
//! under retention, and how long a follower that missed data takes to catch up.

use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use bytes::Bytes;
use rill_client::{Acks, Client, ClientOptions, OffsetSpec, Producer, ProducerConfig, Record};
use serde::Serialize;

use crate::systems::rill::{start, start_with, wait_for_leaders, wait_for_partitions, READY_TIMEOUT};
use crate::systems::Env;

/// CPU use of a cluster holding many idle partitions.
#[derive(Debug, Clone, Serialize)]
pub struct IdleResult {
    /// Partitions (each replicated 3 ways).
    pub partitions: u32,
    /// Seconds from the create request to a leader for every partition.
    pub leaders_after_seconds: f64,
    /// Seconds measured.
    pub seconds: f64,
    /// Percent of one core used by each node while idle.
    pub cpu_percent_per_node: Vec<f64>,
    /// Partitions whose Raft group was quiescent (no heartbeats) when measuring began / ended.
    pub quiescent_partitions: (usize, usize),
}

/// `partitions` RF-3 partitions on 3 nodes, no traffic: CPU per node over `measure`.
pub async fn idle_partitions(env: &Env, partitions: u32, measure: Duration) -> anyhow::Result<IdleResult> {
    let mut deployment = start(env, "rill-idle", 3, true).await?;
    let client = Client::connect(&deployment.endpoints).await?;
    let configs = [("min.insync.replicas".to_string(), "2".to_string())];
    eprintln!("creating {partitions} partitions (RF 3)…");
    let created = Instant::now();
    client.create_topic("idle", partitions, 3, &configs).await?;
    client.wait_for_leaders("idle", Duration::from_secs(600)).await?;
    let leaders_after_seconds = created.elapsed().as_secs_f64();
    eprintln!("every partition has a leader after {leaders_after_seconds:.0} s");
    // Let elections, ISR expansion and first snapshots settle before measuring.
    tokio::time::sleep(Duration::from_secs(10)).await;
    deployment.check_running()?;
    let quiescent_before = quiescent(&client).await?;
    let before = deployment.cpu_seconds();
    let t0 = Instant::now();
    tokio::time::sleep(measure).await;
    let seconds = t0.elapsed().as_secs_f64();
    let after = deployment.cpu_seconds();
    deployment.check_running()?;
    let quiescent_partitions = (quiescent_before, quiescent(&client).await?);
    let cpu_percent_per_node = before.iter().zip(after).map(|((_, b), (_, a))| (a - b) / seconds * 100.0).collect();
    Ok(IdleResult { partitions, leaders_after_seconds, seconds, cpu_percent_per_node, quiescent_partitions })
}

/// How many partitions of the idle topic are quiescent on their leader.
async fn quiescent(client: &Client) -> anyhow::Result<usize> {
    Ok(client.describe_topic("idle").await?.partitions.iter().filter(|p| p.quiescent).count())
}

/// Leader failover times.
#[derive(Debug, Clone, Serialize)]
pub struct FailoverResult {
    /// Milliseconds from SIGKILL of the leader to the first acknowledged `acks=all` write
    /// (sent after the kill) on the partition it led, one per kill.
    pub failover_ms: Vec<f64>,
    /// Background load during the kills, msgs/s (acks=all).
    pub load_msgs_per_sec: u64,
    /// Background sends that failed (delivery timeouts; retries are not failures).
    pub load_errors: u64,
}

/// Kills the leader of partition 0 `kills` times under load and times the first acknowledged
/// write after each kill. The killed node is restarted and back in the ISR before the next kill.
pub async fn failover(env: &Env, kills: u32, load_rate: u64) -> anyhow::Result<FailoverResult> {
    let mut deployment = start(env, "rill-failover", 3, true).await?;
    let client = Client::connect(&deployment.endpoints).await?;
    let configs = [("min.insync.replicas".to_string(), "2".to_string())];
    client.create_topic("failover", 3, 3, &configs).await?;
    wait_for_leaders(&client, "failover").await?;

    // Background load over every partition.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = tokio::spawn(background_load(client.clone(), load_rate, stop.clone()));

    // The probe retries by itself, so the measurement is not the client's backoff schedule.
    let options = ClientOptions { retry_budget: Duration::ZERO, ..ClientOptions::default() };
    let probe = Client::connect_with(&deployment.endpoints, options).await?;
    let mut failover_ms = Vec::new();
    for k in 0..kills {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let leader = client
            .describe_topic("failover")
            .await?
            .partitions
            .first()
            .and_then(|p| p.leader)
            .context("partition 0 has no leader")?;
        probe.produce("failover", 0, vec![Record::new("before")], Acks::All).await.context("write before the kill")?;
        deployment.rill()?.kill(leader)?;
        let killed_at = Instant::now();
        let deadline = killed_at + Duration::from_secs(60);
        loop {
            let r = probe
                .produce_with(
                    "failover",
                    0,
                    vec![Record::new("after")],
                    Acks::All,
                    rill_client::Compression::None,
                    Duration::from_secs(2),
                )
                .await;
            if r.is_ok() {
                break;
            }
            if Instant::now() > deadline {
                bail!("no acks=all write succeeded within 60 s of killing node {leader}");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let ms = killed_at.elapsed().as_secs_f64() * 1000.0;
        eprintln!("  kill {} of {kills}: node {leader} killed; first acks=all write after {ms:.0} ms", k + 1);
        failover_ms.push(ms);
        // Bring the node back and wait until it is in sync again.
        let cluster = deployment.rill()?;
        cluster.start_node(leader)?;
        cluster.wait_ready(READY_TIMEOUT).await?;
        wait_full_isr(&client, "failover").await?;
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let (sent, errors) = load.await.context("background load task")?;
    Ok(FailoverResult { failover_ms, load_msgs_per_sec: sent, load_errors: errors })
}

/// Sends at `rate` msg/s until `stop`; returns (rate achieved, failures).
async fn background_load(client: Client, rate: u64, stop: std::sync::Arc<std::sync::atomic::AtomicBool>) -> (u64, u64) {
    let producer = Producer::new(client, ProducerConfig::default());
    let start = tokio::time::Instant::now();
    let mut n = 0u64;
    let mut deliveries = Vec::new();
    while !stop.load(std::sync::atomic::Ordering::SeqCst) {
        tokio::time::sleep_until(start + Duration::from_secs_f64(n as f64 / rate.max(1) as f64)).await;
        if let Ok(d) = producer.send("failover", Record::new(Bytes::from(vec![b'x'; 1024]))).await {
            deliveries.push(d);
        }
        n += 1;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let mut errors = 0;
    for d in deliveries {
        if d.await.is_err() {
            errors += 1;
        }
    }
    producer.close().await;
    ((n as f64 / elapsed) as u64, errors)
}

async fn wait_full_isr(client: &Client, topic: &str) -> anyhow::Result<()> {
    wait_for_partitions(client, topic, Duration::from_secs(120), "a leader and the full ISR on every partition", |p| {
        p.leader.is_some() && p.isr.len() == p.replicas.len()
    })
    .await
}

/// Restart time of a cluster holding a large log.
#[derive(Debug, Clone, Serialize)]
pub struct RestartResult {
    /// Bytes of record payload written before the restart.
    pub payload_bytes: u64,
    /// Bytes in the nodes' data directories.
    pub disk_bytes: u64,
    /// From starting the processes to every partition taking an `acks=all` write and serving
    /// its old high watermark.
    pub restart_ms: f64,
    /// Then one node alone (SIGTERM while the others serve): from starting its process to every
    /// partition taking an `acks=all` write with it in sync (so it has caught up everywhere).
    pub one_node_restart_ms: f64,
}

/// Writes `payload_mb` MB to an 8-partition RF-3 topic, stops all three nodes (SIGTERM), starts
/// them again and times the way back to full service.
pub async fn restart(env: &Env, payload_mb: u64) -> anyhow::Result<RestartResult> {
    // Three replicas of the payload; 10,000 MB per node took 30.3 GB on disk (benchmarks.md).
    let footprint = payload_mb.saturating_mul(1_000_000).saturating_mul(3) / 20 * 21;
    crate::disk::ensure_room_for(&env.data_dir, footprint, &format!("--restart-mb {payload_mb}"))?;
    let mut deployment = start(env, "rill-restart", 3, true).await?;
    let client = Client::connect(&deployment.endpoints).await?;
    let partitions = 8;
    let configs = [("min.insync.replicas".to_string(), "2".to_string())];
    client.create_topic("restart", partitions, 3, &configs).await?;
    wait_for_leaders(&client, "restart").await?;
    let payload_bytes = payload_mb * 1_000_000;
    eprintln!("writing {payload_mb} MB (acks=all)…");
    write_payload(&client, "restart", payload_bytes).await?;
    let mut high_watermarks = Vec::new();
    for p in 0..partitions {
        high_watermarks.push(client.list_offset("restart", p, OffsetSpec::Latest).await?);
    }
    drop(client);
    let dir = deployment.dir.clone();
    let cluster = deployment.rill()?;
    cluster.stop_all(Duration::from_secs(60));
    let disk_bytes = dir_size(&dir);
    let started = Instant::now();
    for id in cluster.ids() {
        cluster.start_node(id)?;
    }
    cluster.wait_ready(READY_TIMEOUT).await?;
    let client = Client::connect(&deployment.endpoints).await?;
    wait_for_leaders(&client, "restart").await?;
    for (p, hw) in high_watermarks.iter().enumerate() {
        let p = p as u32;
        client.produce("restart", p, vec![Record::new("after restart")], Acks::All).await?;
        let now = client.list_offset("restart", p, OffsetSpec::Latest).await?;
        if now <= *hw {
            bail!("partition {p} came back with high watermark {now}, below the {hw} it had before the restart");
        }
    }
    let restart_ms = started.elapsed().as_secs_f64() * 1000.0;
    deployment.check_running()?;

    eprintln!("restarting node 1 alone…");
    let cluster = deployment.rill()?;
    cluster.terminate(1, Duration::from_secs(60))?;
    let started = Instant::now();
    cluster.start_node(1)?;
    // Node 1 stays in the in-sync replicas through a short restart (it leaves them only after
    // replica.lag.time.max.ms), so an acks=all write is acknowledged only once node 1 has it:
    // every partition taking one means node 1 has caught up everywhere.
    let deadline = Instant::now() + READY_TIMEOUT;
    for p in 0..partitions {
        let mut last_refusal = None;
        loop {
            let written = client.produce("restart", p, vec![Record::new("after one node")], Acks::All).await;
            if let Err(e) = &written {
                // Once per kind of refusal: the loop retries every 20 ms.
                let refusal = e.to_string();
                if last_refusal.as_ref() != Some(&refusal) {
                    eprintln!("  partition {p}: at {} ms: {refusal}", started.elapsed().as_millis());
                    last_refusal = Some(refusal);
                }
            }
            let in_isr = match client.describe_topic("restart").await {
                Ok(d) => d.partitions.get(p as usize).is_some_and(|d| d.isr.contains(&1)),
                Err(_) => false,
            };
            if written.is_ok() && in_isr {
                eprintln!("  partition {p}: written with node 1 in sync at {} ms", started.elapsed().as_millis());
                break;
            }
            if Instant::now() > deadline {
                bail!("partition {p} did not take an acks=all write with node 1 in sync within {READY_TIMEOUT:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let one_node_restart_ms = started.elapsed().as_secs_f64() * 1000.0;
    deployment.check_running()?;
    let result = RestartResult { payload_bytes, disk_bytes, restart_ms, one_node_restart_ms };
    finish(deployment, "restart", &result);
    Ok(result)
}

/// Produce throughput on a compacted topic while its replicas compact, against the same load on
/// a topic that is not compacted.
#[derive(Debug, Clone, Serialize)]
pub struct CompactionResult {
    /// Distinct keys written (1 KB values).
    pub keys: u32,
    /// Seconds per round.
    pub round_seconds: f64,
    /// Acknowledged messages per second of each round on the topic without compaction
    /// (`retention.bytes` 64 MiB per partition, so both topics hold a bounded log).
    pub plain_msgs_per_sec: Vec<f64>,
    /// The same on the compacted topic (`cleanup.policy=compact`).
    pub compacted_msgs_per_sec: Vec<f64>,
    /// Median compacted round over median plain round.
    pub ratio: f64,
    /// Offsets of the compacted topic's partition 0 after the rounds, and the records still in
    /// them (compaction really ran).
    pub partition0_offsets: u64,
    /// See `partition0_offsets`.
    pub partition0_records: u64,
}

/// Alternates `rounds` rounds of max-rate keyed writes (1 KB values, `keys` distinct keys,
/// acks=all) to a plain and to a compacted topic, 8 RF-3 partitions each, on 3 nodes.
pub async fn compaction(env: &Env, rounds: u32, round: Duration, keys: u32) -> anyhow::Result<CompactionResult> {
    let mut deployment = start(env, "rill-compaction", 3, true).await?;
    let client = Client::connect(&deployment.endpoints).await?;
    let partitions = 8;
    let isr = ("min.insync.replicas".to_string(), "2".to_string());
    let plain = [isr.clone(), ("retention.bytes".to_string(), "64MiB".to_string())];
    let compacted = [isr, ("cleanup.policy".to_string(), "compact".to_string())];
    client.create_topic("plain", partitions, 3, &plain).await?;
    client.create_topic("compacted", partitions, 3, &compacted).await?;
    wait_for_leaders(&client, "plain").await?;
    wait_for_leaders(&client, "compacted").await?;
    let value = Bytes::from(vec![b'c'; 1024]);
    let mut plain_msgs_per_sec = Vec::new();
    let mut compacted_msgs_per_sec = Vec::new();
    let mut n = 0u64;
    for r in 0..rounds * 2 {
        let topic = if r % 2 == 0 { "plain" } else { "compacted" };
        let config =
            ProducerConfig { linger: Duration::from_millis(1), batch_size: 1 << 20, ..ProducerConfig::default() };
        let producer = Producer::new(client.clone(), config);
        let started = Instant::now();
        let mut pending = std::collections::VecDeque::new();
        let mut acked = 0u64;
        while started.elapsed() < round {
            let key = format!("key-{}", n % u64::from(keys));
            n += 1;
            pending.push_back(producer.send(topic, Record::keyed(key, value.clone())).await?);
            if pending.len() >= 4096 {
                if let Some(d) = pending.pop_front() {
                    d.await?;
                    acked += 1;
                }
            }
        }
        for d in pending {
            d.await?;
            acked += 1;
        }
        producer.close().await;
        let rate = acked as f64 / started.elapsed().as_secs_f64();
        eprintln!("round {r}: {topic}: {rate:.0} msg/s");
        if r % 2 == 0 { &mut plain_msgs_per_sec } else { &mut compacted_msgs_per_sec }.push(rate);
        deployment.check_running()?;
    }
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    let ratio = median(&compacted_msgs_per_sec) / median(&plain_msgs_per_sec).max(1.0);
    let partition0_offsets = client.list_offset("compacted", 0, OffsetSpec::Latest).await?;
    let mut partition0_records = 0u64;
    let mut offset = client.list_offset("compacted", 0, OffsetSpec::Earliest).await?;
    while offset < partition0_offsets {
        let f = client.fetch("compacted", 0, Some(offset), Duration::ZERO).await?;
        if f.next_offset <= offset {
            break;
        }
        partition0_records += f.records.len() as u64;
        offset = f.next_offset;
    }
    deployment.check_running()?;
    let result = CompactionResult {
        keys,
        round_seconds: round.as_secs_f64(),
        plain_msgs_per_sec,
        compacted_msgs_per_sec,
        ratio,
        partition0_offsets,
        partition0_records,
    };
    finish(deployment, "compaction", &result);
    Ok(result)
}

/// Stops `deployment` and removes its data (the next scenario needs the disk), after printing
/// `result` on stderr so that it is kept even if a later scenario fails. With
/// `RILL_BENCH_KEEP_LOGS` set, the nodes' logs are kept (`node-N.log` in the scenario's
/// directory).
pub(crate) fn finish(deployment: crate::systems::Deployment, name: &str, result: &impl Serialize) {
    eprintln!("{name}: {}", serde_json::to_string(result).unwrap_or_default());
    let dir = deployment.dir.clone();
    drop(deployment);
    if crate::disk::keep_logs() {
        crate::disk::remove_all_but_logs(&dir);
        eprintln!("{name}: node logs kept in {}", dir.display());
        return;
    }
    if let Err(e) = std::fs::remove_dir_all(&dir) {
        eprintln!("could not remove {}: {e}", dir.display());
    }
}

/// Writes `payload_bytes` of 1 KB values to `topic` (acks=all, idempotent, 1 MiB batches, at
/// most 4,096 awaiting acknowledgement).
async fn write_payload(client: &Client, topic: &str, payload_bytes: u64) -> anyhow::Result<()> {
    let config = ProducerConfig { linger: Duration::from_millis(1), batch_size: 1 << 20, ..ProducerConfig::default() };
    let producer = Producer::new(client.clone(), config);
    let value = Bytes::from(vec![b's'; 1024]);
    let mut written = 0u64;
    let mut pending = std::collections::VecDeque::new();
    while written < payload_bytes {
        pending.push_back(producer.send(topic, Record::new(value.clone())).await?);
        written += value.len() as u64;
        if pending.len() >= 4096 {
            if let Some(d) = pending.pop_front() {
                d.await?;
            }
        }
    }
    for d in pending {
        d.await?;
    }
    producer.close().await;
    Ok(())
}

/// Disk use of nodes writing many times their retention.
#[derive(Debug, Clone, Serialize)]
pub struct SoakResult {
    /// `retention.bytes` of each partition.
    pub retention_bytes: u64,
    /// Partitions (RF 3).
    pub partitions: u32,
    /// Payload bytes written.
    pub payload_bytes: u64,
    /// Value log segment size.
    pub segment_bytes: u64,
    /// The bound every node's data directory must stay within: twice the live data (retention
    /// plus one index unit per partition) plus three segments and 4 MiB.
    pub bound_bytes: u64,
    /// Largest data directory of each node, sampled every second while writing and after.
    pub max_node_bytes: Vec<u64>,
    /// Each node's data directory at the end.
    pub final_node_bytes: Vec<u64>,
    /// Seconds of writing.
    pub write_seconds: f64,
}

/// Writes `factor` × the retention of every partition of a 4-partition RF-3 topic with
/// `retention.bytes` = `retention_mb` MiB and 16 MiB value log segments, sampling each node's
/// data directory every second; then waits (at most two minutes) for the last purges.
pub async fn soak(env: &Env, retention_mb: u64, factor: u64) -> anyhow::Result<SoakResult> {
    let segment_bytes = 16u64 << 20;
    let vars = [("RILL_STORAGE_SEGMENT_BYTES", "16MiB")];
    let mut deployment = start_with(env, "rill-soak", 3, true, &vars).await?;
    let client = Client::connect(&deployment.endpoints).await?;
    let partitions = 4u32;
    let retention_bytes = retention_mb << 20;
    let configs = [
        ("min.insync.replicas".to_string(), "2".to_string()),
        ("retention.bytes".to_string(), retention_bytes.to_string()),
    ];
    client.create_topic("soak", partitions, 3, &configs).await?;
    wait_for_leaders(&client, "soak").await?;
    let dirs: Vec<std::path::PathBuf> = {
        let cluster = deployment.rill()?;
        cluster.ids().into_iter().filter_map(|id| cluster.data_dir(id).map(std::path::Path::to_path_buf)).collect()
    };
    let live = u64::from(partitions) * (retention_bytes + (1 << 20)) + (1 << 20);
    let bound_bytes = 2 * live + 3 * segment_bytes + (4 << 20);
    let payload_bytes = factor * retention_bytes * u64::from(partitions);
    eprintln!("writing {} MB to a topic keeping {} MiB per partition…", payload_bytes / 1_000_000, retention_mb);
    let sampler_dirs = dirs.clone();
    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    let sampler = tokio::spawn(async move {
        let mut max = vec![0u64; sampler_dirs.len()];
        loop {
            for (m, d) in max.iter_mut().zip(&sampler_dirs) {
                *m = (*m).max(dir_size(d));
            }
            if *stop_rx.borrow() {
                return max;
            }
            let _ = tokio::time::timeout(Duration::from_secs(1), stop_rx.changed()).await;
        }
    });
    let started = Instant::now();
    write_payload(&client, "soak", payload_bytes).await?;
    let write_seconds = started.elapsed().as_secs_f64();
    // The last retention checks, purges and collections after the writes stop.
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline && dirs.iter().any(|d| dir_size(d) > bound_bytes) {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let _ = stop_tx.send(true);
    let max_node_bytes = sampler.await?;
    let final_node_bytes = dirs.iter().map(|d| dir_size(d)).collect();
    deployment.check_running()?;
    let result = SoakResult {
        retention_bytes,
        partitions,
        payload_bytes,
        segment_bytes,
        bound_bytes,
        max_node_bytes,
        final_node_bytes,
        write_seconds,
    };
    finish(deployment, "soak", &result);
    Ok(result)
}

/// How long a follower takes to catch up after missing writes.
#[derive(Debug, Clone, Serialize)]
pub struct CatchUpResult {
    /// Payload bytes written while the follower was down.
    pub missed_bytes: u64,
    /// From starting the follower's process to every partition taking an acks=all write with it
    /// in sync (so it holds the whole log), with the whole log retained (it catches up by
    /// replication).
    pub replicated_ms: f64,
    /// The same on a topic whose `retention.bytes` (`retention_mib` per partition) deleted what
    /// the follower had: it catches up by a snapshot carrying the retained records.
    pub snapshot_ms: f64,
    /// That `retention.bytes`, in MiB per partition.
    pub retention_mib: u64,
}

/// Stops node 3, writes `missed_mb` MB to a 4-partition RF-3 topic, starts node 3 and times
/// until every partition takes an acks=all write with node 3 in sync; once with the whole log
/// retained, once under a `retention.bytes` of `retention_mib` per partition.
pub async fn catch_up(env: &Env, missed_mb: u64, retention_mib: u64) -> anyhow::Result<CatchUpResult> {
    let missed_bytes = missed_mb * 1_000_000;
    if missed_bytes / 4 <= retention_mib << 20 {
        bail!(
            "each of the 4 partitions would miss {} MB, within its retention ({retention_mib} MiB): \
             nothing would be purged; write more (--catch-up-mb) or retain less (--catch-up-retention-mb)",
            missed_bytes / 4 / 1_000_000
        );
    }
    let mut times = Vec::new();
    for retention in [None, Some(retention_mib << 20)] {
        let mut deployment = start(env, "rill-catch-up", 3, true).await?;
        let client = Client::connect(&deployment.endpoints).await?;
        let mut configs = vec![("min.insync.replicas".to_string(), "2".to_string())];
        if let Some(r) = retention {
            configs.push(("retention.bytes".to_string(), r.to_string()));
        }
        client.create_topic("catch-up", 4, 3, &configs).await?;
        wait_for_leaders(&client, "catch-up").await?;
        deployment.rill()?.terminate(3, Duration::from_secs(60))?;
        eprintln!("node 3 stopped; writing {missed_mb} MB…");
        write_payload(&client, "catch-up", missed_bytes).await?;
        // Node 3 has left every ISR (after replica.lag.time.max.ms), so being back in all of
        // them means it caught up.
        let deadline = Instant::now() + READY_TIMEOUT;
        while client.describe_topic("catch-up").await?.partitions.iter().any(|p| p.isr.contains(&3)) {
            if Instant::now() > deadline {
                bail!("node 3 stayed in an ISR for {READY_TIMEOUT:?} while stopped");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        if retention.is_some() {
            // Every leader's log is purged past what node 3 holds before it comes back.
            let deadline = Instant::now() + READY_TIMEOUT;
            loop {
                let d = client.describe_topic("catch-up").await?;
                if d.partitions.iter().all(|p| p.stored_from_offset > 0) {
                    break;
                }
                if Instant::now() > deadline {
                    bail!("the leaders did not purge their logs within {READY_TIMEOUT:?}");
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        let started = Instant::now();
        deployment.rill()?.start_node(3)?;
        // Being in the ISR is not enough: a follower that reached where the log ended within
        // replica.lag.time.max.ms is in sync, and the writes ended seconds ago. An acks=all
        // write acknowledged while node 3 is in the ISR before and after it waited for node 3
        // to hold it, so node 3 holds the whole log.
        let deadline = Instant::now() + Duration::from_secs(600);
        for p in 0..4u32 {
            loop {
                let in_isr = |d: &rill_client::TopicDescription| {
                    d.partitions.get(p as usize).is_some_and(|d| d.isr.contains(&3))
                };
                let before = client.describe_topic("catch-up").await.is_ok_and(|d| in_isr(&d));
                let written =
                    before && client.produce("catch-up", p, vec![Record::new("caught up?")], Acks::All).await.is_ok();
                if written && client.describe_topic("catch-up").await.is_ok_and(|d| in_isr(&d)) {
                    break;
                }
                if Instant::now() > deadline {
                    bail!("partition {p} did not take an acks=all write with node 3 in sync within 600 s");
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        times.push(ms);
        deployment.check_running()?;
        finish(deployment, "catch-up round", &ms);
    }
    let result = CatchUpResult { missed_bytes, replicated_ms: times[0], snapshot_ms: times[1], retention_mib };
    eprintln!("catch-up: {}", serde_json::to_string(&result).unwrap_or_default());
    Ok(result)
}

fn dir_size(dir: &std::path::Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        if let Ok(entries) = std::fs::read_dir(&d) {
            for e in entries.flatten() {
                match e.metadata() {
                    Ok(m) if m.is_dir() => stack.push(e.path()),
                    Ok(m) => total += m.len(),
                    Err(_) => {}
                }
            }
        }
    }
    total
}
