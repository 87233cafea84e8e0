//! Corruption detection: a byte flipped inside the synced part of a value log segment of a
//! stopped node makes the node refuse to start, with an error naming the file and the offset of
//! the damaged record, instead of cutting it off as a torn tail. Put back, the node starts and
//! serves every record again.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rill_client::{Acks, Record};

use crate::harness::{init_logs, read_all, text, wait_for, TestCluster, READY_TIMEOUT};

/// Where a version 2 segment's records start (after its header): see rill-storage-rocks `vlog`.
const SEGMENT_HEADER_BYTES: u64 = 4096;
/// A record's length and checksum, before its body.
const RECORD_HEADER_BYTES: u64 = 8;

/// The newest segment of `data_dir`'s value log that holds records.
fn newest_written_segment(data_dir: &Path) -> PathBuf {
    let mut segments: Vec<PathBuf> = std::fs::read_dir(data_dir.join("db").join("vlog"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "vlog"))
        .filter(|p| std::fs::metadata(p).unwrap().len() > SEGMENT_HEADER_BYTES)
        .collect();
    segments.sort();
    segments.pop().expect("a value log segment with records")
}

/// Offsets of the records of segment `bytes` (each: body length u32 LE, CRC u32 LE, body).
fn record_offsets(bytes: &[u8]) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    let mut at = SEGMENT_HEADER_BYTES;
    while at + RECORD_HEADER_BYTES <= bytes.len() as u64 {
        let i = at as usize;
        let body = u64::from(u32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]));
        out.push((at, body));
        at += RECORD_HEADER_BYTES + body;
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flipped_byte_in_the_synced_part_refuses_the_start_naming_file_and_offset() -> anyhow::Result<()> {
    init_logs();
    let mut cluster = TestCluster::start(3).await?;
    let client = cluster.client().await?;
    cluster.create_topic(&client, "damaged", 1, 3, &[]).await?;
    for b in 0..20 {
        let records = (0..5).map(|i| Record::new(format!("v{}", b * 5 + i))).collect();
        client.produce("damaged", 0, records, Acks::All).await?;
    }

    tracing::info!("--- stop node 2 and flip a byte in the body of an early record of its newest segment");
    cluster.terminate(2)?;
    let data_dir = cluster.local().data_dir(2).unwrap().to_path_buf();
    let segment = newest_written_segment(&data_dir);
    let bytes = std::fs::read(&segment)?;
    let records = record_offsets(&bytes);
    assert!(records.len() > 10, "{} records in {}", records.len(), segment.display());
    // An early record: many syncs (and the clean stop's seal) came after it.
    let (record, body) = records[records.len() / 4];
    let flipped = record + RECORD_HEADER_BYTES + body / 2;
    let f = std::fs::OpenOptions::new().read(true).write(true).open(&segment)?;
    let mut b = [0];
    f.read_exact_at(&mut b, flipped)?;
    f.write_all_at(&[!b[0]], flipped)?;
    f.sync_all()?;

    tracing::info!("--- node 2 refuses to start, naming the file and the record's offset");
    cluster.start_node(2)?;
    let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
    while cluster.local().is_running(2) {
        assert!(tokio::time::Instant::now() < deadline, "node 2 still runs on a damaged segment");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let exited = cluster.local().check_running().unwrap_err();
    tracing::info!(%exited, "node 2 refused to start");
    let log = cluster.log_text(2);
    let line = log.lines().find(|l| l.starts_with("rill-server: storage corruption")).unwrap_or_default();
    assert!(line.contains(&segment.display().to_string()), "the file is named: {line}");
    assert!(line.contains(&format!("at byte offset {record}")), "the damaged record's offset is named: {line}");
    assert!(line.contains("checksum"), "{line}");

    tracing::info!("--- put the byte back: node 2 starts and serves every record");
    f.write_all_at(&b, flipped)?;
    f.sync_all()?;
    cluster.start_node(2)?;
    wait_for(READY_TIMEOUT, "node 2 back in the partition's ISR", || async {
        let d = client.describe_topic("damaged").await.ok()?;
        d.partitions[0].isr.contains(&2).then_some(())
    })
    .await?;
    let all = read_all(&client, "damaged", 0).await?;
    assert_eq!(
        all.iter().map(|r| text(&r.value)).collect::<Vec<_>>(),
        (0..100).map(|i| format!("v{i}")).collect::<Vec<_>>()
    );
    Ok(())
}
