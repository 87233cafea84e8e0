//! Read every partition of a topic from the beginning and print the records.
//!
//! ```sh
//! cargo run -p rill-client --example consume -- 127.0.0.1:7001 demo
//! ```

use std::time::Duration;

use rill_client::{Client, Consumer, ConsumerConfig, OffsetSpec, TopicPartition};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let bootstrap = args.next().unwrap_or_else(|| "127.0.0.1:7001".into());
    let topic = args.next().unwrap_or_else(|| "demo".into());

    let client = Client::connect(&[bootstrap]).await?;
    let partitions = client.partition_count(&topic).await?;
    let mut consumer = Consumer::new(client, ConsumerConfig { start: OffsetSpec::Earliest, ..Default::default() });
    consumer.assign((0..partitions).map(|p| TopicPartition::new(&topic, p)));
    loop {
        let records = consumer.poll(Duration::from_secs(2)).await?;
        if records.is_empty() {
            break; // nothing new for two seconds
        }
        for r in records {
            let key = r.key.as_deref().map(String::from_utf8_lossy).unwrap_or_default();
            println!(
                "{}/{}@{} {key}={}",
                r.topic,
                r.partition,
                r.offset,
                String::from_utf8_lossy(r.value.as_deref().unwrap_or_default())
            );
        }
    }
    consumer.close();
    Ok(())
}
