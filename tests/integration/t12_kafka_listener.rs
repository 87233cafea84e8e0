//! The Kafka listener seen by a Kafka client no one here wrote: Debian's `kcat` (librdkafka
//! 2.0.2) lists the cluster through each node's Kafka listener, with the brokers at their Kafka
//! addresses and each partition's leader, replicas and in-sync replicas as Rill describes them;
//! it writes with every compression codec (the stored batches really are compressed) and reads
//! back what it and Rill's own client and CLI wrote, keys, null values, headers and offsets
//! intact; and as a classic consumer group (`-G`) it reads a topic once, commits, and starts a
//! second time where the first stopped.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use rill_client::{Acks, Compression, Record, TopicPartition};
use rill_proto::records::records_client::RecordsClient;
use rill_proto::records::{FetchPartition, FetchRequest, FetchTopic};
use serde_json::Value;

use crate::harness::{init_logs, text, wait_for, TestCluster};
use crate::t70_cli::rill;

/// `kcat -L -J` against `broker`, for `topic`: the JSON it prints.
fn kcat_list(broker: &str, topic: &str) -> Result<Value> {
    let output = Command::new("kcat")
        .args(["-b", broker, "-L", "-J", "-t", topic, "-m", "10"])
        .output()
        .context("running kcat (Debian's `kcat` package; scripts/test.sh installs it)")?;
    if !output.status.success() {
        bail!("kcat -L failed: {}", String::from_utf8_lossy(&output.stderr));
    }
    serde_json::from_slice(&output.stdout).context("kcat's JSON")
}

