//! Background commits for a consumer ([`crate::Consumer::commit_async`]).
//!
//! One task per consumer makes its background commits one at a time, in the order they were
//! asked for: two commits racing to the coordinator could land out of order, and the earlier
//! one would then overwrite the later (the committed offset would move back). A synchronous
//! commit first waits for the background ones asked for before it (`Committer::drain`), so
//! every commit of a consumer, of either kind, lands in the order the application made it.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use rill_rt::sync::{mpsc, oneshot};
use rill_rt::JoinHandle;

use crate::client::Client;
use crate::consumer::TopicPartition;
use crate::error::{Error, Result};

/// One commit to make: offsets (next to read) of `group`, as `member` (id, epoch) or without
/// membership. No offsets: a barrier, answered once everything before it is done.
struct Job {
    group: String,
    member: Option<(String, i32)>,
    offsets: Vec<(TopicPartition, u64, String)>,
    done: oneshot::Sender<Result<()>>,
}

/// A consumer's background committer (started on its first background commit).
pub(crate) struct Committer {
    jobs: mpsc::UnboundedSender<Job>,
    task: JoinHandle<()>,
}

impl Committer {
    /// Starts the task committing through `client`.
    pub(crate) fn start(client: Client) -> Self {
        let (jobs, mut rx) = mpsc::unbounded_channel::<Job>();
        let task = rill_rt::spawn(async move {
            while let Some(job) = rx.recv().await {
                let result = if job.offsets.is_empty() {
                    Ok(())
                } else {
                    let member = job.member.as_ref().map(|(id, epoch)| (id.as_str(), *epoch));
                    client.commit_offsets_as(&job.group, member, &job.offsets).await
                };
                // The application may have dropped its `PendingCommit`: nobody to tell.
                let _ = job.done.send(result);
            }
        });
        Self { jobs, task }
    }

    /// Queues a commit behind the ones already queued.
    pub(crate) fn submit(
        &self,
        group: String,
        member: Option<(String, i32)>,
        offsets: Vec<(TopicPartition, u64, String)>,
    ) -> PendingCommit {
        let (done, rx) = oneshot::channel();
        if let Err(mpsc::error::SendError(job)) = self.jobs.send(Job { group, member, offsets, done }) {
            let _ = job.done.send(Err(stopped()));
        }
        PendingCommit { rx }
    }

    /// Waits until every commit queued so far is done (whatever its outcome).
    pub(crate) async fn drain(&self) {
        let _ = self.submit(String::new(), None, Vec::new()).await;
    }
}

impl Drop for Committer {
    fn drop(&mut self) {
        // Commits still queued when the consumer goes are abandoned, like an unsent request.
        self.task.abort();
    }
}

/// The outcome of a background commit ([`crate::Consumer::commit_async`]): await it for the
/// result, or drop it to not care. Commits land in the order they were made either way.
pub struct PendingCommit {
    rx: oneshot::Receiver<Result<()>>,
}

impl PendingCommit {
    /// A commit that failed before being queued.
    pub(crate) fn failed(error: Error) -> Self {
        Self::answered(Err(error))
    }

    /// A commit with nothing to commit.
    pub(crate) fn done() -> Self {
        Self::answered(Ok(()))
    }

    fn answered(result: Result<()>) -> Self {
        let (tx, rx) = oneshot::channel();
        let _ = tx.send(result);
        Self { rx }
    }
}

impl Future for PendingCommit {
    type Output = Result<()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.rx).poll(cx).map(|r| r.unwrap_or_else(|_| Err(stopped())))
    }
}

fn stopped() -> Error {
    Error::Transport("the consumer was closed before the commit was sent".into())
}
