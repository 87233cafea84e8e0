//! A full disk: node 1's data directory is a small loop-mounted ext4 file system. Writing until
//! it fills makes node 1 stop leading and acknowledging and say why (its log, `DescribeCluster`,
//! `NOT_LEADER_OR_FOLLOWER` answers to produces, naming the failure), while the other two carry on; every record
//! acknowledged before and during the outage survives. Freeing space (a filler file made
//! beforehand on the same file system) makes node 1 restart itself from its durable state,
//! catch up and lead again, with every acknowledged record intact.
//!
//! Needs root and loop devices (`mount -o loop`); without them the test says why and skips.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use bytes::Bytes;
use rill_client::client::build_batch_for;
use rill_client::{Acks, Client, Compression, ErrorCode, Record};
use rill_proto::records::records_client::RecordsClient;
use rill_proto::records::{PartitionProduce, ProduceRequest, TopicProduce};

use crate::harness::{init_logs, read_all, wait_for, TestCluster, READY_TIMEOUT};

const TOPIC: &str = "full";
/// Size of the small file system: a few value log segments and RocksDB's files.
const FS_MIB: u64 = 64;
/// Taken from the small file system before the cluster starts, and given back to end the outage.
const FILLER_MIB: u64 = 16;
/// Each record's value: big enough that the disk fills in a few hundred produces.
const VALUE_BYTES: usize = 64 << 10;
const RECORDS_PER_BATCH: usize = 4;
/// The fill loop gives up after writing this much: several times the file system's size.
const MAX_FILL_BYTES: u64 = (4 * FS_MIB) << 20;
/// How long the node may take to notice the freed space and come back (probes every second,
/// then a restart, a catch-up and the leader balancer's round).
const RECOVERY_TIMEOUT: Duration = Duration::from_secs(120);

/// A loop-mounted ext4 file system, unmounted (and its image removed) on drop.
struct SmallFs {
    mount: PathBuf,
    _image_dir: tempfile::TempDir,
}

impl SmallFs {
    /// Mounts a fresh `mib` MiB ext4 file system at `mount` (created), or says why it cannot.
    fn mount(mount: &Path, mib: u64) -> Result<Self, String> {
        use std::os::unix::fs::MetadataExt;
        // /proc/self belongs to the process's effective user.
        if std::fs::metadata("/proc/self").map(|m| m.uid()).ok() != Some(0) {
            return Err("not running as root (mount needs it)".into());
        }
        if !Path::new("/dev/loop-control").exists() {
            return Err("no loop devices (/dev/loop-control is missing)".into());
        }
        let image_dir = tempfile::tempdir_in("/var/tmp").map_err(|e| format!("cannot make an image dir: {e}"))?;
        let image = image_dir.path().join("small.img");
        let file = std::fs::File::create(&image).map_err(|e| format!("cannot create {}: {e}", image.display()))?;
        file.set_len(mib << 20).map_err(|e| format!("cannot size {}: {e}", image.display()))?;
        run(Command::new("mkfs.ext4").args(["-q", "-F", "-m", "0"]).arg(&image))?;
        std::fs::create_dir_all(mount).map_err(|e| format!("cannot create {}: {e}", mount.display()))?;
        run(Command::new("mount").args(["-o", "loop"]).arg(&image).arg(mount))?;
        Ok(Self { mount: mount.to_path_buf(), _image_dir: image_dir })
    }
}

