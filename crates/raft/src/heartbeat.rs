//! Heartbeat coalescing: the heartbeats of every group bound for one peer travel in one RPC.
//!
//! Each Raft group's leader sends every follower an empty append-entries each heartbeat
//! interval. With a thousand partitions that is tens of thousands of RPCs a second across a
//! small cluster, and each gRPC call costs far more (HTTP/2 stream, headers, tasks, timers)
//! than the heartbeat itself: idle partitions alone saturated the CPU, and under load the
//! heartbeats missed their deadline and triggered elections. Multi-Raft systems (TiKV,
//! CockroachDB) coalesce heartbeats per node pair for the same reason.
//!
//! Here a heartbeat joins its peer's queue; one flusher per peer waits `LINGER`, then sends
//! everything queued as one `Heartbeats` call and hands each group its own answer. While a
//! call is out, new heartbeats queue for the next one, so the number of calls per peer is
//! bounded by the round trip, not by the number of groups. Append-entries that carry entries
//! (the write path), those that announce a newer commit index (the group's next write waits
//! for their answer), and votes keep their own calls: they must not wait behind others.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use rill_proto::internal::{RaftBatch, RaftMessage};
use rill_rt::sync::oneshot;

use crate::network::{PeerError, Transport};
use crate::types::{GroupId, NodeId};

/// How long a flusher collects heartbeats before sending. Small next to the heartbeat interval.
const LINGER: Duration = Duration::from_millis(10);
/// How long one batch call may take. Each heartbeat also has openraft's own deadline.
const BATCH_TIMEOUT: Duration = Duration::from_secs(2);

type Answer = Result<RaftMessage, PeerError>;

struct Waiting {
    group: GroupId,
    payload: Bytes,
    answer: oneshot::Sender<Answer>,
}

#[derive(Default)]
struct Queue {
    waiting: Vec<Waiting>,
    /// A flusher is running for this peer.
    flushing: bool,
}

type SharedQueue = Arc<Mutex<Queue>>;

/// Per-peer heartbeat queues of one node.
#[derive(Default)]
pub struct Heartbeats {
    queues: Mutex<HashMap<(NodeId, String), SharedQueue>>,
}

impl Heartbeats {
    fn queue(&self, target: NodeId, addr: &str) -> SharedQueue {
        let mut queues = self.queues.lock().unwrap_or_else(|p| p.into_inner());
        queues.entry((target, addr.to_string())).or_default().clone()
    }
}

impl Transport {
    /// Sends one group's heartbeat (an encoded append-entries without entries) to `target`
    /// along with the other groups' heartbeats, and returns that group's answer.
    pub async fn heartbeat(
        self: &Arc<Self>,
        target: NodeId,
        addr: &str,
        group: GroupId,
        payload: Bytes,
    ) -> Result<RaftMessage, PeerError> {
        let (tx, rx) = oneshot::channel();
        let queue = self.heartbeats().queue(target, addr);
        let start_flusher = {
            let mut q = queue.lock().unwrap_or_else(|p| p.into_inner());
            q.waiting.push(Waiting { group, payload, answer: tx });
            !std::mem::replace(&mut q.flushing, true)
        };
        if start_flusher {
            rill_rt::spawn(flush(self.clone(), target, addr.to_string(), queue));
        }
        rx.await.unwrap_or_else(|_| Err(PeerError::Network("the heartbeat flusher stopped".into())))
    }
}

/// Sends the queued heartbeats for one peer until its queue is empty.
async fn flush(transport: Arc<Transport>, target: NodeId, addr: String, queue: SharedQueue) {
    loop {
        rill_rt::sleep(LINGER).await;
        let batch = {
            let mut q = queue.lock().unwrap_or_else(|p| p.into_inner());
            if q.waiting.is_empty() {
                q.flushing = false;
                return;
            }
            std::mem::take(&mut q.waiting)
        };
        let (answers, messages): (Vec<_>, Vec<_>) = batch
            .into_iter()
            .map(|w| (w.answer, RaftMessage { group_id: w.group, payload: w.payload, error: String::new() }))
            .unzip();
        let sent = messages.len();
        match send(&transport, target, &addr, messages).await {
            Ok(replies) if replies.len() == sent => {
                for (answer, reply) in answers.into_iter().zip(replies) {
                    let result =
                        if reply.error.is_empty() { Ok(reply) } else { Err(PeerError::Unreachable(reply.error)) };
                    let _ = answer.send(result);
                }
            }
            Ok(replies) => {
                let e = format!("node {target} answered {} of {sent} heartbeats", replies.len());
                for answer in answers {
                    let _ = answer.send(Err(PeerError::Network(e.clone())));
                }
            }
            Err(e) => {
                for answer in answers {
                    let _ = answer.send(Err(e.clone()));
                }
            }
        }
    }
}

/// Sends one batch (empty: a ping) and records the peer as heard from when it answers.
async fn send(
    transport: &Transport,
    target: NodeId,
    addr: &str,
    messages: Vec<RaftMessage>,
) -> Result<Vec<RaftMessage>, PeerError> {
    let mut client = transport.client(target, addr).map_err(|e| PeerError::Unreachable(e.0))?;
    let ping = messages.is_empty();
    let batch = RaftBatch {
        messages,
        from_node: transport.node_id(),
        incarnation: transport.liveness().incarnation(),
        known_leadership_version: if ping { transport.directory().known_version(target) } else { 0 },
        leadership: None,
    };
    match rill_rt::timeout(BATCH_TIMEOUT, client.heartbeats(batch)).await {
        Err(_) => Err(PeerError::Network(format!("no answer from node {target} within {BATCH_TIMEOUT:?}"))),
        Ok(Err(status)) => Err(PeerError::from_status(&status)),
        Ok(Ok(r)) => {
            let answer = r.into_inner();
            if answer.from_node == target {
                transport.liveness().heard(target, answer.incarnation);
                if let Some(report) = answer.leadership {
                    transport.directory().learn(target, report);
                }
            }
            Ok(answer.messages)
        }
    }
}

impl Transport {
    /// Pings `target` (an empty heartbeat batch), proving this node alive to it and, by its
    /// answer, it alive to this node. See [`crate::liveness`].
    pub async fn ping(&self, target: NodeId, addr: &str) -> Result<(), PeerError> {
        send(self, target, addr, Vec::new()).await.map(|_| ())
    }
}
