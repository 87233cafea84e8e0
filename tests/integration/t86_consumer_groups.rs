//! Consumer groups (KIP-848) against a real 3-node cluster, with the Rust client's subscribe
//! mode: members share a topic's partitions (2 → 3 → 8 members give 3+3, 2+2+2, six busy and
//! two idle), a member that stops heartbeating loses its partitions after the session timeout
//! and the next owner starts exactly at its last commit, a static member restarting within its
//! session keeps its partitions with no revocation elsewhere, the group survives its
//! coordinator's leader being killed, commits are fenced by membership, and a heartbeat held
//! as a long poll at the end of a member's session keeps the member.
//!
//! Members run in this process; "crashing" one stops its heartbeats and fetches without
//! leaving the group, which is what the coordinator sees of a SIGKILLed consumer.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rill_client::{
    Acks, Client, Consumer, ConsumerConfig, Coordinator, ErrorCode, OffsetSpec, RebalanceListener, Record,
    TopicPartition,
};

use crate::harness::{init_logs, wait_for, wait_for_ok, TestCluster, READY_TIMEOUT};
use crate::t70_cli::rill;

const TOPIC: &str = "events";
const PARTITIONS: u32 = 6;
/// Short member timeouts so the test sees expiry quickly.
const GROUP_ENV: &[(&str, &str)] = &[("RILL_GROUP_SESSION_TIMEOUT", "6s"), ("RILL_GROUP_HEARTBEAT_INTERVAL", "300ms")];
/// How long a group may take to settle after a change (session expiry included).
const SETTLE: Duration = Duration::from_secs(30);

/// What a running member has seen.
#[derive(Debug, Default)]
struct View {
    assignment: BTreeSet<TopicPartition>,
    /// Per partition, every offset handed out, in order.
    consumed: BTreeMap<u32, Vec<u64>>,
    revoked: usize,
    lost: usize,
    /// The member id and epoch after the last poll.
    member: Option<(String, i32)>,
}

struct Listener(Arc<Mutex<View>>);

impl RebalanceListener for Listener {
    fn on_revoked(&mut self, partitions: &[TopicPartition]) {
        self.0.lock().unwrap().revoked += partitions.len();
    }
    fn on_lost(&mut self, partitions: &[TopicPartition]) {
        self.0.lock().unwrap().lost += partitions.len();
    }
}

/// A member polling in its own task, committing what each poll returned after recording it.
struct Member {
    view: Arc<Mutex<View>>,
    stop: Arc<AtomicBool>,
    /// Leave (true) or vanish without leaving (false) when stopped.
    leave: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Member {
    fn start(client: &Client, group: &str, instance: Option<&str>, pace: Option<Duration>) -> anyhow::Result<Self> {
        let config = ConsumerConfig {
            group_id: Some(group.to_string()),
            start: OffsetSpec::Earliest,
            group_instance_id: instance.map(str::to_string),
            max_poll_records: if pace.is_some() { 5 } else { 500 },
            ..ConsumerConfig::default()
        };
        let mut consumer = Consumer::new(client.clone(), config);
        let view = Arc::new(Mutex::new(View::default()));
        consumer.set_rebalance_listener(Listener(view.clone()));
        consumer.subscribe(&[TOPIC])?;
        let (stop, leave) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(true)));
        let task = tokio::spawn({
            let (view, stop, leave) = (view.clone(), stop.clone(), leave.clone());
            async move {
                while !stop.load(Ordering::SeqCst) {
                    let records = consumer.poll(Duration::from_millis(100)).await?;
                    {
                        let mut v = view.lock().unwrap();
                        for r in &records {
                            v.consumed.entry(r.partition).or_default().push(r.offset);
                        }
                        v.assignment = consumer.assignment().into_iter().collect();
                        v.member = consumer.member();
                    }
                    if !records.is_empty() {
                        // As an application would: a refused commit (the partition moved on, the
                        // membership was lost) is reported, and the records come again to
                        // whoever owns the partition next.
                        if let Err(e) = consumer.commit().await {
                            tracing::warn!(error = %e, "commit refused");
                        }
                    }
                    if let Some(pace) = pace {
                        tokio::time::sleep(pace).await; // a slow application, not synchronisation
                    }
                }
                if leave.load(Ordering::SeqCst) {
                    consumer.shutdown().await?;
                } else {
                    consumer.close();
                }
                Ok(())
            }
        });
        Ok(Self { view, stop, leave, task })
    }

    fn assignment(&self) -> BTreeSet<TopicPartition> {
        self.view.lock().unwrap().assignment.clone()
    }

    /// Stops, leaving the group (`leave`) or vanishing as a crashed process would.
    async fn stop(self, leave: bool) -> anyhow::Result<Arc<Mutex<View>>> {
        self.leave.store(leave, Ordering::SeqCst);
        self.stop.store(true, Ordering::SeqCst);
        self.task.await??;
        Ok(self.view)
    }
}