impl Drop for SmallFs {
    fn drop(&mut self) {
        if run(Command::new("umount").arg(&self.mount)).is_err() {
            // Something still holds it (a node not yet reaped): detach it now, freed when let go.
            if let Err(e) = run(Command::new("umount").arg("-l").arg(&self.mount)) {
                eprintln!("cannot unmount {}: {e}", self.mount.display());
            }
        }
    }
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd.output().map_err(|e| format!("cannot run {cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr).trim()));
    }
    Ok(())
}

/// Writes `mib` MiB of real blocks (not a sparse file) to `path` and fsyncs it.
fn must_write_filler(path: &Path, mib: u64) {
    let mut f = std::fs::File::create(path).unwrap();
    let chunk = vec![0xa5; 1 << 20];
    for _ in 0..mib {
        f.write_all(&chunk).unwrap();
    }
    f.sync_all().unwrap();
}

/// Record `i`'s value: its number, then bytes that depend on it.
fn value(i: u64) -> Bytes {
    let mut v = format!("{i:08}:").into_bytes();
    v.extend((0..VALUE_BYTES as u64).map(|j| (i.wrapping_mul(131).wrapping_add(j) % 251) as u8));
    Bytes::from(v)
}

/// The acknowledged records, by offset: the record number each holds.
type Acked = BTreeMap<u64, u64>;

/// Produces one batch of records `next..` with acks=all; records them in `acked` when
/// acknowledged. Returns why not otherwise.
async fn produce_batch(client: &Client, partition: u32, next: &mut u64, acked: &mut Acked) -> Result<(), String> {
    let first = *next;
    *next += RECORDS_PER_BATCH as u64;
    let records = (first..*next).map(|i| Record::new(value(i))).collect();
    let ack = client
        .produce_with(TOPIC, partition, records, Acks::All, Compression::None, Duration::from_secs(5))
        .await
        .map_err(|e| e.to_string())?;
    let base = ack.base_offset.ok_or("acks=all answered no offset")?;
    for (k, i) in (first..*next).enumerate() {
        acked.insert(base + k as u64, i);
    }
    Ok(())
}

/// Produces until one batch is acknowledged (failures are fine meanwhile: a new leader, an ISR
/// that still waits for a stopped replica), within `timeout`.
async fn must_produce_acknowledged(
    client: &Client,
    partition: u32,
    next: &mut u64,
    acked: &mut Acked,
    timeout: Duration,
) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match produce_batch(client, partition, next, acked).await {
            Ok(()) => return Ok(()),
            Err(e) if tokio::time::Instant::now() > deadline => {
                anyhow::bail!("no produce acknowledged within {timeout:?}; last error: {e}")
            }
            Err(e) => {
                tracing::info!(error = %e, "produce not acknowledged; retrying");
                // An unknown outcome (the failed leader's last writes): look the leader up again.
                let _ = client.refresh_metadata(&[TOPIC.to_string()]).await;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Node `id`'s storage failure as `DescribeCluster` reports it (asked of any node).
async fn storage_failure(client: &Client, id: u64) -> Option<String> {
    let c = client.describe_cluster().await.ok()?;
    c.nodes.into_iter().find(|n| n.node_id == id).map(|n| n.storage_failure).filter(|f| !f.is_empty())
}

async fn leader(client: &Client, partition: u32) -> Option<u64> {
    client.describe_topic(TOPIC).await.ok()?.partitions.get(partition as usize)?.leader
}

/// Every acknowledged record is in the partition, at its offset, with its bytes.
async fn must_hold_every_acked(client: &Client, partition: u32, acked: &Acked) -> anyhow::Result<()> {
    let all = read_all(client, TOPIC, partition).await?;
    let by_offset: BTreeMap<u64, &Option<Bytes>> = all.iter().map(|r| (r.offset, &r.value)).collect();
    for (offset, i) in acked {
        let got = by_offset.get(offset).copied().cloned().flatten();
        anyhow::ensure!(
            got.as_ref() == Some(&value(*i)),
            "acknowledged record {i} at offset {offset} is lost or changed"
        );
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_stops_the_node_safely_and_freeing_space_brings_it_back() -> anyhow::Result<()> {
    init_logs();
    let dir = tempfile::tempdir()?;
    let node1 = dir.path().join("node-1");
    // Declared before the cluster, so the cluster (its processes) is gone before the unmount.
    let fs = match SmallFs::mount(&node1, FS_MIB) {
        Ok(fs) => fs,
        Err(why) => {
            eprintln!("SKIPPED a_full_disk_stops_the_node_safely_and_freeing_space_brings_it_back: {why}");
            return Ok(());
        }
    };
    let filler = fs.mount.join("filler");
    must_write_filler(&filler, FILLER_MIB);
    let env = [("RILL_STORAGE_SEGMENT_BYTES", "1MiB"), ("RILL_STORAGE_RECOVERY_FREE_BYTES", "4MiB")];
    let mut cluster = TestCluster::start_in(dir, 3, &env, None).await?;
    let client = cluster.client().await?;
    let d = cluster
        .create_topic(&client, TOPIC, 3, 3, &[("min.insync.replicas", "2"), ("replica.lag.time.max.ms", "2000")])
        .await?;
    // The partition node 1 prefers to lead: it leads it again once back (leader balancing).
    let partition = d.partitions.iter().find(|p| p.replicas.first() == Some(&1)).map(|p| p.partition).unwrap();
    wait_for(READY_TIMEOUT, "node 1 to lead its preferred partition", || async {
        (leader(&client, partition).await == Some(1)).then_some(())
    })
    .await?;

    tracing::info!("--- write until node 1's disk is full");
    let mut acked = Acked::new();
    let mut next = 0u64;
    let mut written = 0u64;
    let reason = loop {
        if let Some(reason) = storage_failure(&client, 1).await {
            break reason;
        }
        assert!(written < MAX_FILL_BYTES, "wrote {written} bytes and node 1 reports no storage failure");
        let _ = produce_batch(&client, partition, &mut next, &mut acked).await;
        written += (RECORDS_PER_BATCH * VALUE_BYTES) as u64;
    };
    tracing::info!(reason, acked = acked.len(), "node 1's storage failed");
    assert!(reason.contains("No space left on device"), "{reason}");
    assert!(!acked.is_empty(), "nothing was acknowledged before the disk filled");
    let described = client.describe_cluster().await?;
    assert!(described.nodes.iter().any(|n| n.node_id == 1 && !n.alive), "{described:?}");
    assert!(cluster.log_text(1).contains("storage failed"), "{}", cluster.log_tail(1));

    tracing::info!("--- node 1 leads nothing and refuses produces clearly; the others carry on");
    let moved = wait_for(READY_TIMEOUT, "another leader for node 1's partition", || async {
        leader(&client, partition).await.filter(|l| *l != 1)
    })
    .await?;
    let mut raw = RecordsClient::connect(format!("http://{}", cluster.addr(1))).await?;
    let batch = build_batch_for(vec![Record::new(value(u64::MAX))], Compression::None, None)?;
    let answer = raw
        .produce(ProduceRequest {
            acks: 0, // all
            timeout_ms: 5_000,
            topics: vec![TopicProduce {
                topic: TOPIC.into(),
                partitions: vec![PartitionProduce { partition, batch }],
                topic_id: Bytes::new(),
            }],
            ..Default::default()
        })
        .await?
        .into_inner();
    let result = &answer.topics[0].partitions[0];
    assert_eq!(result.error_code, ErrorCode::NotLeaderOrFollower as i32, "{result:?}");
    assert!(result.error_message.contains("No space left on device"), "{result:?}");
    must_produce_acknowledged(&client, partition, &mut next, &mut acked, READY_TIMEOUT).await?;
    for _ in 0..10 {
        if let Err(e) = produce_batch(&client, partition, &mut next, &mut acked).await {
            anyhow::bail!("a produce led by node {moved} failed: {e}");
        }
    }
    wait_for(READY_TIMEOUT, "node 1 to find its disk still full", || async {
        cluster.log_text(1).contains("the data directory still refuses writes").then_some(())
    })
    .await?;
    assert!(storage_failure(&client, 1).await.is_some(), "node 1 recovered with its disk still full");
    must_hold_every_acked(&client, partition, &acked).await?;

    tracing::info!("--- free space: node 1 restarts from its durable state, catches up and leads again");
    std::fs::remove_file(&filler)?;
    std::fs::File::open(&fs.mount)?.sync_all()?;
    wait_for(RECOVERY_TIMEOUT, "node 1 to restart in place", || async {
        cluster.log_text(1).contains("restarting this node in place").then_some(())
    })
    .await?;
    wait_for(RECOVERY_TIMEOUT, "node 1 alive with healthy storage", || async {
        let c = client.describe_cluster().await.ok()?;
        c.nodes.iter().any(|n| n.node_id == 1 && n.alive && n.storage_failure.is_empty()).then_some(())
    })
    .await?;
    wait_for(RECOVERY_TIMEOUT, "node 1 to lead its preferred partition again", || async {
        (leader(&client, partition).await == Some(1)).then_some(())
    })
    .await?;
    assert!(cluster.local().is_running(1), "node 1 restarted in place, not as a new process");
    must_produce_acknowledged(&client, partition, &mut next, &mut acked, READY_TIMEOUT).await?;
    must_hold_every_acked(&client, partition, &acked).await?;
    // Read from node 1 alone: its own copy holds them all.
    let alone = Client::connect(&[cluster.addr(1)]).await?;
    must_hold_every_acked(&alone, partition, &acked).await?;
    tracing::info!(acked = acked.len(), "every acknowledged record survived the full disk");
    drop(cluster);
    drop(fs);
    Ok(())
}
