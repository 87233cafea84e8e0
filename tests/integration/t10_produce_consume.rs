//! The basic path: create, produce with every acks level, read back, describe.

use std::time::Duration;

use bytes::Bytes;
use rill_client::{Acks, Compression, OffsetSpec, Record};

use crate::harness::{init_logs, read_all, text, wait_for, TestCluster, READY_TIMEOUT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_with_each_acks_level_and_read_back() -> anyhow::Result<()> {
    init_logs();
    let cluster = TestCluster::start(3).await?;
    let client = cluster.client().await?;
    let d = cluster.create_topic(&client, "basic", 3, 3, &[]).await?;
    assert_eq!(d.partitions.len(), 3);
    for p in &d.partitions {
        assert_eq!(p.replicas.len(), 3);
    }
    tracing::info!("--- each partition is led by its preferred (first) replica: leaders spread over nodes");
    let d = wait_for(READY_TIMEOUT, "preferred leaders", || async {
        let d = client.describe_topic("basic").await.ok()?;
        d.partitions.iter().all(|p| p.leader == p.replicas.first().copied()).then_some(d)
    })
    .await?;
    let leaders: std::collections::BTreeSet<u64> = d.partitions.iter().filter_map(|p| p.leader).collect();
    assert_eq!(leaders.len(), 3, "{d:?}");

    tracing::info!("--- acks=all, acks=1, acks=0 on partition 0");
    let a = client.produce("basic", 0, vec![Record::new("a1"), Record::new("a2")], Acks::All).await?;
    assert_eq!(a.base_offset, Some(0));
    let b = client.produce("basic", 0, vec![Record::keyed("k", "b1")], Acks::Leader).await?;
    assert_eq!(b.base_offset, Some(2));
    let c = client.produce("basic", 0, vec![Record::new("c1")], Acks::None).await?;
    assert_eq!(c.base_offset, None);

    tracing::info!("--- everything becomes visible, in order, exactly once");
    let records = wait_for(READY_TIMEOUT, "4 committed records", || async {
        let r = read_all(&client, "basic", 0).await.ok()?;
        (r.len() == 4).then_some(r)
    })
    .await?;
    let values: Vec<String> = records.iter().map(|r| text(&r.value)).collect();
    assert_eq!(values, vec!["a1", "a2", "b1", "c1"]);
    assert_eq!(records.iter().map(|r| r.offset).collect::<Vec<_>>(), vec![0, 1, 2, 3]);
    assert_eq!(records[2].key.as_deref(), Some(&b"k"[..]));

    tracing::info!("--- offsets and describe agree");
    assert_eq!(client.list_offset("basic", 0, OffsetSpec::Earliest).await?, 0);
    assert_eq!(client.list_offset("basic", 0, OffsetSpec::Latest).await?, 4);
    let d = client.describe_topic("basic").await?;
    let p0 = &d.partitions[0];
    assert_eq!((p0.log_start_offset, p0.high_watermark, p0.log_end_offset), (0, 4, 4));
    assert!(p0.isr.len() >= 2, "isr {:?}", p0.isr);

    tracing::info!("--- a long poll returns as soon as data arrives");
    let waiter = {
        let client = client.clone();
        tokio::spawn(async move { client.fetch("basic", 1, Some(0), Duration::from_secs(20)).await })
    };
    client.produce("basic", 1, vec![Record::new("late")], Acks::All).await?;
    let fetched = waiter.await??;
    assert_eq!(fetched.records.len(), 1);
    assert_eq!(text(&fetched.records[0].value), "late");

    tracing::info!("--- nulls survive the trip: a tombstone, a null key, a null header value, repeated header keys");
    let mut odd = Record::new("v");
    odd.headers = vec![("h".into(), None), ("h".into(), Some(Bytes::from_static(b"2")))];
    let nulls = vec![Record::tombstone("gone"), Record { key: None, value: None, ..Record::default() }, odd];
    let at = client.produce("basic", 2, nulls.clone(), Acks::All).await?.base_offset.expect("offset");
    let back = client.fetch("basic", 2, Some(at), Duration::ZERO).await?.records;
    assert_eq!(back.len(), 3);
    assert_eq!((back[0].key.as_deref(), back[0].value.as_deref()), (Some(&b"gone"[..]), None));
    assert_eq!((back[1].key.as_deref(), back[1].value.as_deref()), (None, None));
    assert_eq!(back[2].headers, nulls[2].headers);

    tracing::info!("--- every codec Kafka clients send is stored and read back");
    for codec in [Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd] {
        let values: Vec<Record> =
            (0..50).map(|i| Record::keyed(format!("k{i}"), format!("{}-{i}", codec.name()))).collect();
        let ack = client.produce_with("basic", 2, values, Acks::All, codec, Duration::from_secs(10)).await?;
        let from = ack.base_offset.expect("offset");
        let got = client.fetch("basic", 2, Some(from), Duration::ZERO).await?.records;
        let got: Vec<String> = got.iter().take(50).map(|r| text(&r.value)).collect();
        let want: Vec<String> = (0..50).map(|i| format!("{}-{i}", codec.name())).collect();
        assert_eq!(got, want, "{codec:?}");
    }
    Ok(())
}