/// Waits until the members' assignments have the sizes `sizes` (sorted) and together cover
/// every partition once.
async fn wait_for_sizes(members: &[&Member], sizes: &[usize]) -> anyhow::Result<()> {
    let what = format!("assignment sizes {sizes:?}");
    wait_for(SETTLE, &what, || async {
        let assignments: Vec<BTreeSet<TopicPartition>> = members.iter().map(|m| m.assignment()).collect();
        let mut got: Vec<usize> = assignments.iter().map(BTreeSet::len).collect();
        got.sort_unstable();
        let union: BTreeSet<&TopicPartition> = assignments.iter().flatten().collect();
        let total: usize = got.iter().sum();
        (got == sizes && union.len() == total && total == PARTITIONS as usize).then_some(())
    })
    .await
}

/// Produces `per_partition` records to every partition, retrying while leaders move (a retry
/// may write a batch twice; the checks count at least, never exactly, what is written here).
async fn produce(client: &Client, per_partition: u64, tag: &str) -> anyhow::Result<()> {
    for p in 0..PARTITIONS {
        let records: Vec<Record> = (0..per_partition).map(|i| Record::new(format!("{tag}-{p}-{i}"))).collect();
        wait_for_ok(READY_TIMEOUT, "a produce", || client.produce(TOPIC, p, records.clone(), Acks::All)).await?;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_share_the_partitions_and_a_crashed_member_is_replaced_at_its_last_commit() -> anyhow::Result<()> {
    init_logs();
    let cluster = TestCluster::start_with(3, GROUP_ENV, None).await?;
    let client = cluster.client().await?;
    cluster.create_topic(&client, TOPIC, PARTITIONS, 3, &[]).await?;
    produce(&client, 100, "a").await?;

    tracing::info!("--- a slow member owns all six; a second joins: 3 + 3");
    let slow = Member::start(&client, "billing", None, Some(Duration::from_millis(100)))?;
    wait_for_sizes(&[&slow], &[6]).await?;
    let fast = Member::start(&client, "billing", None, None)?;
    wait_for_sizes(&[&slow, &fast], &[3, 3]).await?;
    // The partitions the slow member kept: the fast one has never owned them.
    let slow_partitions: Vec<u32> = slow.assignment().iter().map(|tp| tp.partition).collect();

    tracing::info!("--- the slow member crashes after committing some, not all, of its records");
    wait_for(SETTLE, "the slow member to consume 20 records of a partition", || async {
        slow.view.lock().unwrap().consumed.values().any(|o| o.len() >= 20).then_some(())
    })
    .await?;
    let slow_view = slow.stop(false).await?;
    let tps: Vec<TopicPartition> = slow_partitions.iter().map(|p| TopicPartition::new(TOPIC, *p)).collect();
    // The crashed member sent nothing after its last poll's commit: these are final.
    let committed = client.committed_offsets("billing", &tps).await?;
    assert!(slow_view.lock().unwrap().lost == 0, "a crash is not seen by the crashed member");

    tracing::info!("--- after the session timeout the survivor owns all six");
    wait_for_sizes(&[&fast], &[6]).await?;
    wait_for(SETTLE, "the survivor to read the crashed member's partitions to the end", || async {
        let v = fast.view.lock().unwrap();
        slow_partitions.iter().all(|p| v.consumed.get(p).and_then(|o| o.last()) == Some(&99)).then_some(())
    })
    .await?;
    let consumed = fast.view.lock().unwrap().consumed.clone();
    for tp in &tps {
        let start = committed.get(tp).cloned().flatten().map_or(0, |c| c.offset);
        let seen = &consumed[&tp.partition];
        assert_eq!(seen.first(), Some(&start), "{tp:?}: the next owner starts exactly at the last commit");
        let expected: Vec<u64> = (start..100).collect();
        assert_eq!(seen, &expected, "{tp:?}: every record from the commit on, once, in order");
    }
    assert!(
        tps.iter().any(|tp| committed.get(tp).cloned().flatten().is_some_and(|c| c.offset > 0 && c.offset < 100)),
        "the crash came mid-partition: {committed:?}"
    );

    tracing::info!("--- 3 members: 2 + 2 + 2; 8 members: six busy, two idle");
    let mut members =
        vec![fast, Member::start(&client, "billing", None, None)?, Member::start(&client, "billing", None, None)?];
    wait_for_sizes(&members.iter().collect::<Vec<_>>(), &[2, 2, 2]).await?;
    for _ in 0..5 {
        members.push(Member::start(&client, "billing", None, None)?);
    }
    wait_for_sizes(&members.iter().collect::<Vec<_>>(), &[0, 0, 1, 1, 1, 1, 1, 1]).await?;

    tracing::info!("--- the coordinator's node is killed: the group carries on with a new coordinator");
    let (coordinator, _) = client.find_coordinator(Coordinator::Group, "billing").await?;
    let mut cluster = cluster;
    cluster.kill(coordinator)?;
    produce(&client, 10, "b").await?;
    wait_for(SETTLE, "every record produced after the kill to be consumed", || async {
        let total: usize = members
            .iter()
            .map(|m| {
                m.view.lock().unwrap().consumed.values().map(|o| o.iter().filter(|&&x| x >= 100).count()).sum::<usize>()
            })
            .sum();
        (total >= 10 * PARTITIONS as usize).then_some(())
    })
    .await?;
    wait_for_sizes(&members.iter().collect::<Vec<_>>(), &[0, 0, 1, 1, 1, 1, 1, 1]).await?;
    for m in members {
        let view = m.stop(true).await?;
        assert_eq!(view.lock().unwrap().lost, 0, "a coordinator failover loses no member's partitions");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_static_member_restarting_within_its_session_keeps_its_partitions() -> anyhow::Result<()> {
    init_logs();
    let cluster = TestCluster::start_with(3, GROUP_ENV, None).await?;
    let client = cluster.client().await?;
    cluster.create_topic(&client, TOPIC, PARTITIONS, 3, &[]).await?;

    let a = Member::start(&client, "static", Some("a"), None)?;
    let b = Member::start(&client, "static", Some("b"), None)?;
    wait_for_sizes(&[&a, &b], &[3, 3]).await?;
    let (a_owns, b_owns) = (a.assignment(), b.assignment());
    let a_revoked = a.view.lock().unwrap().revoked;

    tracing::info!("--- b restarts: leaves as a static member and comes back under a new member id");
    b.stop(true).await?;
    let b2 = Member::start(&client, "static", Some("b"), None)?;
    wait_for_sizes(&[&a, &b2], &[3, 3]).await?;
    assert_eq!(b2.assignment(), b_owns, "the same partitions came back to instance b");
    assert_eq!(a.assignment(), a_owns);
    assert_eq!(a.view.lock().unwrap().revoked, a_revoked, "nothing was revoked from a");

    tracing::info!("--- a second process with instance id b is refused while b is in");
    let mut twin = Consumer::new(
        client.clone(),
        ConsumerConfig {
            group_id: Some("static".into()),
            group_instance_id: Some("b".into()),
            ..ConsumerConfig::default()
        },
    );
    twin.subscribe(&[TOPIC])?;
    let twin_view = Arc::new(Mutex::new(View::default()));
    twin.set_rebalance_listener(Listener(twin_view.clone()));
    for _ in 0..10 {
        twin.poll(Duration::from_millis(200)).await?;
    }
    assert!(twin.assignment().is_empty(), "the twin owns nothing");
    assert_eq!(twin.member(), None, "the twin never joined");
    twin.close();
    a.stop(true).await?;
    b2.stop(true).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_are_fenced_by_membership() -> anyhow::Result<()> {
    init_logs();
    let cluster = TestCluster::start_with(3, GROUP_ENV, None).await?;
    let client = cluster.client().await?;
    cluster.create_topic(&client, TOPIC, PARTITIONS, 3, &[]).await?;
    let a = Member::start(&client, "fenced", None, None)?;
    let b = Member::start(&client, "fenced", None, None)?;
    wait_for_sizes(&[&a, &b], &[3, 3]).await?;
    let a_owns = a.assignment();
    let not_a: TopicPartition =
        (0..PARTITIONS).map(|p| TopicPartition::new(TOPIC, p)).find(|tp| !a_owns.contains(tp)).unwrap();
    let commit = |tp: &TopicPartition| vec![(tp.clone(), 1u64, String::new())];

    tracing::info!("--- without membership, or for a partition it does not own: refused");
    let err = client.commit_offsets("fenced", &commit(&not_a)).await.expect_err("the group has members");
    assert_eq!(err.code(), Some(ErrorCode::UnknownMemberId), "{err}");
    // The member id and epoch a commits under (stable: the group is settled).
    let (a_id, a_epoch) = a.view.lock().unwrap().member.clone().expect("a has joined");
    let err = client.commit_offsets_as("fenced", Some((&a_id, a_epoch)), &commit(&not_a)).await.expect_err("not a's");
    assert_eq!(err.code(), Some(ErrorCode::StaleMemberEpoch), "{err}");
    let mine = a_owns.iter().next().unwrap().clone();
    client.commit_offsets_as("fenced", Some((&a_id, a_epoch)), &commit(&mine)).await?;
    let err = client
        .commit_offsets_as("fenced", Some((&a_id, a_epoch + 1)), &commit(&mine))
        .await
        .expect_err("an epoch from the future");
    assert_eq!(err.code(), Some(ErrorCode::FencedMemberEpoch), "{err}");

    tracing::info!("--- once a's session has run out, its commits are refused");
    a.stop(false).await?;
    wait_for_sizes(&[&b], &[6]).await?;
    let err = client.commit_offsets_as("fenced", Some((&a_id, a_epoch)), &commit(&mine)).await.expect_err("fenced");
    assert_eq!(err.code(), Some(ErrorCode::UnknownMemberId), "{err}");
    b.stop(true).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_consumes_as_a_member_and_describes_members_and_lag() -> anyhow::Result<()> {
    init_logs();
    let cluster = TestCluster::start_with(3, GROUP_ENV, None).await?;
    let client = cluster.client().await?;
    cluster.create_topic(&client, TOPIC, PARTITIONS, 3, &[]).await?;
    produce(&client, 10, "c").await?;
    let json = |out: std::process::Output| -> anyhow::Result<serde_json::Value> {
        anyhow::ensure!(out.status.success(), "rill failed: {}", String::from_utf8_lossy(&out.stderr));
        Ok(serde_json::from_slice(&out.stdout)?)
    };

    tracing::info!("--- rill consume --group: a member of its own, reads everything, commits, leaves");
    let out = rill(&cluster, &["consume", TOPIC, "--group", "cli", "--from-beginning", "--max-messages", "60"], None)?;
    anyhow::ensure!(out.status.success(), "consume failed: {}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 60);

    tracing::info!("--- rill group list / describe: the group is empty, caught up; then 5 behind");
    let listed = json(rill(&cluster, &["group", "list", "--output", "json"], None)?)?;
    let cli = listed.as_array().unwrap().iter().find(|g| g["group"] == "cli").expect("listed");
    assert_eq!(
        (cli["protocol"].as_str(), cli["state"].as_str(), cli["members"].as_u64()),
        (Some("consumer"), Some("empty"), Some(0))
    );
    let described = json(rill(&cluster, &["group", "describe", "cli", "--output", "json"], None)?)?;
    let partitions = described["partitions"].as_array().unwrap();
    assert_eq!(partitions.len(), PARTITIONS as usize);
    assert!(partitions.iter().all(|p| p["committed_offset"] == 10 && p["lag"] == 0 && p["lag_seconds"] == 0.0));
    wait_for_ok(READY_TIMEOUT, "a produce", || {
        client.produce(TOPIC, 0, (0..5).map(|i| Record::new(format!("d{i}"))).collect(), Acks::All)
    })
    .await?;
    let described = json(rill(&cluster, &["group", "describe", "cli", "--output", "json"], None)?)?;
    let p0 = described["partitions"].as_array().unwrap().iter().find(|p| p["partition"] == 0).unwrap().clone();
    assert_eq!(
        (p0["committed_offset"].as_u64(), p0["high_watermark"].as_u64(), p0["lag"].as_u64()),
        (Some(10), Some(15), Some(5))
    );
    assert!(p0["lag_seconds"].as_f64().is_some_and(|s| s >= 0.0), "{p0}");

    tracing::info!("--- a live member shows up with its assignment; an unknown group is an error");
    let m = Member::start(&client, "cli", None, None)?;
    wait_for_sizes(&[&m], &[6]).await?;
    let described = json(rill(&cluster, &["group", "describe", "cli", "--output", "json"], None)?)?;
    assert_eq!(described["state"], "stable");
    assert_eq!(described["members"].as_array().unwrap().len(), 1);
    assert_eq!(described["members"][0]["assignment"].as_array().unwrap().len(), PARTITIONS as usize);

    tracing::info!("--- while a member is in: no reset, no delete");
    let out = rill(&cluster, &["group", "reset-offsets", "cli", "--topic", TOPIC, "--to-earliest", "--execute"], None)?;
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("stop them"), "{out:?}");
    let out = rill(&cluster, &["group", "delete", "cli"], None)?;
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("stop them first"), "{out:?}");
    m.stop(true).await?;

    tracing::info!("--- reset-offsets: a dry run changes nothing; --execute commits");
    let committed_of = |d: &serde_json::Value, p: u64| {
        d["partitions"].as_array().unwrap().iter().find(|x| x["partition"] == p).map(|x| x["committed_offset"].clone())
    };
    let out = rill(&cluster, &["group", "reset-offsets", "cli", "--topic", TOPIC, "--to-earliest"], None)?;
    anyhow::ensure!(out.status.success(), "dry run failed: {}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("dry run"));
    let before = json(rill(&cluster, &["group", "describe", "cli", "--output", "json"], None)?)?;
    let out = rill(&cluster, &["group", "reset-offsets", "cli", "--topic", TOPIC, "--to-earliest", "--execute"], None)?;
    anyhow::ensure!(out.status.success(), "reset failed: {}", String::from_utf8_lossy(&out.stderr));
    let after = json(rill(&cluster, &["group", "describe", "cli", "--output", "json"], None)?)?;
    assert_ne!(committed_of(&before, 1), Some(serde_json::json!(0)), "the dry run changed nothing");
    assert!((0..PARTITIONS as u64).all(|p| committed_of(&after, p) == Some(serde_json::json!(0))), "{after}");
    let out = rill(
        &cluster,
        &["group", "reset-offsets", "cli", "--topic", TOPIC, "--partition", "1", "--shift-by", "3", "--execute"],
        None,
    )?;
    anyhow::ensure!(out.status.success(), "shift failed: {}", String::from_utf8_lossy(&out.stderr));
    let shifted = json(rill(&cluster, &["group", "describe", "cli", "--output", "json"], None)?)?;
    assert_eq!(committed_of(&shifted, 1), Some(serde_json::json!(3)));
    assert_eq!(committed_of(&shifted, 2), Some(serde_json::json!(0)));

    tracing::info!("--- delete-offsets, then delete the group");
    let out = rill(&cluster, &["group", "delete-offsets", "cli", "--topic", TOPIC, "--partition", "1"], None)?;
    anyhow::ensure!(out.status.success(), "delete-offsets failed: {}", String::from_utf8_lossy(&out.stderr));
    let trimmed = json(rill(&cluster, &["group", "describe", "cli", "--output", "json"], None)?)?;
    assert_eq!(committed_of(&trimmed, 1), None, "partition 1 has no committed offset (and no owner)");
    assert_eq!(committed_of(&trimmed, 2), Some(serde_json::json!(0)));
    let out = rill(&cluster, &["group", "delete", "cli"], None)?;
    anyhow::ensure!(out.status.success(), "delete failed: {}", String::from_utf8_lossy(&out.stderr));
    let out = rill(&cluster, &["group", "describe", "cli"], None)?;
    assert!(
        !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("no members and no committed offsets"),
        "{out:?}"
    );
    let out = rill(&cluster, &["group", "describe", "no-such-group"], None)?;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no members and no committed offsets"), "{out:?}");
    Ok(())
}

/// A child process killed when the test ends, however it ends.
struct Reaped(std::process::Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Collects the lines `stream` writes, as they come.
fn collect_lines(stream: impl std::io::Read + Send + 'static) -> Arc<Mutex<Vec<String>>> {
    let lines = Arc::new(Mutex::new(Vec::new()));
    let sink = lines.clone();
    std::thread::spawn(move || {
        for line in std::io::BufRead::lines(std::io::BufReader::new(stream)).map_while(Result::ok) {
            sink.lock().unwrap().push(line);
        }
    });
    lines
}

fn signal(child: &std::process::Child, signal: nix::sys::signal::Signal) -> anyhow::Result<()> {
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id())?);
    nix::sys::signal::kill(pid, signal)?;
    Ok(())
}

/// A member in its own process (`rill consume --group`) is frozen with SIGSTOP past its session
/// timeout while the node leading its group's coordinator partition is SIGKILLed, and records
/// are produced meanwhile; the other member takes over every partition and commits everything.
/// Continued with SIGCONT, the frozen member reports its partitions lost and prints none of the
/// records produced while it was frozen (neither from a fetch answered while it was stopped nor
/// after it rejoins), and no committed offset goes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_frozen_past_its_session_through_a_coordinator_failover_hands_out_nothing_it_lost(
) -> anyhow::Result<()> {
    use nix::sys::signal::Signal;
    use std::process::{Command, Stdio};

    init_logs();
    let mut cluster = TestCluster::start_with(3, GROUP_ENV, None).await?;
    let client = cluster.client().await?;
    cluster.create_topic(&client, TOPIC, PARTITIONS, 3, &[]).await?;
    produce(&client, 10, "a").await?;
    let tps: Vec<TopicPartition> = (0..PARTITIONS).map(|p| TopicPartition::new(TOPIC, p)).collect();
    let committed_everywhere = |want: BTreeMap<u32, u64>| {
        let (client, tps) = (client.clone(), tps.clone());
        async move {
            let committed = client.committed_offsets("frozen", &tps).await.ok()?;
            let got: BTreeMap<u32, u64> =
                committed.iter().filter_map(|(tp, c)| c.as_ref().map(|c| (tp.partition, c.offset))).collect();
            (got == want).then_some(got)
        }
    };

    tracing::info!("--- member A (its own process) and member B share the partitions; everything is committed");
    let mut child = Command::new(crate::harness::bin("rill"))
        .arg("--bootstrap")
        .arg(cluster.bootstrap_arg())
        .args(["consume", TOPIC, "--group", "frozen", "--from-beginning", "--output", "json"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    let a = Reaped(child);
    let a_out = collect_lines(stdout.ok_or_else(|| anyhow::anyhow!("no stdout"))?);
    let a_err = collect_lines(stderr.ok_or_else(|| anyhow::anyhow!("no stderr"))?);
    wait_for(SETTLE, "member A assigned", || async {
        a_err.lock().unwrap().iter().any(|l| l.starts_with("assigned:")).then_some(())
    })
    .await?;
    let b = Member::start(&client, "frozen", None, None)?;
    let tens: BTreeMap<u32, u64> = (0..PARTITIONS).map(|p| (p, 10)).collect();
    wait_for(SETTLE, "B owning 3 partitions, every offset committed at 10", || async {
        let done = committed_everywhere(tens.clone()).await;
        (b.assignment().len() == 3).then_some(done).flatten()
    })
    .await?;

    tracing::info!("--- A is frozen; the coordinator's node is killed; more records arrive");
    signal(&a.0, Signal::SIGSTOP)?;
    let (coordinator, _) = client.find_coordinator(Coordinator::Group, "frozen").await?;
    cluster.kill(coordinator)?;
    produce(&client, 10, "b").await?;
    let mut ends = BTreeMap::new();
    for p in 0..PARTITIONS {
        let end =
            wait_for_ok(READY_TIMEOUT, "a high watermark", || client.list_offset(TOPIC, p, OffsetSpec::Latest)).await?;
        ends.insert(p, end);
    }
    wait_for(SETTLE, "B owning every partition after A's session, everything committed", || async {
        let done = committed_everywhere(ends.clone()).await;
        (b.assignment().len() == PARTITIONS as usize).then_some(done).flatten()
    })
    .await?;

    tracing::info!("--- A continues: it reports its partitions lost and rejoins; nothing of b is printed by it");
    signal(&a.0, Signal::SIGCONT)?;
    wait_for(SETTLE, "A reporting its partitions lost", || async {
        a_err.lock().unwrap().iter().any(|l| l.starts_with("warning: lost:")).then_some(())
    })
    .await?;
    wait_for(SETTLE, "A back in the group: the partitions shared 3 + 3 again", || async {
        let lines = a_err.lock().unwrap().clone();
        let lost_at = lines.iter().position(|l| l.starts_with("warning: lost:"))?;
        let reassigned = lines[lost_at..].iter().any(|l| l.starts_with("assigned:"));
        (reassigned && b.assignment().len() == 3).then_some(())
    })
    .await?;
    let after =
        wait_for(SETTLE, "the committed offsets", || async { client.committed_offsets("frozen", &tps).await.ok() })
            .await?;
    let after: BTreeMap<u32, u64> =
        after.iter().filter_map(|(tp, c)| c.as_ref().map(|c| (tp.partition, c.offset))).collect();
    assert_eq!(after, ends, "no committed offset moved after A came back (they stay at the log end)");
    let printed_b: Vec<String> =
        a_out.lock().unwrap().iter().filter(|l| l.contains("\"value\":\"b-")).cloned().collect();
    assert!(printed_b.is_empty(), "A printed records it had lost: {:?}", &printed_b[..printed_b.len().min(5)]);
    let seen_b: usize = b.view.lock().unwrap().consumed.values().map(|o| o.iter().filter(|&&x| x >= 10).count()).sum();
    assert!(seen_b >= 10 * PARTITIONS as usize, "B handed out every record of b: {seen_b}");
    b.stop(true).await?;
    drop(a);
    Ok(())
}

/// `offsets.retention.ms`: a live group keeps its committed offsets however old they get; once
/// its last member leaves they expire after the retention (counted from then), and the empty
/// group goes with them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_groups_offsets_expire_after_the_retention_a_live_groups_never() -> anyhow::Result<()> {
    const RETENTION: Duration = Duration::from_secs(5);
    init_logs();
    let mut env = GROUP_ENV.to_vec();
    env.extend([("RILL_OFFSETS_RETENTION", "5s"), ("RILL_OFFSETS_RETENTION_CHECK_INTERVAL", "1s")]);
    let cluster = TestCluster::start_with(3, &env, None).await?;
    let client = cluster.client().await?;
    cluster.create_topic(&client, TOPIC, PARTITIONS, 3, &[]).await?;
    produce(&client, 10, "r").await?;
    let tps: Vec<TopicPartition> = (0..PARTITIONS).map(|p| TopicPartition::new(TOPIC, p)).collect();
    let committed = || async {
        let c = client.committed_offsets("kept", &tps).await.ok()?;
        Some(c.values().filter(|c| c.is_some()).count())
    };

    let member = Member::start(&client, "kept", None, None)?;
    wait_for(SETTLE, "every partition committed", || async {
        (committed().await? == PARTITIONS as usize).then_some(())
    })
    .await?;
    tracing::info!("--- with its member in, the group keeps its offsets past the retention");
    let since = tokio::time::Instant::now();
    let window = RETENTION + Duration::from_secs(3);
    let kept = wait_for(window + SETTLE, "the retention and two checks to pass", || async {
        let n = committed().await?;
        (n != PARTITIONS as usize || since.elapsed() >= window).then_some(n)
    })
    .await?;
    assert_eq!(kept, PARTITIONS as usize, "a live group's offsets expired");

    tracing::info!("--- the member leaves: the offsets stay for the retention, then go with the group");
    // Taken before the leave: the group is empty no earlier than this.
    let left = tokio::time::Instant::now();
    member.stop(true).await?;
    let n = wait_for(SETTLE, "the offsets read", committed).await?;
    if left.elapsed() < RETENTION {
        assert_eq!(n, PARTITIONS as usize, "offsets expired before the retention");
    }
    wait_for(SETTLE, "the offsets expired", || async { (committed().await? == 0).then_some(()) }).await?;
    assert!(left.elapsed() >= RETENTION, "the offsets expired {:?} after the group emptied", left.elapsed());
    wait_for(SETTLE, "the empty group gone", || async {
        let gone = client.describe_group("kept").await.err()?.code() == Some(ErrorCode::GroupIdNotFound);
        gone.then_some(())
    })
    .await?;
    Ok(())
}

/// Background commits (`commit_offsets_async`) land in the order they were made: fifty of them
/// sent without waiting leave the last one's offset, and a synchronous commit after them is not
/// overtaken by them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn background_commits_land_in_the_order_they_were_made() -> anyhow::Result<()> {
    init_logs();
    let cluster = TestCluster::start(3).await?;
    let client = cluster.client().await?;
    cluster.create_topic(&client, TOPIC, PARTITIONS, 3, &[]).await?;
    let tp = TopicPartition::new(TOPIC, 0);
    let config = ConsumerConfig { group_id: Some("in-order".into()), ..ConsumerConfig::default() };
    let mut consumer = Consumer::new(client.clone(), config);
    let pending: Vec<_> = (1..=50).map(|o| consumer.commit_offsets_async([(tp.clone(), o)])).collect();
    let mut outcomes = Vec::new();
    for p in pending {
        outcomes.push(p.await.is_ok());
    }
    assert!(outcomes.iter().all(|ok| *ok), "every background commit succeeded: {outcomes:?}");
    let committed = client.committed_offsets("in-order", std::slice::from_ref(&tp)).await?;
    assert_eq!(committed[&tp].as_ref().map(|c| c.offset), Some(50), "the last commit made is the one that stays");

    // A synchronous commit waits for the background ones made before it.
    let _early = consumer.commit_offsets_async([(tp.clone(), 60)]);
    consumer.commit_offsets([(tp.clone(), 70)]).await?;
    let committed = client.committed_offsets("in-order", std::slice::from_ref(&tp)).await?;
    assert_eq!(committed[&tp].as_ref().map(|c| c.offset), Some(70));
    Ok(())
}

/// A member's first poll, with a long timeout, returns records: the poll that began before the
/// member had an assignment wakes when the assignment arrives, instead of sleeping out its
/// timeout with nothing to fetch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poll_wakes_when_the_member_is_given_partitions() -> anyhow::Result<()> {
    init_logs();
    let cluster = TestCluster::start(3).await?;
    let client = cluster.client().await?;
    cluster.create_topic(&client, TOPIC, PARTITIONS, 3, &[]).await?;
    produce(&client, 1, "a").await?;
    let config = ConsumerConfig { group_id: Some("wakes".into()), ..ConsumerConfig::default() };
    let mut consumer = Consumer::new(client.clone(), config);
    consumer.subscribe(&[TOPIC])?;
    // Nothing is assigned yet when this poll starts; without the wake it would return empty
    // after the whole minute.
    let records = consumer.poll(Duration::from_secs(60)).await?;
    assert!(!records.is_empty(), "the first poll returned nothing");
    assert!(!consumer.assignment().is_empty(), "the member owns partitions");
    consumer.shutdown().await?;
    Ok(())
}

/// A heartbeat held as a long poll (`wait_ms`) that reaches the coordinator in the last moments
/// of the member's session keeps the member: the session restarts when the heartbeat is held,
/// not only when it is answered, so the hold never runs the member out of its session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_heartbeat_held_at_the_end_of_the_session_keeps_the_member() -> anyhow::Result<()> {
    use rill_proto::groups::{ConsumerGroupHeartbeatRequest, OwnedPartitions, SubscribedTopics};
    const SESSION: Duration = Duration::from_secs(6);
    init_logs();
    let env = [("RILL_GROUP_SESSION_TIMEOUT", "6s"), ("RILL_GROUP_HEARTBEAT_INTERVAL", "3s")];
    let cluster = TestCluster::start_with(3, &env, None).await?;
    let client = cluster.client().await?;
    cluster.create_topic(&client, TOPIC, PARTITIONS, 3, &[]).await?;
    let heartbeat = |epoch: i32, owned: OwnedPartitions, wait_ms: Option<u32>| ConsumerGroupHeartbeatRequest {
        group_id: "held".into(),
        member_id: "m".into(),
        member_epoch: epoch,
        rebalance_timeout_ms: (epoch == 0).then_some(60_000),
        subscribed_topics: (epoch == 0).then(|| SubscribedTopics { topics: vec![TOPIC.into()] }),
        owned: Some(owned),
        wait_ms,
        ..ConsumerGroupHeartbeatRequest::default()
    };
    let joined = client.consumer_group_heartbeat(heartbeat(0, OwnedPartitions::default(), None)).await?;
    let owned = joined.assignment.clone().expect("the only member is given every partition");
    // Reports what it owns: the member is stable, and its next heartbeat changes nothing.
    let stable = client.consumer_group_heartbeat(heartbeat(joined.member_epoch, owned.clone(), None)).await?;
    let heard = std::time::Instant::now();
    assert_eq!(stable.member_epoch, joined.member_epoch);

    // The heartbeat arrives with 0.8 s of the session left and asks to be held for 2 s (the
    // coordinator's most: a third of the session): 1.2 s past the end of the session, longer
    // than the coordinator takes to notice an expired session (it checks every second).
    tokio::time::sleep(SESSION.saturating_sub(Duration::from_millis(800)).saturating_sub(heard.elapsed())).await;
    let held = client.consumer_group_heartbeat(heartbeat(joined.member_epoch, owned.clone(), Some(2_000))).await?;
    assert_eq!(held.member_epoch, joined.member_epoch, "the member kept its epoch");
    let after = client.consumer_group_heartbeat(heartbeat(joined.member_epoch, owned, None)).await?;
    assert_eq!(after.member_epoch, joined.member_epoch, "the member is still in the group");
    Ok(())
}
