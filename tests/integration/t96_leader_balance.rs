//! Preferred-leader balancing: after a failover, leadership returns to the preferred replica
//! once it is back in sync; a gracefully stopped leader hands its partitions over before it
//! exits; no acknowledged record is lost or duplicated on the way.

use std::collections::BTreeMap;

use rill_client::{Acks, Client, Record};

use crate::harness::{init_logs, read_all, text, wait_for, TestCluster, READY_TIMEOUT};

const TOPIC: &str = "balanced";

/// Leader of each partition, when every partition has one.
async fn leaders(client: &Client) -> Option<Vec<(u64, Vec<u64>)>> {
    let d = client.describe_topic(TOPIC).await.ok()?;
    d.partitions.iter().map(|p| p.leader.map(|l| (l, p.replicas.clone()))).collect()
}

async fn all_preferred(client: &Client) -> Option<()> {
    leaders(client).await?.iter().all(|(leader, replicas)| replicas.first() == Some(leader)).then_some(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leadership_returns_to_the_preferred_replica_after_a_restart() -> anyhow::Result<()> {
    init_logs();
    let mut cluster = TestCluster::start(3).await?;
    let client = cluster.client().await?;
    cluster.create_topic(&client, TOPIC, 3, 3, &[("replica.lag.time.max.ms", "1000")]).await?;
    wait_for(READY_TIMEOUT, "every partition led by its preferred replica", || all_preferred(&client)).await?;

    let mut expected: Vec<Vec<String>> = vec![Vec::new(); 3];
    // A fresh client per round: a plain (non-idempotent) produce is not retried after a
    // transport error, and the first client's cache still names the killed node.
    let mut produce = |round: u32, client: Client| {
        let batches: Vec<(u32, Vec<String>)> =
            (0..3u32).map(|p| (p, (0..10).map(|i| format!("r{round}-p{p}-{i}")).collect())).collect();
        for (p, values) in &batches {
            expected[*p as usize].extend(values.iter().cloned());
        }
        async move {
            for (p, values) in batches {
                client.produce(TOPIC, p, values.into_iter().map(Record::new).collect(), Acks::All).await?;
            }
            anyhow::Ok(())
        }
    };
    produce(0, cluster.client().await?).await?;

    tracing::info!("--- SIGKILL node 1: its partition fails over");
    cluster.kill(1)?;
    wait_for(READY_TIMEOUT, "a leader other than node 1 everywhere", || async {
        leaders(&client).await?.iter().all(|(l, _)| *l != 1).then_some(())
    })
    .await?;
    produce(1, cluster.client().await?).await?;

    tracing::info!("--- restart node 1: once in sync, it leads its preferred partition again");
    cluster.start_node(1)?;
    wait_for(READY_TIMEOUT * 3, "every partition led by its preferred replica again", || all_preferred(&client))
        .await
        .map_err(|e| e.context(cluster.log_tail(2)))?;
    let per_node: BTreeMap<u64, usize> =
        leaders(&client).await.unwrap_or_default().iter().fold(BTreeMap::new(), |mut m, (l, _)| {
            *m.entry(*l).or_default() += 1;
            m
        });
    assert_eq!(per_node, BTreeMap::from([(1, 1), (2, 1), (3, 1)]), "one leader per node");

    produce(2, cluster.client().await?).await?;

    tracing::info!("--- SIGTERM node 2: it hands the partition it leads over before exiting");
    // The reading client learns node 2 as a leader now; once node 2 is gone its reads must
    // follow the new leader instead of failing on the dead address.
    client.refresh_metadata(&[TOPIC.to_string()]).await?;
    cluster.terminate(2)?;
    let log = cluster.log_text(2);
    assert!(
        log.contains("handing led partitions over before stopping") && log.contains("leadership handed over"),
        "node 2 did not hand over its partition:\n{}",
        cluster.log_tail(2)
    );
    wait_for(READY_TIMEOUT, "a leader other than node 2 everywhere", || async {
        leaders(&client).await?.iter().all(|(l, _)| *l != 2).then_some(())
    })
    .await?;
    produce(3, cluster.client().await?).await?;
    for p in 0..3u32 {
        let got: Vec<String> = read_all(&client, TOPIC, p).await?.iter().map(|r| text(&r.value)).collect();
        assert_eq!(got, expected[p as usize], "partition {p}: every acknowledged record, once, in order");
    }
    Ok(())
}
