//! Two of three nodes down: acks=all never reports success.

use std::time::Duration;

use rill_client::Compression;
use rill_client::{Acks, Record};

use crate::harness::{init_logs, read_all, text, wait_for, TestCluster, READY_TIMEOUT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_all_never_succeeds_without_a_majority() -> anyhow::Result<()> {
    init_logs();
    let mut cluster = TestCluster::start(3).await?;
    let client = cluster.client().await?;
    let d = cluster.create_topic(&client, "majority", 1, 3, &[]).await?;
    client.produce("majority", 0, vec![Record::new("committed")], Acks::All).await?;

    let leader = d.partitions[0].leader.expect("leader");
    let others: Vec<u64> = d.partitions[0].replicas.iter().copied().filter(|r| *r != leader).collect();
    tracing::info!(?others, "--- kill both followers");
    for id in &others {
        cluster.kill(*id)?;
    }

    tracing::info!("--- every acks=all attempt fails");
    for i in 0..5 {
        let r = client
            .produce_with(
                "majority",
                0,
                vec![Record::new(format!("doomed-{i}"))],
                Acks::All,
                Compression::None,
                Duration::from_secs(2),
            )
            .await;
        assert!(r.is_err(), "attempt {i} reported success without a majority: {r:?}");
    }

    tracing::info!("--- the majority returns; committed data is intact");
    for id in &others {
        cluster.start_node(*id)?;
    }
    let fresh = cluster.client().await?;
    cluster.wait_for_leaders(&fresh, "majority").await?;
    let records =
        wait_for(READY_TIMEOUT, "the committed record", || async { read_all(&fresh, "majority", 0).await.ok() })
            .await?;
    assert_eq!(records.first().map(|r| text(&r.value)).as_deref(), Some("committed"));
    Ok(())
}
