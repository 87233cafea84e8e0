//! The README path: `rill dev` starts a 3-node cluster; the CLI creates, alters, produces (file,
//! headers, lz4), consumes (from a time, JSON), reports cluster status and deletes; Ctrl-C
//! (SIGTERM here) stops every node cleanly.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context};

use crate::harness::{bin, init_logs};

fn rill(bootstrap: &str, args: &[&str], stdin: Option<&str>) -> anyhow::Result<(bool, String, String)> {
    let mut child = Command::new(bin("rill"))
        .args(["--bootstrap", bootstrap])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    if let Some(input) = stdin {
        child.stdin.take().context("stdin")?.write_all(input.as_bytes())?;
    }
    drop(child.stdin.take());
    let out = child.wait_with_output()?;
    Ok((
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

fn free_base_port() -> u16 {
    // rill dev's nodes take three consecutive client ports, the three internal ports
    // INTERNAL_PORT_OFFSET above them and the three Kafka ports KAFKA_PORT_OFFSET above them:
    // probe until all nine bind.
    use rill_launcher::cluster::{INTERNAL_PORT_OFFSET, KAFKA_PORT_OFFSET};
    for _ in 0..100 {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let base = l.local_addr().expect("addr").port();
        if base > 60000 - KAFKA_PORT_OFFSET {
            continue;
        }
        let free = |port: u16| port == base || std::net::TcpListener::bind(("127.0.0.1", port)).is_ok();
        if (0..3).all(|i| free(base + i) && free(base + INTERNAL_PORT_OFFSET + i) && free(base + KAFKA_PORT_OFFSET + i))
        {
            return base;
        }
    }
    panic!("no three consecutive free client ports with their internal and Kafka ports free");
}

/// Starts `rill dev` on free ports in `dir` and returns it with its bootstrap address, once it
/// printed that the cluster is ready.
fn start_rill_dev(dir: &std::path::Path) -> anyhow::Result<(std::process::Child, String)> {
    let base = free_base_port();
    let mut dev = Command::new(bin("rill"))
        .args(["dev", "--nodes", "3", "--base-port", &base.to_string(), "--data-dir"])
        .arg(dir)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(dir.join("rill-dev.stderr"))?)
        .spawn()?;
    let stdout = dev.stdout.take().context("stdout")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                if let Some(b) = line.strip_prefix("bootstrap: ") {
                    return Ok((dev, b.to_string()));
                }
            }
            Err(_) => {
                let _ = dev.kill();
                let stderr = std::fs::read_to_string(dir.join("rill-dev.stderr")).unwrap_or_default();
                let node_1 = std::fs::read_to_string(dir.join("node-1.log")).unwrap_or_default();
                let tail = |t: &str| {
                    t.lines().rev().take(20).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n")
                };
                bail!(
                    "rill dev did not print its bootstrap address within 90 s; its stderr:\n{}\nnode 1's log:\n{}",
                    tail(&stderr),
                    tail(&node_1)
                );
            }
        }
    }
}

