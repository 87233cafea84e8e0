//! The idempotent consumer (`examples/rust`, `rill-idempotent-consumer`) on three real nodes:
//! a message sent twice, and messages redelivered after a crash between the database commit
//! and the offset commit, are applied to the database once each.

use std::collections::BTreeMap;
use std::process::{Command, Output};

use rill_client::{Producer, ProducerConfig, Record};

use crate::harness::{bin, init_logs, TestCluster};

/// Short sessions, so a crashed consumer's partitions pass to the next one quickly.
const GROUP_ENV: &[(&str, &str)] = &[("RILL_GROUP_SESSION_TIMEOUT", "2s"), ("RILL_GROUP_HEARTBEAT_INTERVAL", "300ms")];

fn consumer(cluster: &TestCluster, db: &std::path::Path, extra: &[&str]) -> anyhow::Result<Output> {
    let db = db.to_string_lossy().into_owned();
    Ok(Command::new(bin("rill-idempotent-consumer"))
        .args(["--bootstrap", &cluster.bootstrap_arg(), "--topic", "payments", "--db", &db])
        .args(extra)
        .output()?)
}

/// The count of skipped duplicates a consumer printed.
fn skipped(stdout: &[u8]) -> anyhow::Result<u64> {
    let said = String::from_utf8_lossy(stdout);
    said.split(", skipped ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no count of skipped duplicates in {said:?}"))
}

#[tokio::test]
async fn duplicates_and_redeliveries_take_effect_once() -> anyhow::Result<()> {
    init_logs();
    let cluster = TestCluster::start_with(3, GROUP_ENV, None).await?;
    let client = cluster.client().await?;
    cluster.create_topic(&client, "payments", 2, 3, &[]).await?;
    cluster.wait_for_leaders(&client, "__consumer_offsets").await?;
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("payments.sqlite");

    tracing::info!("--- 20 payments, two of them sent twice (a producer's retry at the application level)");
    let producer = Producer::new(client.clone(), ProducerConfig::default());
    let mut keys: Vec<String> = (0..20).map(|i| format!("pay-{i}")).collect();
    keys.extend(["pay-3".to_string(), "pay-11".to_string()]);
    let mut sent = Vec::new();
    for k in &keys {
        sent.push(producer.send("payments", Record::keyed(k.clone(), format!("amount for {k}"))).await?);
    }
    for s in sent {
        s.await?;
    }
    producer.close().await;

    tracing::info!("--- a consumer crashes after 7 effects, before committing their offsets");
    let crashed = consumer(&cluster, &db, &["--crash-after", "7"])?;
    assert_eq!(crashed.status.code(), Some(3), "{crashed:?}");

    tracing::info!("--- the next consumer gets them again, and the rest");
    let finished = consumer(&cluster, &db, &["--exit-when-idle", "3s"])?;
    assert!(finished.status.success(), "{finished:?}");
    let (first, second) = (skipped(&crashed.stdout)?, skipped(&finished.stdout)?);
    let said = String::from_utf8_lossy(&finished.stdout).into_owned();
    assert!(said.contains("applied 13 message(s)"), "the 7 applied before the crash are not applied again: {said}");
    // The 7th effect was never followed by an offset commit: it came again, and was skipped.
    assert!(second >= 1, "a redelivered effect is skipped: {said}");
    assert!(first + second >= 3, "both duplicates and the redelivery are skipped ({first} + {second})");

    let report = consumer(&cluster, &db, &["--report"])?;
    assert!(report.status.success(), "{report:?}");
    let effects: BTreeMap<String, u64> = serde_json::from_slice(&report.stdout)?;
    let want: BTreeMap<String, u64> = (0..20).map(|i| (format!("pay-{i}"), 1)).collect();
    assert_eq!(effects, want, "every payment's effect exactly once");
    Ok(())
}
