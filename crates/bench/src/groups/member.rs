//! [`GroupMember`]: one consumer group member as an application runs it — a `Consumer` in
//! subscribe mode polling in its own task, with its own `Client` (its own connections and
//! metadata, as a separate process would have) — that records, for the scenarios to analyse,
//! every record it receives (partition, offset, time), its assignment after each poll, its
//! member id and epoch, its commits, and the partitions its listener heard revoked or lost.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use anyhow::Context;
use rill_client::{Client, Consumer, ConsumerConfig, OffsetSpec, RebalanceListener, TopicPartition};
use rill_proto::groups::OwnedPartitions;
use tokio::task::JoinHandle;

/// How long one `poll` waits for records, by default: short, so a member acts on a new
/// assignment (which happens inside `poll`) promptly even when it has no records to return.
pub const POLL_TIMEOUT: Duration = Duration::from_millis(100);
/// A `poll` taking this much longer than its timeout was held up inside (revoking partitions
/// commits their positions; new partitions look up their committed offsets): recorded.
const SLOW_POLL_SLACK: Duration = Duration::from_millis(50);
/// The auto-commit interval of members that do not commit after every poll (the client commits
/// revoked partitions' positions itself, so the next owner starts where this one stopped).
const AUTO_COMMIT_INTERVAL: Duration = Duration::from_secs(1);

/// How a member consumes.
#[derive(Debug, Clone)]
pub struct MemberOptions {
    /// The group.
    pub group: String,
    /// The topic it subscribes to.
    pub topic: String,
    /// "cooperative" or "eager" (`ConsumerConfig::rebalance_mode`); `None`: the default.
    pub rebalance_mode: Option<String>,
    /// Commit after every poll (and time each commit), instead of auto-committing every second.
    pub commit_every_poll: bool,
    /// How long each `poll` waits for records.
    pub poll_timeout: Duration,
}

/// One record received.
#[derive(Debug, Clone, Copy)]
pub struct Receipt {
    /// Partition.
    pub partition: u32,
    /// Offset.
    pub offset: u64,
    /// When `poll` returned it.
    pub at: Instant,
    /// Its create time (ms since the epoch): set by the producing client when it sent the batch.
    pub created_ms: i64,
}

/// One successful commit.
#[derive(Debug, Clone, Copy)]
pub struct CommitTiming {
    /// When `commit` was called.
    pub started: Instant,
    /// When it returned `Ok`.
    pub done: Instant,
}

/// What a member saw.
#[derive(Debug, Default)]
pub struct MemberView {
    /// Every record received, in order.
    pub receipts: Vec<Receipt>,
    /// Partitions it owns, as of its last poll.
    pub assignment: BTreeSet<u32>,
    /// Its member id and epoch, as of its last poll (`None` while joining).
    pub member: Option<(String, i32)>,
    /// Partitions its listener heard revoked.
    pub revoked: usize,
    /// Partitions its listener heard lost (fenced, or its session ran out by its own clock).
    pub lost: usize,
    /// Successful commits (members committing after every poll).
    pub commits: Vec<CommitTiming>,
    /// Failed commits: when, and why.
    pub failed_commits: Vec<(Instant, String)>,
    /// Polls that took more than their timeout plus `SLOW_POLL_SLACK`: when each started, and
    /// how long it took. Records of every partition the member owns wait meanwhile.
    pub slow_polls: Vec<(Instant, Duration)>,
}

/// A running member.
pub struct GroupMember {
    /// When it was created (just before `subscribe`).
    pub started: Instant,
    view: Arc<Mutex<MemberView>>,
    stop: Arc<AtomicBool>,
    task: JoinHandle<anyhow::Result<()>>,
}

struct Listener(Arc<Mutex<MemberView>>);

impl RebalanceListener for Listener {
    fn on_revoked(&mut self, partitions: &[TopicPartition]) {
        lock(&self.0).revoked += partitions.len();
    }
    fn on_lost(&mut self, partitions: &[TopicPartition]) {
        lock(&self.0).lost += partitions.len();
    }
}

