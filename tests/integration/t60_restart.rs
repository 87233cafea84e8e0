//! Restarting every node on its data directory recovers everything acknowledged: after a
//! graceful SIGTERM of all nodes, and after SIGKILL of all nodes.

use rill_client::{Acks, Record};

use crate::harness::{init_logs, read_all, text, wait_for, TestCluster, READY_TIMEOUT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_cluster_restarts_keep_acknowledged_data() -> anyhow::Result<()> {
    init_logs();
    let mut cluster = TestCluster::start(3).await?;
    let client = cluster.client().await?;
    cluster.create_topic(&client, "durable", 2, 3, &[]).await?;
    let mut expected = [Vec::new(), Vec::new()];
    for round in 0..3 {
        for p in 0..2u32 {
            let values: Vec<String> = (0..20).map(|i| format!("r{round}-p{p}-{i}")).collect();
            client.produce("durable", p, values.iter().map(|v| Record::new(v.clone())).collect(), Acks::All).await?;
            expected[p as usize].extend(values);
        }
        if round == 0 {
            tracing::info!("--- SIGTERM every node (graceful), then start them again");
            for id in 1..=3 {
                cluster.terminate(id)?;
            }
        } else if round == 1 {
            tracing::info!("--- SIGKILL every node, then start them again");
            for id in 1..=3 {
                cluster.kill(id)?;
            }
        } else {
            break;
        }
        for id in 1..=3 {
            cluster.start_node(id)?;
        }
        let fresh = cluster.client().await?;
        cluster.wait_for_leaders(&fresh, "durable").await?;
        for p in 0..2u32 {
            let want = expected[p as usize].clone();
            let got = wait_for(READY_TIMEOUT, "acknowledged records after restart", || async {
                let r = read_all(&fresh, "durable", p).await.ok()?;
                (r.len() >= want.len()).then_some(r)
            })
            .await?;
            let got: Vec<String> = got.iter().map(|r| text(&r.value)).collect();
            assert_eq!(got, want, "partition {p} after restart {round}");
        }
    }
    Ok(())
}