/// The ids in a kcat list of `{"id": n}`.
fn ids(list: &Value) -> Vec<u64> {
    list.as_array().into_iter().flatten().filter_map(|r| r["id"].as_u64()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kcat_lists_the_cluster_through_every_nodes_kafka_listener() -> Result<()> {
    init_logs();
    let mut cluster = TestCluster::start(3).await?;
    let client = cluster.client().await?;
    cluster.create_topic(&client, "kmeta", 3, 3, &[]).await?;
    let kafka = cluster.local().kafka_bootstrap();
    assert_eq!(kafka.len(), 3);

    for broker in &kafka {
        // Leaders settle (and move back to preferred replicas) after creation: wait until kcat's
        // view and Rill's own agree, partition by partition.
        let listed = wait_for(Duration::from_secs(30), "kcat's leaders to match Rill's", || async {
            let listed = kcat_list(broker, "kmeta").ok()?;
            let described = client.describe_topic("kmeta").await.ok()?;
            let partitions = listed["topics"][0]["partitions"].as_array()?.clone();
            let agree = partitions.len() == described.partitions.len()
                && described.partitions.iter().all(|d| {
                    partitions.iter().any(|p| {
                        p["partition"].as_u64() == Some(u64::from(d.partition))
                            && p["leader"].as_u64() == d.leader
                            && ids(&p["replicas"]) == d.replicas
                    })
                });
            agree.then_some(listed)
        })
        .await?;
        let mut brokers: Vec<(u64, String)> = listed["brokers"]
            .as_array()
            .context("brokers")?
            .iter()
            .map(|b| (b["id"].as_u64().unwrap_or_default(), b["name"].as_str().unwrap_or_default().to_string()))
            .collect();
        brokers.sort();
        let expected: Vec<(u64, String)> = (1..=3).map(|id| (id, kafka[(id - 1) as usize].clone())).collect();
        assert_eq!(brokers, expected, "through {broker}: every node at its Kafka address");
        let topic = &listed["topics"][0];
        assert_eq!(topic["topic"], "kmeta");
        assert!(topic.get("error").is_none(), "{topic}");
        for p in topic["partitions"].as_array().context("partitions")? {
            assert!(p.get("error").is_none(), "{p}");
            let isrs = ids(&p["isrs"]);
            let leader = p["leader"].as_u64().context("leader")?;
            assert!(isrs.contains(&leader), "the leader is in sync: {p}");
        }
        assert!(listed["controllerid"].as_u64().is_some_and(|id| (1..=3).contains(&id)), "{listed}");
    }
    Ok(())
}

/// Runs kcat with `args` (bounded by 60 s), `input` on its stdin; its stdout.
fn kcat(args: &[&str], input: &str) -> Result<String> {
    let mut child = Command::new("timeout")
        .arg("60")
        .arg("kcat")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("running kcat (Debian's `kcat` package; scripts/test.sh installs it)")?;
    child.stdin.take().context("kcat's stdin")?.write_all(input.as_bytes())?;
    let output = child.wait_with_output()?;
    if !output.status.success() {
        bail!("kcat {args:?} failed ({}): {}", output.status, String::from_utf8_lossy(&output.stderr));
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

/// The compression codec of every batch stored in `topic`/0, read raw over gRPC from `leader`.
async fn stored_codecs(leader: &str, topic: &str) -> Result<Vec<Compression>> {
    let mut records = RecordsClient::connect(format!("http://{leader}")).await?;
    let (mut codecs, mut offset) = (Vec::new(), 0);
    loop {
        let partition = FetchPartition { partition: 0, fetch_offset: offset, max_bytes: 0 };
        let topics = vec![FetchTopic { topic: topic.into(), partitions: vec![partition], topic_id: Bytes::new() }];
        let answer = records.fetch(FetchRequest { topics, ..Default::default() }).await?.into_inner();
        let p = &answer.topics[0].partitions[0];
        if p.error_code != 0 {
            bail!("raw fetch at {offset}: {} {}", p.error_code, p.error_message);
        }
        for b in &p.batches {
            codecs.push(rill_records::BatchInfo::parse(&b.data)?.compression()?);
        }
        if p.next_offset >= p.high_watermark {
            return Ok(codecs);
        }
        offset = p.next_offset;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kcat_and_rill_read_back_what_the_other_wrote() -> Result<()> {
    init_logs();
    let mut cluster = TestCluster::start(3).await?;
    let client = cluster.client().await?;
    cluster.create_topic(&client, "kdata", 1, 3, &[]).await?;
    cluster.create_topic(&client, "kback", 1, 3, &[]).await?;
    let described = cluster.wait_for_leaders(&client, "kdata").await?;
    let leader = cluster.addr(described.partitions[0].leader.context("a leader")?);
    let bootstrap = cluster.local().kafka_bootstrap().join(",");

    tracing::info!("--- kcat writes with every codec, acks=all; idempotent but for the first");
    let codecs = [
        ("none", Compression::None),
        ("gzip", Compression::Gzip),
        ("snappy", Compression::Snappy),
        ("lz4", Compression::Lz4),
        ("zstd", Compression::Zstd),
    ];
    let mut written = Vec::new();
    for (codec, _) in codecs {
        let lines: Vec<String> = (0..50).map(|i| format!("{codec}-{i}:value {i} of {codec}")).collect();
        let mut input = lines.join("\n");
        input.push('\n');
        let idempotence = format!("enable.idempotence={}", codec != "none");
        let args = ["-P", "-b", &bootstrap, "-t", "kdata", "-p", "0", "-z", codec, "-K", ":", "-X", "acks=all"];
        kcat(&[&args[..], &["-X", &idempotence]].concat(), &input)?;
        written.extend(lines);
    }
    let mut stored = stored_codecs(&leader, "kdata").await?;
    stored.dedup();
    let expected: Vec<Compression> = codecs.iter().map(|(_, c)| *c).collect();
    assert_eq!(stored, expected, "each codec's batches are stored compressed with it");

    tracing::info!("--- kcat reads them back (read_committed, librdkafka's default)");
    let read = kcat(&["-C", "-b", &bootstrap, "-t", "kdata", "-p", "0", "-o", "beginning", "-e", "-f", "%k:%s\n"], "")?;
    assert_eq!(read.lines().collect::<Vec<_>>(), written, "kcat reads what it wrote, in order");
    let offsets = kcat(&["-C", "-b", &bootstrap, "-t", "kdata", "-p", "0", "-o", "120", "-c", "3", "-f", "%o\n"], "")?;
    assert_eq!(offsets.lines().collect::<Vec<_>>(), vec!["120", "121", "122"], "offsets are Rill's");

    tracing::info!("--- rill consume reads what kcat wrote");
    let total = written.len().to_string();
    let args = [
        "consume",
        "kdata",
        "--from-beginning",
        "--max-messages",
        &total,
        "--timeout-ms",
        "20000",
        "--format",
        "%k:%v",
    ];
    let out = rill(&cluster, &args, None)?;
    assert!(out.status.success(), "rill consume: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().collect::<Vec<_>>(), written);

    tracing::info!("--- kcat reads what Rill's client wrote: keys, null values, headers");
    let records = vec![
        Record::keyed("k1", "v1").with_header("origin", "rill"),
        Record::tombstone("k2"),
        Record::new("unkeyed").with_header("a", "1").with_header("b", "2"),
    ];
    client.produce("kback", 0, records, Acks::All).await?;
    let read = kcat(
        &["-C", "-b", &bootstrap, "-t", "kback", "-p", "0", "-o", "beginning", "-e", "-Z", "-f", "%o|%k|%s|%h\n"],
        "",
    )?;
    assert_eq!(
        read.lines().collect::<Vec<_>>(),
        vec!["0|k1|v1|origin=rill", "1|k2|NULL|", "2|NULL|unkeyed|a=1,b=2"],
        "{read}"
    );
    let back = crate::harness::read_all(&client, "kback", 0).await?;
    assert_eq!(text(&back[1].value), "<null>");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kcat_group_reads_every_partition_once_and_resumes_from_its_commits() -> Result<()> {
    init_logs();
    let mut cluster = TestCluster::start(3).await?;
    let client = cluster.client().await?;
    cluster.create_topic(&client, "kgroup", 3, 3, &[]).await?;
    cluster.wait_for_leaders(&client, "kgroup").await?;
    let bootstrap = cluster.local().kafka_bootstrap().join(",");
    let write = |from: usize, to: usize| -> Result<Vec<String>> {
        let lines: Vec<String> = (from..to).map(|i| format!("key-{i}:value-{i}")).collect();
        let mut input = lines.join("\n");
        input.push('\n');
        kcat(&["-P", "-b", &bootstrap, "-t", "kgroup", "-K", ":", "-X", "acks=all"], &input)?;
        Ok(lines)
    };
    // A group member (librdkafka's classic protocol, its default range assignor) from the
    // earliest offset, until every assigned partition reaches its end; it commits as it goes
    // and when it leaves.
    let consume = || -> Result<Vec<String>> {
        let args =
            ["-G", "kcat-group", "-b", &bootstrap, "-X", "auto.offset.reset=earliest", "-e", "-f", "%k:%s\n", "kgroup"];
        let out = kcat(&args, "")?;
        let mut lines: Vec<String> = out.lines().map(str::to_string).collect();
        lines.sort();
        Ok(lines)
    };

    let mut first = write(0, 300)?;
    first.sort();
    assert_eq!(consume()?, first, "the group reads every partition, each record once");
    let committed = client
        .committed_offsets("kcat-group", &(0..3).map(|p| TopicPartition::new("kgroup", p)).collect::<Vec<_>>())
        .await?;
    let total: u64 = committed.values().map(|c| c.as_ref().map_or(0, |c| c.offset)).sum();
    assert_eq!(total, 300, "the group committed the end of each partition: {committed:?}");

    let mut second = write(300, 400)?;
    second.sort();
    assert_eq!(consume()?, second, "a new member resumes from the group's commits");
    Ok(())
}
