//! Share groups (queues on the log) on three real nodes — the seeds' experiments: workers share a
//! queue record by record while a consumer group on the same topic sees everything; a worker
//! killed while holding records loses nothing (each comes back after its lock, counted); a poison
//! record fails up to the delivery limit and lands in the group's dead-letter topic once, with
//! its evidence, while everything else flows (a rejected one at once); a partition leader killed
//! with records acquired keeps their counts.

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use rill_client::share::{AckKind, AcknowledgementMode, ShareConsumer, ShareConsumerConfig, ShareRecord};
use rill_client::{Producer, ProducerConfig, Record};

use crate::harness::{bin, init_logs, read_all, text, TestCluster};
use crate::t70_cli::rill;

/// Writes `values` to `topic`, acknowledged (acks=all).
async fn produce(client: &rill_client::Client, topic: &str, values: &[String]) -> anyhow::Result<()> {
    let producer = Producer::new(client.clone(), ProducerConfig::default());
    let mut sent = Vec::new();
    for v in values {
        sent.push(producer.send(topic, Record::new(v.clone())).await?);
    }
    for s in sent {
        s.await?;
    }
    producer.close().await;
    Ok(())
}

/// A `rill consume --share-group` worker printing JSON, its stdout piped.
fn worker(cluster: &TestCluster, topic: &str, extra: &[&str]) -> anyhow::Result<Child> {
    Ok(Command::new(bin("rill"))
        .args([
            "--bootstrap",
            &cluster.bootstrap_arg(),
            "consume",
            topic,
            "--share-group",
            "workers",
            "--output",
            "json",
        ])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?)
}

/// The (value, delivery count) of each record a worker printed.
fn printed(stdout: &[u8]) -> anyhow::Result<Vec<(String, u64)>> {
    String::from_utf8_lossy(stdout)
        .lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line)?;
            let value = v["value"].as_str().unwrap_or_default().to_string();
            let count = v["delivery_count"].as_u64().ok_or_else(|| anyhow::anyhow!("no delivery count in {line}"))?;
            Ok((value, count))
        })
        .collect()
}

