//! Measures the record batch formats both ways, for the storage decision in
//! `docs/storage.md` ("Record batches"):
//!
//! * Kafka's batch format (this crate): encode and decode 1,000 records of 1 KiB per codec;
//! * Rill's earlier format (a protobuf `RecordList`, LZ4 blocks with the size prepended);
//! * converting one into the other, as a protocol whose format is not the stored one must, in
//!   both directions.
//!
//! Run: `cargo run --release -p rill-records --example codec_bench` (add `-- --quick` for a
//! short run). Prints the median time per batch over many rounds and the throughput.

#![allow(clippy::disallowed_methods, clippy::unwrap_used, clippy::expect_used)] // a measurement tool

use std::time::{Duration, Instant};

/// The allocator Rill's binaries use, so allocation costs what it costs there.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use bytes::Bytes;
use prost::Message;
use rill_records::{decode, validate, BatchBuilder, Compression, Header, Record, MAX_DECOMPRESSED_BATCH_BYTES};

const RECORDS: usize = 1000;
const VALUE_BYTES: usize = 1024;

/// Rill's previous wire record (common.proto before the move to Kafka's format).
#[derive(Clone, PartialEq, Message)]
struct OldRecord {
    #[prost(int64, tag = "1")]
    timestamp_ms: i64,
    #[prost(bytes = "bytes", optional, tag = "2")]
    key: Option<Bytes>,
    #[prost(bytes = "bytes", tag = "3")]
    value: Bytes,
    #[prost(message, repeated, tag = "4")]
    headers: Vec<OldHeader>,
}

#[derive(Clone, PartialEq, Message)]
struct OldHeader {
    #[prost(string, tag = "1")]
    key: String,
    #[prost(bytes = "bytes", tag = "2")]
    value: Bytes,
}

#[derive(Clone, PartialEq, Message)]
struct OldRecordList {
    #[prost(message, repeated, tag = "1")]
    records: Vec<OldRecord>,
}

/// Rill's previous batch encoding: protobuf, then LZ4 block or zstd, CRC-32C over it.
fn old_encode(records: &[OldRecord], codec: Compression) -> (Bytes, u32) {
    let plain = OldRecordList { records: records.to_vec() }.encode_to_vec();
    let packed: Bytes = match codec {
        Compression::None => plain.into(),
        Compression::Lz4 => lz4_flex::compress_prepend_size(&plain).into(),
        Compression::Zstd => zstd::bulk::compress(&plain, 3).unwrap().into(),
        _ => unreachable!("the old format had none, lz4 and zstd"),
    };
    let crc = crc32c::crc32c(&packed);
    (packed, crc)
}

fn old_decode(packed: &Bytes, crc: u32, codec: Compression) -> Vec<OldRecord> {
    assert_eq!(crc32c::crc32c(packed), crc);
    let plain: Bytes = match codec {
        Compression::None => packed.clone(),
        Compression::Lz4 => lz4_flex::decompress_size_prepended(packed).unwrap().into(),
        Compression::Zstd => zstd::bulk::decompress(packed, 64 << 20).unwrap().into(),
        _ => unreachable!(),
    };
    OldRecordList::decode(plain).unwrap().records
}

fn kafka_encode(records: &[Record], codec: Compression) -> Bytes {
    let mut b = BatchBuilder::new(codec).producer(1, 0, 0);
    for r in records {
        b.push(r.clone()).unwrap();
    }
    b.build().unwrap()
}

fn to_old(r: &Record) -> OldRecord {
    OldRecord {
        timestamp_ms: r.timestamp_ms,
        key: r.key.clone(),
        value: r.value.clone().unwrap_or_default(),
        headers: r
            .headers
            .iter()
            .map(|h| OldHeader {
                key: String::from_utf8_lossy(&h.key).into_owned(),
                value: h.value.clone().unwrap_or_default(),
            })
            .collect(),
    }
}

fn to_kafka(r: &OldRecord) -> Record {
    Record {
        offset_delta: 0,
        timestamp_ms: r.timestamp_ms,
        key: r.key.clone(),
        value: Some(r.value.clone()),
        headers: r
            .headers
            .iter()
            .map(|h| Header { key: Bytes::from(h.key.clone()), value: Some(h.value.clone()) })
            .collect(),
    }
}

