//! Quiescence: idle partitions stop heartbeating, yet keep an honest ISR (from node liveness),
//! take an `acks=all` write at once, fail over when their leader's node dies, take a restarted
//! replica back, and are handed over when their leader stops gracefully — with no acknowledged
//! record lost or duplicated.

use std::time::Duration;

use rill_client::{Acks, Client, Record, TopicDescription};

use crate::harness::{init_logs, read_all, text, wait_for, TestCluster, READY_TIMEOUT};

const TOPIC: &str = "quiet";
const PARTITIONS: u32 = 6;
/// Quiescing takes 3 s of idleness plus a check interval; allow for a slow machine.
const QUIESCE_TIMEOUT: Duration = Duration::from_secs(60);

/// The description when every partition is led, quiescent and fully in sync.
async fn all_quiescent(client: &Client) -> Option<TopicDescription> {
    let d = client.describe_topic(TOPIC).await.ok()?;
    d.partitions.iter().all(|p| p.leader.is_some() && p.quiescent && p.isr.len() == 3).then_some(d)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_partitions_quiesce_and_still_fail_over() -> anyhow::Result<()> {
    init_logs();
    let mut cluster = TestCluster::start(3).await?;
    let client = cluster.client().await?;
    let configs = [("replica.lag.time.max.ms", "2000"), ("min.insync.replicas", "2")];
    cluster.create_topic(&client, TOPIC, PARTITIONS, 3, &configs).await?;

    let mut expected: Vec<Vec<String>> = vec![Vec::new(); PARTITIONS as usize];
    let mut produce = |round: u32, client: Client| {
        let batches: Vec<(u32, Vec<String>)> =
            (0..PARTITIONS).map(|p| (p, (0..5).map(|i| format!("r{round}-p{p}-{i}")).collect())).collect();
        for (p, values) in &batches {
            expected[*p as usize].extend(values.iter().cloned());
        }
        async move {
            for (p, values) in batches {
                client.produce(TOPIC, p, values.into_iter().map(Record::new).collect(), Acks::All).await?;
                // The write woke the group: it is not quiescent until it has been idle again.
                let d = client.describe_topic(TOPIC).await?;
                anyhow::ensure!(!d.partitions[p as usize].quiescent, "partition {p} still quiescent after a write");
            }
            anyhow::Ok(())
        }
    };
    produce(0, cluster.client().await?).await?;

    tracing::info!("--- idle: every partition quiesces, its followers staying in the ISR");
    wait_for(QUIESCE_TIMEOUT, "every partition quiescent with a full ISR", || all_quiescent(&client))
        .await
        .map_err(|e| e.context(cluster.log_tail(1)))?;

    tracing::info!("--- a write to a quiescent partition is accepted (acks=all) and wakes it");
    produce(1, cluster.client().await?).await?;
    let quiet = wait_for(QUIESCE_TIMEOUT, "every partition quiescent again", || all_quiescent(&client)).await?;

    let victim = quiet.partitions[0].leader.unwrap_or(1);
    tracing::info!(victim, "--- SIGKILL the leader of partition 0 while everything is quiescent");
    cluster.kill(victim)?;
    wait_for(READY_TIMEOUT, "a live leader everywhere and the dead node out of every ISR", || async {
        let d = client.describe_topic(TOPIC).await.ok()?;
        d.partitions
            .iter()
            .all(|p| p.leader.is_some_and(|l| l != victim) && !p.isr.contains(&victim) && p.isr.len() == 2)
            .then_some(())
    })
    .await
    .map_err(|e| e.context(cluster.log_tail(if victim == 1 { 2 } else { 1 })))?;
    produce(2, cluster.client().await?).await?;

    tracing::info!(victim, "--- restart it: it catches up, rejoins every ISR, and the partitions quiesce again");
    cluster.start_node(victim)?;
    wait_for(QUIESCE_TIMEOUT * 2, "every partition quiescent with a full ISR after the restart", || {
        all_quiescent(&client)
    })
    .await
    .map_err(|e| e.context(cluster.log_tail(victim)))?;

    // A quiescent group hears no heartbeats: the stopping leader must judge its followers by
    // their nodes, or it finds no live replica to hand over to and leaves them to a failover.
    // Quiescent for longer than the shutdown's "recently heard" window (1 s): the scenario
    // needs the time to pass, nothing is waited for.
    tokio::time::sleep(Duration::from_secs(2)).await;
    // Leaders as they are now (the balancer may have moved one meanwhile, waking it).
    let quiet =
        wait_for(QUIESCE_TIMEOUT, "every partition still or again quiescent", || all_quiescent(&client)).await?;
    let stopping = quiet.partitions[0].leader.unwrap_or(1);
    let led = quiet.partitions.iter().filter(|p| p.leader == Some(stopping)).count();
    tracing::info!(stopping, led, "--- SIGTERM a node while everything is quiescent: it hands every partition over");
    cluster.terminate(stopping)?;
    let log = cluster.log_text(stopping);
    let handed = log.rsplit_once("handing led partitions over before stopping").map_or(0, |(_, shutdown)| {
        // Internal (coordinator) partitions are handed over too; count this topic's.
        shutdown.lines().filter(|l| l.contains("leadership handed over") && l.contains(&format!("{TOPIC}/"))).count()
    });
    assert_eq!(handed, led, "node {stopping} led {led} quiescent partitions:\n{}", cluster.log_tail(stopping));
    wait_for(READY_TIMEOUT, "a live leader everywhere", || async {
        let d = client.describe_topic(TOPIC).await.ok()?;
        d.partitions.iter().all(|p| p.leader.is_some_and(|l| l != stopping)).then_some(())
    })
    .await?;

    for p in 0..PARTITIONS {
        let got: Vec<String> = read_all(&client, TOPIC, p).await?.into_iter().map(|r| text(&r.value)).collect();
        assert_eq!(got, expected[p as usize], "partition {p}: every acknowledged record, once, in order");
    }
    Ok(())
}
