//! Produce keyed records with the batching producer and print where each landed.
//!
//! ```sh
//! cargo run -p rill-client --example produce -- 127.0.0.1:7001 demo 10
//! ```

use rill_client::{Client, Producer, ProducerConfig, Record};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let bootstrap = args.next().unwrap_or_else(|| "127.0.0.1:7001".into());
    let topic = args.next().unwrap_or_else(|| "demo".into());
    let count: usize = args.next().map(|n| n.parse()).transpose()?.unwrap_or(10);

    let client = Client::connect(&[bootstrap]).await?;
    let producer = Producer::new(client, ProducerConfig::default());
    let mut deliveries = Vec::new();
    for i in 0..count {
        let record = Record::keyed(format!("key-{}", i % 4), format!("hello {i}")).with_header("source", "example");
        deliveries.push(producer.send(&topic, record).await?);
    }
    producer.flush().await;
    for (i, d) in deliveries.into_iter().enumerate() {
        let md = d.await?;
        println!("hello {i} -> {topic}/{} at offset {:?}", md.partition, md.offset);
    }
    producer.close().await;
    Ok(())
}