fn lock(view: &Mutex<MemberView>) -> MutexGuard<'_, MemberView> {
    view.lock().unwrap_or_else(PoisonError::into_inner)
}

impl GroupMember {
    /// Connects a client of its own, subscribes, and starts polling.
    pub async fn start(endpoints: &[String], options: &MemberOptions) -> anyhow::Result<Self> {
        let client = Client::connect(endpoints).await.context("a member cannot connect")?;
        let config = ConsumerConfig {
            group_id: Some(options.group.clone()),
            start: OffsetSpec::Earliest,
            rebalance_mode: options.rebalance_mode.clone(),
            auto_commit_interval: (!options.commit_every_poll).then_some(AUTO_COMMIT_INTERVAL),
            client_id: "rill-bench".to_string(),
            ..ConsumerConfig::default()
        };
        let view = Arc::new(Mutex::new(MemberView::default()));
        let started = Instant::now();
        let mut consumer = Consumer::new(client, config);
        consumer.set_rebalance_listener(Listener(view.clone()));
        consumer.subscribe(&[options.topic.as_str()]).context("subscribe")?;
        let stop = Arc::new(AtomicBool::new(false));
        let (commit_every_poll, poll_timeout) = (options.commit_every_poll, options.poll_timeout);
        let task = tokio::spawn({
            let (view, stop) = (view.clone(), stop.clone());
            async move {
                while !stop.load(Ordering::SeqCst) {
                    let polled = Instant::now();
                    let records = consumer.poll(poll_timeout).await.context("poll")?;
                    let at = Instant::now();
                    {
                        let mut v = lock(&view);
                        if at - polled > poll_timeout + SLOW_POLL_SLACK {
                            v.slow_polls.push((polled, at - polled));
                        }
                        v.receipts.extend(records.iter().map(|r| Receipt {
                            partition: r.partition,
                            offset: r.offset,
                            at,
                            created_ms: r.timestamp_ms,
                        }));
                        v.assignment = consumer.assignment().iter().map(|tp| tp.partition).collect();
                        v.member = consumer.member();
                    }
                    // Commit only as a member with positions: `commit` with nothing to commit
                    // returns at once without asking the coordinator, which would time nothing.
                    let has_positions = consumer.assignment().iter().any(|tp| consumer.position(tp).is_some());
                    if commit_every_poll && has_positions && consumer.member().is_some() {
                        let started = Instant::now();
                        let result = consumer.commit().await;
                        let mut v = lock(&view);
                        match result {
                            Ok(()) => v.commits.push(CommitTiming { started, done: Instant::now() }),
                            Err(e) => v.failed_commits.push((Instant::now(), e.to_string())),
                        }
                    }
                }
                consumer.shutdown().await.context("leaving the group")?;
                Ok(())
            }
        });
        Ok(Self { started, view, stop, task })
    }

    /// What it has seen so far (locked: keep it short).
    pub fn view(&self) -> MutexGuard<'_, MemberView> {
        lock(&self.view)
    }

    /// Its task has ended (only [`GroupMember::stop`] ends it without an error).
    pub fn has_exited(&self) -> bool {
        self.task.is_finished()
    }

    /// Stops polling, leaves the group, and returns what it saw.
    pub async fn stop(self) -> anyhow::Result<MemberView> {
        self.stop.store(true, Ordering::SeqCst);
        self.task.await.context("member task")??;
        Ok(std::mem::take(&mut *lock(&self.view)))
    }
}

/// The partition numbers in `owned` (the scenarios use one topic per group).
pub fn partitions_of(owned: Option<&OwnedPartitions>) -> BTreeSet<u32> {
    owned.map(|o| o.topics.iter().flat_map(|t| t.partitions.iter().copied()).collect()).unwrap_or_default()
}