async fn set_config(cluster: &TestCluster, settings: &[&str]) -> anyhow::Result<()> {
    let mut args = vec!["share", "config", "workers"];
    for s in settings {
        args.extend(["--config", s]);
    }
    let out = rill(cluster, &args, None)?;
    anyhow::ensure!(out.status.success(), "share config: {}", String::from_utf8_lossy(&out.stderr));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_workers_share_a_queue_while_a_consumer_group_sees_everything() -> anyhow::Result<()> {
    init_logs();
    let cluster = TestCluster::start(3).await?;
    let client = cluster.client().await?;
    cluster.create_topic(&client, "jobs", 2, 3, &[]).await?;
    set_config(&cluster, &["share.auto.offset.reset=earliest"]).await?;
    let jobs: Vec<String> = (0..40).map(|i| format!("job-{i}")).collect();
    produce(&client, "jobs", &jobs).await?;

    tracing::info!("--- two workers take the 40 jobs, 30 ms of work each, one record at a time per fetch");
    let args = ["--process-ms", "30", "--prefetch", "1", "--timeout-ms", "3000"];
    let (a, b) = (worker(&cluster, "jobs", &args)?, worker(&cluster, "jobs", &args)?);
    let (a, b) = (a.wait_with_output()?, b.wait_with_output()?);
    assert!(
        a.status.success() && b.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&a.stderr),
        String::from_utf8_lossy(&b.stderr)
    );
    let (a, b) = (printed(&a.stdout)?, printed(&b.stdout)?);
    assert!(!a.is_empty() && !b.is_empty(), "both workers got work: {} and {}", a.len(), b.len());
    let mut all: Vec<String> = a.iter().chain(&b).map(|(v, _)| v.clone()).collect();
    all.sort();
    let mut expected = jobs.clone();
    expected.sort();
    assert_eq!(all, expected, "every job done once, by one of the two");
    assert!(a.iter().chain(&b).all(|(_, count)| *count == 1), "no job delivered twice");

    tracing::info!("--- the log is unchanged: a consumer group reads all 40 as well");
    let mut seen = Vec::new();
    for p in 0..2 {
        seen.extend(read_all(&client, "jobs", p).await?.iter().map(|r| text(&r.value)));
    }
    seen.sort();
    assert_eq!(seen, expected);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_workers_records_come_back_after_its_lock_and_poison_lands_in_the_dead_letter_topic(
) -> anyhow::Result<()> {
    init_logs();
    let cluster = TestCluster::start(3).await?;
    let client = cluster.client().await?;
    cluster.create_topic(&client, "jobs", 1, 3, &[]).await?;
    cluster.create_topic(&client, "jobs.dlq", 1, 3, &[]).await?;
    set_config(
        &cluster,
        &[
            "share.auto.offset.reset=earliest",
            "share.record.lock.duration.ms=1500",
            "share.delivery.count.limit=3",
            "errors.deadletterqueue.topic.name=jobs.dlq",
        ],
    )
    .await?;
    // The poison records are not among the first five, which the first worker takes: 7 fails
    // every time, 8 is rejected.
    let jobs: Vec<String> = (0..10)
        .map(|i| match i {
            7 => "poison".to_string(),
            8 => "malformed".to_string(),
            _ => format!("job-{i}"),
        })
        .collect();
    produce(&client, "jobs", &jobs).await?;

    tracing::info!("--- a worker takes 5 records and is killed (SIGKILL) while working on the first");
    let mut slow = worker(&cluster, "jobs", &["--process-ms", "600000", "--prefetch", "5"])?;
    let stdout = slow.stdout.take().expect("piped");
    let first = tokio::task::spawn_blocking(move || {
        use std::io::BufRead;
        std::io::BufReader::new(stdout).lines().next()
    })
    .await?;
    assert!(first.is_some(), "the worker printed a record before it was killed");
    slow.kill()?;
    slow.wait()?;

    tracing::info!("--- describe shows the 5 held by the killed worker, with their locks running (XPENDING)");
    let described = describe(&cluster)?;
    let partition = &described["partitions"][0];
    let held = partition["held"].as_array().cloned().unwrap_or_default();
    assert_eq!(held.len(), 5, "{described}");
    let holder = &held[0]["member_id"];
    assert!(held.iter().all(|h| &h["member_id"] == holder && h["delivery_count"] == 1), "{described}");
    assert!(held.iter().all(|h| h["lock_left_ms"].as_i64().is_some_and(|ms| ms <= 1_500)), "{described}");
    assert_eq!((partition["acquired"].as_u64(), partition["start_offset"].as_u64()), (Some(5), Some(0)));
    assert!(partition["oldest_pending_age_ms"].as_i64().is_some(), "record 0 is not done: {described}");

    tracing::info!("--- another worker gets everything: the 5 come back after the lock, counted; poison fails 3 times");
    let out = worker(&cluster, "jobs", &["--fail", "poison", "--reject", "malformed", "--timeout-ms", "5000"])?
        .wait_with_output()?;
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let done = printed(&out.stdout)?;
    let mut counts: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for (value, count) in done {
        counts.entry(value).or_default().push(count);
    }
    // Three quick failures, then it is archived: never a fourth delivery. A rejected record is
    // archived at its first.
    assert_eq!(counts.get("poison"), Some(&vec![1, 2, 3]), "{counts:?}");
    assert_eq!(counts.get("malformed"), Some(&vec![1]), "{counts:?}");
    for (i, job) in jobs.iter().enumerate().filter(|(_, j)| !matches!(j.as_str(), "poison" | "malformed")) {
        let delivered = counts.get(job).ok_or_else(|| anyhow::anyhow!("{job} never done: {counts:?}"))?;
        // Records 0..5 were held by the killed worker: their first attempt was its.
        let expected = if i < 5 { 2 } else { 1 };
        assert_eq!(delivered, &vec![expected], "{job}: {counts:?}");
    }

    tracing::info!("--- the dead-letter topic holds each of the two once, with its evidence");
    let header = |r: &rill_client::ReceivedRecord, key: &str| {
        r.headers.iter().find(|(k, _)| k == key).and_then(|(_, v)| v.as_ref()).map(|v| text(&Some(v.clone())))
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let letters = loop {
        let letters = read_all(&client, "jobs.dlq", 0).await?;
        if letters.len() >= 2 || std::time::Instant::now() > deadline {
            break letters;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let mut by_value: BTreeMap<String, &rill_client::ReceivedRecord> = BTreeMap::new();
    for l in &letters {
        anyhow::ensure!(by_value.insert(text(&l.value), l).is_none(), "a record copied twice: {letters:?}");
    }
    assert_eq!(by_value.keys().collect::<Vec<_>>(), ["malformed", "poison"], "{letters:?}");
    let poison = by_value["poison"];
    assert_eq!(header(poison, "rill.dlq.topic").as_deref(), Some("jobs"));
    assert_eq!(header(poison, "rill.dlq.offset").as_deref(), Some("7"));
    assert_eq!(header(poison, "rill.dlq.group").as_deref(), Some("workers"));
    assert_eq!(header(poison, "rill.dlq.cause").as_deref(), Some("delivery-limit"));
    assert_eq!(header(poison, "rill.dlq.delivery.count").as_deref(), Some("3"));
    let malformed = by_value["malformed"];
    assert_eq!(header(malformed, "rill.dlq.cause").as_deref(), Some("rejected"));
    assert!(header(malformed, "rill.dlq.reason").is_some_and(|r| r.contains("malformed")), "{malformed:?}");

    tracing::info!("--- describe: everything done, nothing waiting, two records in the dead-letter partition");
    let described = describe(&cluster)?;
    let partition = &described["partitions"][0];
    assert_eq!(partition["start_offset"].as_u64(), Some(jobs.len() as u64), "{described}");
    assert_eq!((partition["acquired"].as_u64(), partition["dead_letter_waiting"].as_u64()), (Some(0), Some(0)));
    assert!(partition["oldest_pending_age_ms"].is_null(), "{described}");
    assert_eq!(partition["dead_letters"]["topic"], "jobs.dlq", "{described}");
    assert_eq!(partition["dead_letters"]["depth"].as_u64(), Some(2), "{described}");
    let out = rill(&cluster, &["share", "list", "--output", "json"], None)?;
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(listed, serde_json::json!([{"group": "workers", "partitions": 1}]));
    Ok(())
}

/// `rill share describe workers --output json`, parsed.
fn describe(cluster: &TestCluster) -> anyhow::Result<serde_json::Value> {
    let out = rill(cluster, &["share", "describe", "workers", "--output", "json"], None)?;
    anyhow::ensure!(out.status.success(), "share describe: {}", String::from_utf8_lossy(&out.stderr));
    Ok(serde_json::from_slice(&out.stdout)?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_leader_killed_with_records_acquired_keeps_their_counts() -> anyhow::Result<()> {
    init_logs();
    let mut cluster = TestCluster::start(3).await?;
    let client = cluster.client().await?;
    let described = cluster.create_topic(&client, "jobs", 1, 3, &[]).await?;
    client
        .alter_share_group_config(
            "workers",
            &[
                ("share.auto.offset.reset".into(), "earliest".into()),
                ("share.record.lock.duration.ms".into(), "2000".into()),
            ],
            &[],
        )
        .await?;
    let jobs: Vec<String> = (0..6).map(|i| format!("job-{i}")).collect();
    produce(&client, "jobs", &jobs).await?;

    let config = |member: &str| ShareConsumerConfig {
        member_id: member.into(),
        acknowledgement_mode: AcknowledgementMode::Explicit,
        ..ShareConsumerConfig::new("workers")
    };
    let mut first = ShareConsumer::new(client.clone(), config("first"));
    first.subscribe(["jobs"]);
    let mut held = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while held.len() < jobs.len() && tokio::time::Instant::now() < deadline {
        held.extend(first.poll(Duration::from_millis(500)).await?);
    }
    assert_eq!(held.len(), jobs.len(), "the first member holds every record");
    assert!(held.iter().all(|r| r.delivery_count == 1));

    tracing::info!("--- the partition's leader is killed while the records are acquired");
    let leader = client.describe_topic("jobs").await?.partitions[0].leader.or(described.partitions[0].leader);
    cluster.kill(leader.ok_or_else(|| anyhow::anyhow!("jobs/0 has no leader"))?)?;

    tracing::info!("--- a second member gets them all once the locks run out, each at its second attempt");
    let survivor = cluster.client().await?;
    let mut second = ShareConsumer::new(survivor, config("second"));
    second.subscribe(["jobs"]);
    let mut again: Vec<ShareRecord> = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while again.len() < jobs.len() && tokio::time::Instant::now() < deadline {
        let polled = match second.poll(Duration::from_millis(500)).await {
            Ok(records) => records,
            Err(e) => {
                tracing::info!(error = %e, "a poll failed during the failover; polling again");
                continue;
            }
        };
        for r in polled {
            second.acknowledge(&r, AckKind::Accept)?;
            again.push(r);
        }
    }
    let mut values: Vec<String> = again.iter().map(|r| text(&r.record.value)).collect();
    values.sort();
    assert_eq!(values, jobs, "every record delivered again");
    assert!(again.iter().all(|r| r.delivery_count == 2), "no count lost across the failover: {again:?}");
    second.commit().await?;
    Ok(())
}
