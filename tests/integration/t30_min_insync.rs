//! min.insync.replicas=3 on RF 3 with one node down: acks=all is refused with
//! NOT_ENOUGH_REPLICAS once the ISR shrinks; acks=1 still succeeds.

use rill_client::{Acks, ErrorCode, Record};

use crate::harness::{init_logs, wait_for, TestCluster, READY_TIMEOUT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_all_refused_when_isr_below_min_insync() -> anyhow::Result<()> {
    init_logs();
    let mut cluster = TestCluster::start(3).await?;
    let client = cluster.client().await?;
    let d = cluster
        .create_topic(&client, "strict", 1, 3, &[("min.insync.replicas", "3"), ("replica.lag.time.max.ms", "2000")])
        .await?;
    let leader = d.partitions[0].leader.expect("leader");

    tracing::info!("--- with all three in sync, acks=all succeeds");
    wait_for(READY_TIMEOUT, "ISR of 3", || async {
        let d = client.describe_topic("strict").await.ok()?;
        (d.partitions[0].isr.len() == 3).then_some(())
    })
    .await?;
    client.produce("strict", 0, vec![Record::new("before")], Acks::All).await?;

    let follower = d.partitions[0].replicas.iter().copied().find(|r| *r != leader).expect("a follower");
    tracing::info!(follower, "--- kill a follower; wait for the ISR to shrink");
    cluster.kill(follower)?;
    wait_for(READY_TIMEOUT, "ISR to shrink to 2", || async {
        let d = client.describe_topic("strict").await.ok()?;
        (d.partitions[0].isr.len() == 2 && !d.partitions[0].isr.contains(&follower)).then_some(())
    })
    .await?;

    tracing::info!("--- acks=all is refused before appending");
    let hw_before = client.list_offset("strict", 0, rill_client::OffsetSpec::Latest).await?;
    let err =
        client.produce("strict", 0, vec![Record::new("refused")], Acks::All).await.expect_err("acks=all must fail");
    assert_eq!(err.code(), Some(ErrorCode::NotEnoughReplicas), "{err}");
    assert_eq!(
        client.list_offset("strict", 0, rill_client::OffsetSpec::Latest).await?,
        hw_before,
        "nothing was appended"
    );

    tracing::info!("--- acks=1 still succeeds");
    let ack = client.produce("strict", 0, vec![Record::new("leader-only")], Acks::Leader).await?;
    assert_eq!(ack.base_offset, Some(hw_before));

    tracing::info!("--- the follower returns, rejoins the ISR, acks=all works again");
    cluster.start_node(follower)?;
    wait_for(READY_TIMEOUT, "ISR back to 3", || async {
        let d = client.describe_topic("strict").await.ok()?;
        (d.partitions[0].isr.len() == 3).then_some(())
    })
    .await?;
    client.produce("strict", 0, vec![Record::new("after")], Acks::All).await?;
    Ok(())
}
