//! A new node joins a running cluster once an operator admits it: before that it keeps asking
//! and is not listed; then it is listed and alive, new topics place replicas and
//! leaders on it, it serves acks=all writes, it rejoins after a restart, and a node that claims
//! a taken id is refused and exits.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::Duration;

use rill_client::{Acks, Record};

use crate::harness::{bin, init_logs, read_all, text, wait_for, TestCluster, READY_TIMEOUT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_node_joins_takes_replicas_and_rejoins_after_restart() -> anyhow::Result<()> {
    init_logs();
    let mut cluster = TestCluster::start(3).await?;
    let client = cluster.client().await?;

    tracing::info!("--- node 4 holds a certificate from the cluster's CA, but is not admitted yet");
    cluster.add_joining_node(4)?;
    wait_for(READY_TIMEOUT, "node 4 told it is not admitted", || async {
        cluster.log_tail(4).contains("node 4 is not admitted to the cluster").then_some(())
    })
    .await
    .map_err(|e| e.context(cluster.log_tail(4)))?;
    let listed = client.describe_cluster().await?.nodes.iter().any(|n| n.node_id == 4);
    assert!(!listed, "a node that was not admitted must not be registered");

    tracing::info!("--- the operator admits it: it joins");
    client.admit_node(4, false).await?;
    let addr4 = cluster.addr(4);
    wait_for(READY_TIMEOUT, "node 4 listed and alive", || async {
        let c = client.describe_cluster().await.ok()?;
        let voters: Vec<u64> = c.nodes.iter().filter(|n| n.metadata_voter).map(|n| n.node_id).collect();
        assert_eq!(voters, [1, 2, 3], "joining adds a broker, not a metadata voter");
        c.nodes.iter().any(|n| n.node_id == 4 && n.alive && n.address == addr4).then_some(())
    })
    .await
    .map_err(|e| e.context(cluster.log_tail(4)))?;

    // 4 partitions × 3 replicas over 4 nodes: placement gives every node 3 replicas and makes
    // every node the preferred leader of one partition.
    let topic = cluster.create_topic(&client, "joined", 4, 3, &[("replica.lag.time.max.ms", "1000")]).await?;
    let mut replicas: BTreeMap<u64, usize> = BTreeMap::new();
    for p in &topic.partitions {
        for r in &p.replicas {
            *replicas.entry(*r).or_default() += 1;
        }
    }
    assert_eq!(replicas, BTreeMap::from([(1, 3), (2, 3), (3, 3), (4, 3)]), "replicas per node");
    let preferred: Vec<u64> = topic.partitions.iter().map(|p| p.replicas[0]).collect();
    assert!(preferred.contains(&4), "node 4 is the preferred leader of one partition: {preferred:?}");

    let mut expected: Vec<Vec<String>> = vec![Vec::new(); 4];
    let mut produce_round = |round: u32| {
        let client = &client;
        let batches: Vec<(u32, Vec<String>)> =
            (0..4u32).map(|p| (p, (0..10).map(|i| format!("r{round}-p{p}-{i}")).collect())).collect();
        for (p, values) in &batches {
            expected[*p as usize].extend(values.iter().cloned());
        }
        async move {
            for (p, values) in batches {
                let records: Vec<Record> = values.into_iter().map(Record::new).collect();
                // With replica.lag.time.max.ms=1000 a follower of a partition led by the new node
                // may still be catching up: NOT_ENOUGH_REPLICAS (like a leader moving) wrote
                // nothing, so it is retried (as Kafka's producers do) until the ISR is large
                // enough again.
                let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
                loop {
                    match client.produce("joined", p, records.clone(), Acks::All).await {
                        Err(e) if e.is_retriable_without_effect() && tokio::time::Instant::now() < deadline => {
                            tokio::time::sleep(std::time::Duration::from_millis(100)).await
                            // backoff, not synchronisation
                        }
                        other => {
                            other?;
                            break;
                        }
                    }
                }
            }
            anyhow::Ok(())
        }
    };
    produce_round(0).await?;

    // Every partition with a replica on node 4 has it in sync: the new node replicates.
    wait_for(READY_TIMEOUT, "node 4 in the ISR of its partitions", || async {
        let d = client.describe_topic("joined").await.ok()?;
        d.partitions.iter().filter(|p| p.replicas.contains(&4)).all(|p| p.isr.contains(&4)).then_some(())
    })
    .await?;

    tracing::info!("--- SIGKILL node 4; it drops out of the ISR; start it again: it is a member already");
    cluster.kill(4)?;
    wait_for(READY_TIMEOUT, "node 4 out of every ISR", || async {
        let d = client.describe_topic("joined").await.ok()?;
        d.partitions.iter().all(|p| p.leader.is_some() && !p.isr.contains(&4)).then_some(())
    })
    .await?;
    cluster.start_node(4)?;
    wait_for(READY_TIMEOUT, "node 4 back in the ISR of its partitions", || async {
        let d = client.describe_topic("joined").await.ok()?;
        d.partitions
            .iter()
            .filter(|p| p.replicas.contains(&4))
            .all(|p| p.leader.is_some() && p.isr.contains(&4))
            .then_some(())
    })
    .await
    .map_err(|e| e.context(cluster.log_tail(4)))?;
    produce_round(1).await?;
    for p in 0..4u32 {
        let got: Vec<String> = read_all(&client, "joined", p).await?.iter().map(|r| text(&r.value)).collect();
        assert_eq!(got, expected[p as usize], "partition {p}");
    }

    tracing::info!("--- a second node claiming id 4 at another address is refused and exits");
    let dir = tempfile::tempdir()?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let internal_port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let child = std::process::Command::new(bin("rill-server"))
        .args(["--node-id", "4", "--join", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--internal-listen", &format!("127.0.0.1:{internal_port}")])
        // A certificate from the cluster's CA naming node 4: the impostor gets through TLS and is
        // refused by the metadata leader.
        .args(cluster.local().tls_args(4)?)
        .arg("--cluster-members")
        .arg(cluster.members_arg())
        .arg("--data-dir")
        .arg(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let output =
        tokio::time::timeout(Duration::from_secs(60), tokio::task::spawn_blocking(|| child.wait_with_output()))
            .await
            .map_err(|_| anyhow::anyhow!("the impostor kept running"))???;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "the impostor must fail: {stderr}");
    assert!(stderr.contains("refused") && stderr.contains("node id 4 is registered at"), "{stderr}");
    Ok(())
}
