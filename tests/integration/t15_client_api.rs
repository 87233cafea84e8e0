//! The Rust client's Producer and Consumer against a real cluster: batching, compression,
//! Kafka's partitioner, delivery futures, flush; assign, seek (beginning, offset, time),
//! pause/resume.

use std::collections::BTreeMap;
use std::time::Duration;

use rill_client::partitioner::partition_for_key;
use rill_client::{
    Acks, Compression, Consumer, ConsumerConfig, OffsetSpec, Producer, ProducerConfig, Record, TopicPartition,
};

use crate::harness::{init_logs, text, TestCluster};

const TOPIC: &str = "api";
const PARTITIONS: u32 = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producer_and_consumer_round_trip() -> anyhow::Result<()> {
    init_logs();
    let cluster = TestCluster::start(3).await?;
    let client = cluster.client().await?;
    cluster.create_topic(&client, TOPIC, PARTITIONS, 3, &[]).await?;

    tracing::info!("--- 600 keyed records, lz4, small batches, every future resolves");
    let config = ProducerConfig {
        compression: Compression::Lz4,
        batch_size: 2048,
        linger: Duration::from_millis(20),
        acks: Acks::All,
        ..Default::default()
    };
    let producer = Producer::new(client.clone(), config);
    let mut deliveries = Vec::new();
    for i in 0..600 {
        let key = format!("user-{}", i % 37);
        let d = producer
            .send(TOPIC, Record::keyed(key.clone(), format!("event-{i}")).with_header("n", i.to_string()))
            .await?;
        deliveries.push((key, i, d));
    }
    producer.flush().await;
    let mut landed: BTreeMap<(u32, u64), (String, usize)> = BTreeMap::new();
    let mut per_key_offsets: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for (key, i, d) in deliveries {
        let md = d.await?;
        assert_eq!(md.partition, partition_for_key(key.as_bytes(), PARTITIONS), "key {key} went to Kafka's partition");
        let offset = md.offset.expect("acks=all gives offsets");
        assert!(landed.insert((md.partition, offset), (key.clone(), i)).is_none(), "two records at one offset");
        per_key_offsets.entry(key).or_default().push(offset);
    }
    for (key, offsets) in &per_key_offsets {
        assert!(offsets.windows(2).all(|w| w[0] < w[1]), "per-key order broken for {key}");
    }

    tracing::info!("--- unkeyed records stick to one partition per batch");
    let unkeyed =
        Producer::new(client.clone(), ProducerConfig { linger: Duration::from_millis(50), ..Default::default() });
    let ds: Vec<_> =
        futures::future::try_join_all((0..10).map(|i| unkeyed.send(TOPIC, Record::new(format!("sticky-{i}"))))).await?;
    let parts: Vec<u32> = futures::future::try_join_all(ds).await?.into_iter().map(|m| m.partition).collect();
    assert!(parts.iter().all(|p| *p == parts[0]), "one linger window, one partition: {parts:?}");
    unkeyed.close().await;
    producer.close().await;

    tracing::info!("--- a consumer reads everything back, in order, with headers");
    let mut consumer =
        Consumer::new(client.clone(), ConsumerConfig { start: OffsetSpec::Earliest, ..Default::default() });
    consumer.assign((0..PARTITIONS).map(|p| TopicPartition::new(TOPIC, p)));
    let mut seen: BTreeMap<(u32, u64), String> = BTreeMap::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while seen.len() < 610 && tokio::time::Instant::now() < deadline {
        for r in consumer.poll(Duration::from_millis(500)).await? {
            let v = text(&r.value);
            if let Some(n) = v.strip_prefix("event-") {
                let n: usize = n.parse()?;
                assert_eq!(r.headers, vec![("n".to_string(), Some(bytes::Bytes::from(n.to_string())))]);
            }
            assert!(seen.insert((r.partition, r.offset), v).is_none(), "record returned twice");
        }
    }
    assert_eq!(seen.len(), 610);
    for ((p, o), (key, i)) in &landed {
        assert_eq!(seen.get(&(*p, *o)).map(String::as_str), Some(format!("event-{i}").as_str()), "{key} at {p}/{o}");
    }

    tracing::info!("--- seek to an offset, to a time, pause and resume");
    let tp = TopicPartition::new(TOPIC, 0);
    consumer.seek(&tp, 5)?;
    consumer.pause(&[TopicPartition::new(TOPIC, 1), TopicPartition::new(TOPIC, 2)]);
    let after_seek = consumer.poll(Duration::from_secs(2)).await?;
    assert_eq!(after_seek.first().map(|r| (r.partition, r.offset)), Some((0, 5)));
    assert!(after_seek.iter().all(|r| r.partition == 0), "paused partitions return nothing");
    let before = std::time::SystemTime::UNIX_EPOCH.elapsed()?.as_millis() as i64;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let late = client.produce(TOPIC, 0, vec![Record::new("late")], Acks::All).await?.base_offset.expect("offset");
    assert_eq!(
        consumer.seek_to(&tp, OffsetSpec::Timestamp(before)).await?,
        late,
        "first record appended after the time"
    );
    assert_eq!(
        consumer.seek_to(&tp, OffsetSpec::Timestamp(i64::MAX)).await?,
        late + 1,
        "no record that late: the high watermark"
    );
    consumer.resume(&[TopicPartition::new(TOPIC, 1)]);
    assert_eq!(consumer.position(&tp), Some(late + 1));
    consumer.close();
    Ok(())
}
