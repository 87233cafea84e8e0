//! The `rill` CLI end to end: create, describe (JSON), produce from stdin, consume, readable
//! errors, admitting a node. [`rill`] runs the CLI for other tests too.

use std::io::Write;
use std::process::{Command, Stdio};

use crate::harness::{bin, init_logs, TestCluster};

pub(crate) fn rill(cluster: &TestCluster, args: &[&str], stdin: Option<&str>) -> anyhow::Result<std::process::Output> {
    let mut child = Command::new(bin("rill"))
        .arg("--bootstrap")
        .arg(cluster.bootstrap_arg())
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    if let Some(input) = stdin {
        child.stdin.take().expect("stdin").write_all(input.as_bytes())?;
    }
    drop(child.stdin.take());
    Ok(child.wait_with_output()?)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cli_create_describe_produce_consume() -> anyhow::Result<()> {
    init_logs();
    let cluster = TestCluster::start(3).await?;
    let out = rill(
        &cluster,
        &[
            "topic",
            "create",
            "cli",
            "--partitions",
            "2",
            "--replication-factor",
            "3",
            "--config",
            "min.insync.replicas=2",
        ],
        None,
    )?;
    assert!(out.status.success(), "create: {}", String::from_utf8_lossy(&out.stderr));
    let client = cluster.client().await?;
    cluster.wait_for_leaders(&client, "cli").await?;

    let out = rill(&cluster, &["topic", "describe", "cli", "--output", "json"], None)?;
    assert!(out.status.success(), "describe: {}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(v["name"], "cli");
    let parts = v["partitions"].as_array().expect("partitions");
    assert_eq!(parts.len(), 2);
    for p in parts {
        assert_eq!(p["replicas"].as_array().map(Vec::len), Some(3));
        for key in ["partition", "leader", "isr", "log_start_offset", "high_watermark", "log_end_offset"] {
            assert!(p.get(key).is_some(), "describe JSON lacks {key}: {p}");
        }
    }

    let input: String = (0..100).map(|i| format!("key{i}:value{i}\n")).collect();
    let out = rill(&cluster, &["produce", "cli", "--key-separator", ":"], Some(&input))?;
    assert!(out.status.success(), "produce: {}", String::from_utf8_lossy(&out.stderr));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("100 of 100 record(s) acknowledged"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );

    let out = rill(
        &cluster,
        &[
            "consume",
            "cli",
            "--from-beginning",
            "--max-messages",
            "100",
            "--timeout-ms",
            "10000",
            "--format",
            "%p %k %v",
        ],
        None,
    )?;
    assert!(out.status.success(), "consume: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let mut lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 100, "{text}");
    lines.sort_unstable();
    for line in &lines {
        let parts: Vec<&str> = line.split(' ').collect();
        let (p, k, v) = (parts[0], parts[1], parts[2]);
        let expected = rill_client::partitioner::partition_for_key(k.as_bytes(), 2);
        assert_eq!(p, expected.to_string(), "key {k} landed in the wrong partition");
        assert_eq!(v, k.replace("key", "value"));
    }

    tracing::info!("--- errors are readable and exit non-zero");
    let out = rill(&cluster, &["produce", "missing"], Some("x\n"))?;
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("UNKNOWN_TOPIC_OR_PARTITION"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = rill(&cluster, &["consume", "cli", "--partition", "9", "--timeout-ms", "100"], None)?;
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("does not exist"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    tracing::info!("--- an operator admits a node id, and withdraws it");
    let out = rill(&cluster, &["cluster", "admit", "0"], None)?;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("cannot admit node 0") && stderr.contains("node ids start at 1"), "{stderr}");
    let out = rill(&cluster, &["cluster", "admit", "7"], None)?;
    assert!(out.status.success(), "admit: {}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("node 7 is admitted"));
    let out = rill(&cluster, &["cluster", "admit", "7", "--revoke"], None)?;
    assert!(out.status.success(), "revoke: {}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("withdrawn"));
    Ok(())
}
