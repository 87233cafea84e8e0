//! Submission order across the requests of one connection.
//!
//! A Kafka client pipelines its produce requests on one connection (an idempotent producer
//! keeps up to five in flight) and counts on the broker to append them in the order they were
//! sent: Kafka's brokers get that by reading a connection's next request only after answering
//! the previous one, which leaves each connection one request — one commit latency — at a
//! time. Rill's Kafka listener serves a connection's produce requests concurrently instead and
//! keeps their order where it matters, at the moment a batch is queued for its partition's log:
//! each request takes a [`SubmitTurn`] from its connection's [`SubmitOrder`], and a batch of it
//! is queued only once every batch of the request before was queued or refused. Everything
//! before that point (decoding, CRC and record checks, authorization) and everything after it
//! (replication, the acknowledgement) overlaps freely.
//!
//! A request's turn ends when the last of its batches drops its copy: a batch drops it right
//! after it is queued, and a refused batch when it returns, so a request never holds back its
//! successor longer than its own batches take to reach their logs' queues.

use std::sync::Arc;

use rill_rt::sync::watch;

/// Hands out the turns of one connection's requests, in the order they arrived.
#[derive(Debug, Default)]
pub struct SubmitOrder {
    /// Set once the latest request's batches are all queued or refused.
    latest: Option<watch::Receiver<bool>>,
}

impl SubmitOrder {
    /// The turn of the connection's next request: after every request handed a turn before.
    pub fn next_turn(&mut self) -> SubmitTurn {
        let (done, queued) = watch::channel(false);
        let previous = self.latest.replace(queued);
        SubmitTurn { previous, _done: Arc::new(Done(done)) }
    }
}

/// One request's place in its connection's order; cloned into each of its batches. Dropping
/// every copy ends the turn.
#[derive(Debug, Clone)]
pub struct SubmitTurn {
    /// The previous request's signal; `None` for a connection's first.
    previous: Option<watch::Receiver<bool>>,
    /// Signals the next request when the last copy is dropped (held only for that).
    _done: Arc<Done>,
}

impl SubmitTurn {
    /// Waits until every batch of the previous request was queued or refused. (A previous
    /// request abandoned before it got that far counts as done: its copies are gone.)
    pub async fn wait(&mut self) {
        if let Some(previous) = self.previous.as_mut() {
            // An error means the sender is gone, which ends that turn too.
            let _ = previous.wait_for(|queued| *queued).await;
        }
    }
}

#[derive(Debug)]
struct Done(watch::Sender<bool>);

impl Drop for Done {
    fn drop(&mut self) {
        self.0.send_replace(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    #[test]
    fn a_turn_comes_once_every_copy_of_the_previous_one_is_dropped() {
        let mut order = SubmitOrder::default();
        let mut first = order.next_turn();
        let mut second = order.next_turn();
        assert!(first.wait().now_or_never().is_some(), "the first request waits for nothing");
        let copy = first.clone();
        drop(first);
        assert!(second.wait().now_or_never().is_none(), "a batch of the first is not queued yet");
        drop(copy);
        assert!(second.wait().now_or_never().is_some());
        let mut third = order.next_turn();
        assert!(third.wait().now_or_never().is_none(), "the second still holds its turn");
        drop(second);
        assert!(third.wait().now_or_never().is_some());
    }
}