/// Process ids of the `rill-server` processes whose command line names `dir`.
fn servers_using(dir: &std::path::Path) -> Vec<u32> {
    let needle = dir.to_string_lossy().into_owned();
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()))
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let args: Vec<String> =
                cmdline.split(|b| *b == 0).map(|a| String::from_utf8_lossy(a).into_owned()).collect();
            args.first().is_some_and(|a| a.ends_with("rill-server")) && args.iter().any(|a| a.contains(&needle))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_rill_dev_takes_its_nodes_along() -> anyhow::Result<()> {
    init_logs();
    let dir = tempfile::tempdir()?;
    let (mut dev, _) = start_rill_dev(dir.path())?;
    let servers = servers_using(dir.path());
    assert_eq!(servers.len(), 3, "rill dev runs three nodes: {servers:?}");

    tracing::info!("--- SIGKILL rill dev: it gets no chance to stop its nodes, the kernel does");
    dev.kill()?;
    dev.wait()?;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let left = servers_using(dir.path());
        if left.is_empty() {
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            bail!("nodes {left:?} outlived their SIGKILLed rill dev by 20 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rill_dev_and_the_cli_end_to_end() -> anyhow::Result<()> {
    init_logs();
    let dir = tempfile::tempdir()?;
    let (mut dev, b) = start_rill_dev(dir.path())?;
    let b = b.as_str();

    let (ok, out, err) = rill(b, &["topic", "create", "dev", "--partitions", "2", "--replication-factor", "3"], None)?;
    assert!(ok, "create: {err}");
    assert!(out.contains("created topic dev"));
    let (ok, _, err) = rill(b, &["topic", "alter", "dev", "--config", "replica.lag.time.max.ms=5s"], None)?;
    assert!(ok, "alter: {err}");

    let file = dir.path().join("input.txt");
    std::fs::write(&file, (0..50).map(|i| format!("k{i}|v{i}\n")).collect::<String>())?;
    let before = std::time::SystemTime::UNIX_EPOCH.elapsed()?.as_millis() as i64;
    let (ok, out, err) = rill(
        b,
        &[
            "produce",
            "dev",
            "--file",
            file.to_str().context("path")?,
            "--key-separator",
            "|",
            "--header",
            "origin=file",
            "--compression",
            "lz4",
            "--output",
            "json",
        ],
        None,
    )?;
    assert!(ok, "produce: {err}");
    let summary: serde_json::Value = serde_json::from_str(out.trim())?;
    assert_eq!((summary["sent"].as_u64(), summary["acknowledged"].as_u64()), (Some(50), Some(50)), "{out}");

    let (ok, out, err) = rill(
        b,
        &[
            "consume",
            "dev",
            "--from-timestamp",
            &before.to_string(),
            "--max-messages",
            "50",
            "--timeout-ms",
            "10000",
            "--output",
            "json",
        ],
        None,
    )?;
    assert!(ok, "consume: {err}");
    let lines: Vec<serde_json::Value> = out.lines().map(serde_json::from_str).collect::<Result<_, _>>()?;
    assert_eq!(lines.len(), 50);
    for l in &lines {
        assert_eq!(l["headers"]["origin"], "file");
        let key = l["key"].as_str().context("key")?;
        assert_eq!(l["value"].as_str(), Some(key.replace('k', "v").as_str()));
        assert_eq!(
            l["partition"].as_u64(),
            Some(u64::from(rill_client::partitioner::partition_for_key(key.as_bytes(), 2)))
        );
    }

    let (ok, out, err) = rill(b, &["cluster", "status", "--output", "json"], None)?;
    assert!(ok, "status: {err}");
    let status: serde_json::Value = serde_json::from_str(out.trim())?;
    assert_eq!(status["nodes"].as_array().map(Vec::len), Some(3));
    let leaders: u64 = status["nodes"].as_array().context("nodes")?.iter().filter_map(|n| n["leaders"].as_u64()).sum();
    assert_eq!(leaders, 2, "{out}");

    let (ok, _, err) = rill(b, &["topic", "delete", "dev"], None)?;
    assert!(ok, "delete: {err}");
    let (ok, _, err) = rill(b, &["topic", "describe", "dev"], None)?;
    assert!(!ok && err.contains("UNKNOWN_TOPIC_OR_PARTITION"), "{err}");

    tracing::info!("--- SIGTERM rill dev: every node stops cleanly");
    let pid = nix::unistd::Pid::from_raw(i32::try_from(dev.id())?);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM)?;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = dev.try_wait()? {
            assert!(status.success(), "rill dev exited with {status}");
            break;
        }
        if std::time::Instant::now() > deadline {
            let _ = dev.kill();
            bail!("rill dev did not stop within 60 s of SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    for id in 1..=3 {
        let log = std::fs::read_to_string(dir.path().join(format!("node-{id}.log")))?;
        assert!(log.contains("stopped serving"), "node {id} did not shut down gracefully:\n{log}");
    }
    Ok(())
}
