//! Workload processes: producers and assign-mode consumers, recording every operation.

use std::collections::BTreeMap;
use std::time::Duration;

use rand::Rng;
use rill_client::{Acks, Client, ErrorCode, Record};
use rill_proto::common::Compression;
use rill_rt::Instant;

use crate::history::{OpKind, Outcome, Recorder};
use crate::oracle::AckOracle;

/// What the workload processes share.
#[derive(Clone)]
pub struct Workload {
    /// Topic.
    pub topic: String,
    /// Partition count.
    pub partitions: u32,
    /// Producer acknowledgement level.
    pub acks: Acks,
    /// Synced copies an acknowledgement promises (majority for acks=all, 1 for acks=1).
    pub required_copies: usize,
    /// Server-side produce timeout.
    pub produce_timeout: Duration,
    /// When processes stop starting new operations.
    pub deadline: Instant,
    /// The history.
    pub recorder: Recorder,
    /// Synced-copy oracle.
    pub oracle: AckOracle,
}

/// Classifies a failed send: `fail` only when the error proves nothing was appended.
fn send_failure(e: &rill_client::Error) -> Outcome {
    if e.is_retriable_without_effect() {
        return Outcome::Fail(e.to_string());
    }
    match e.code() {
        Some(
            ErrorCode::MessageTooLarge
            | ErrorCode::CorruptMessage
            | ErrorCode::InvalidRequest
            | ErrorCode::UnknownTopicOrPartition,
        ) => Outcome::Fail(e.to_string()),
        _ => Outcome::Info(e.to_string()),
    }
}

/// Sends unique values, one at a time, to random partitions until the deadline.
pub async fn producer(process: u32, client: Client, w: Workload) {
    let mut n = 0u64;
    while rill_rt::now() < w.deadline {
        let partition = rill_rt::rng().gen_range(0..w.partitions);
        let value = format!("v{process}-{n}");
        n += 1;
        let id = w.recorder.invoke(process, OpKind::Send { partition, value: value.clone() });
        let result = client
            .produce_with(
                &w.topic,
                partition,
                vec![Record::new(value.clone())],
                w.acks,
                Compression::None,
                w.produce_timeout,
            )
            .await;
        let outcome = match result {
            Ok(ack) => match ack.base_offset {
                Some(offset) => {
                    w.oracle.on_ack(partition, offset, &value, w.required_copies);
                    Outcome::SendOk { offset }
                }
                None => Outcome::Info("acknowledged without an offset".into()),
            },
            Err(e) => send_failure(&e),
        };
        w.recorder.complete(id, outcome);
        let pause = Duration::from_millis(rill_rt::rng().gen_range(0..30));
        rill_rt::sleep(pause).await;
    }
}

/// Reads every partition from offset 0 in order, one poll at a time, until the deadline.
pub async fn consumer(process: u32, client: Client, w: Workload) {
    let mut positions: BTreeMap<u32, u64> = (0..w.partitions).map(|p| (p, 0)).collect();
    let mut p = 0;
    while rill_rt::now() < w.deadline {
        p = (p + 1) % w.partitions;
        let offset = positions[&p];
        let id = w.recorder.invoke(process, OpKind::Poll { partition: p, offset });
        match client.fetch(&w.topic, p, Some(offset), Duration::from_millis(200)).await {
            Ok(f) => {
                let records: Vec<(u64, String)> =
                    f.records.iter().map(|r| (r.offset, String::from_utf8_lossy(&r.value).into_owned())).collect();
                if let Some((last, _)) = records.last() {
                    positions.insert(p, last + 1);
                }
                w.recorder.complete(id, Outcome::PollOk { records });
            }
            Err(e) => {
                w.recorder.complete(id, Outcome::Info(e.to_string()));
                rill_rt::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// After healing: reads each partition from 0 until at least `must_reach[p]` (the end of the
/// acknowledged data) and the high watermark, retrying errors, within `bound`. Records the reads.
pub async fn final_reads(
    client: Client,
    w: Workload,
    must_reach: BTreeMap<u32, u64>,
    bound: Duration,
) -> Result<(), String> {
    let deadline = rill_rt::now() + bound;
    for p in 0..w.partitions {
        let target = must_reach.get(&p).copied().unwrap_or(0);
        'attempt: loop {
            if rill_rt::now() > deadline {
                return Err(format!(
                    "partition {p}: acknowledged data up to offset {target} not readable within {bound:?}"
                ));
            }
            let mut records = Vec::new();
            let mut offset = 0;
            loop {
                match client.fetch(&w.topic, p, Some(offset), Duration::ZERO).await {
                    Err(_) => {
                        rill_rt::sleep(Duration::from_millis(200)).await;
                        continue 'attempt;
                    }
                    Ok(f) if f.records.is_empty() => {
                        if offset >= target && offset >= f.high_watermark {
                            w.recorder.final_read(p, records);
                            break 'attempt;
                        }
                        rill_rt::sleep(Duration::from_millis(200)).await;
                        continue 'attempt;
                    }
                    Ok(f) => {
                        offset = f.next_offset;
                        records.extend(
                            f.records.iter().map(|r| (r.offset, String::from_utf8_lossy(&r.value).into_owned())),
                        );
                    }
                }
            }
        }
    }
    Ok(())
}