/// Median time of `f` over rounds filling about `budget`.
fn time(budget: Duration, mut f: impl FnMut()) -> Duration {
    f();
    let mut samples = Vec::new();
    let start = Instant::now();
    while start.elapsed() < budget || samples.len() < 5 {
        let t = Instant::now();
        f();
        samples.push(t.elapsed());
    }
    samples.sort();
    samples[samples.len() / 2]
}

fn records(distinct: bool) -> Vec<Record> {
    // xorshift64: incompressible bytes, the same on every run.
    let mut state: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut next_byte = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state as u8
    };
    (0..RECORDS)
        .map(|i| {
            let value: Vec<u8> = if distinct {
                (0..VALUE_BYTES).map(|_| next_byte()).collect()
            } else {
                // Text that compresses like JSON events do.
                format!("{{\"order\":{i},\"customer\":\"c-{}\",\"status\":\"placed\",\"items\":[", i % 97)
                    .into_bytes()
                    .into_iter()
                    .chain(std::iter::repeat_n(b'x', VALUE_BYTES))
                    .take(VALUE_BYTES)
                    .collect()
            };
            Record {
                offset_delta: 0,
                timestamp_ms: 1_700_000_000_000 + i as i64,
                key: Some(Bytes::from(format!("customer-{}", i % 97))),
                value: Some(Bytes::from(value)),
                headers: vec![Header { key: Bytes::from_static(b"origin"), value: Some(Bytes::from_static(b"bench")) }],
            }
        })
        .collect()
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let budget = if quick { Duration::from_millis(200) } else { Duration::from_secs(2) };
    let mb = (RECORDS * VALUE_BYTES) as f64 / 1e6;
    println!("{RECORDS} records of {VALUE_BYTES} B per batch; median per batch; MB/s of record values");
    println!("{:<44} {:>8} {:>10} {:>10} {:>9}", "operation", "codec", "payload", "µs/batch", "MB/s");
    let row = |op: &str, codec: Compression, payload: &str, d: Duration| {
        println!(
            "{op:<44} {:>8} {payload:>10} {:>10.0} {:>9.0}",
            codec.name(),
            d.as_secs_f64() * 1e6,
            mb / d.as_secs_f64()
        );
    };
    for (distinct, payload) in [(true, "random"), (false, "text")] {
        let kafka_records = records(distinct);
        let old_records: Vec<OldRecord> = kafka_records.iter().map(to_old).collect();
        for codec in [Compression::None, Compression::Gzip, Compression::Snappy, Compression::Lz4, Compression::Zstd] {
            let batch = kafka_encode(&kafka_records, codec);
            row("kafka format: encode", codec, payload, time(budget, || drop(kafka_encode(&kafka_records, codec))));
            row(
                "kafka format: validate (server, on produce)",
                codec,
                payload,
                time(budget, || {
                    validate(&batch, MAX_DECOMPRESSED_BATCH_BYTES).unwrap();
                }),
            );
            row(
                "kafka format: decode (consumer)",
                codec,
                payload,
                time(budget, || {
                    decode(&batch, MAX_DECOMPRESSED_BATCH_BYTES).unwrap();
                }),
            );
            if matches!(codec, Compression::None | Compression::Lz4 | Compression::Zstd) {
                let (old, crc) = old_encode(&old_records, codec);
                row(
                    "rill's earlier format: encode",
                    codec,
                    payload,
                    time(budget, || drop(old_encode(&old_records, codec))),
                );
                row(
                    "rill's earlier format: decode",
                    codec,
                    payload,
                    time(budget, || drop(old_decode(&old, crc, codec))),
                );
                row(
                    "convert kafka → earlier (decode + encode)",
                    codec,
                    payload,
                    time(budget, || {
                        let d = decode(&batch, MAX_DECOMPRESSED_BATCH_BYTES).unwrap();
                        let o: Vec<OldRecord> = d.records.iter().map(to_old).collect();
                        drop(old_encode(&o, codec));
                    }),
                );
                row(
                    "convert earlier → kafka (decode + encode)",
                    codec,
                    payload,
                    time(budget, || {
                        let o = old_decode(&old, crc, codec);
                        let k: Vec<Record> = o.iter().map(to_kafka).collect();
                        drop(kafka_encode(&k, codec));
                    }),
                );
            }
            let sizes = batch.len();
            println!("{:<44} {:>8} {payload:>10} {:>10} bytes", "  batch size", codec.name(), sizes);
        }
    }
}
