//! What the runner needs from a messaging system: create a topic, send with an acknowledgement,
//! read. Each system (Rill and every peer) implements these three traits in its own module.

use bytes::Bytes;
use futures::future::BoxFuture;

/// Resolves when the system acknowledges one message (to the durability its variant promises).
pub type AckFuture = BoxFuture<'static, anyhow::Result<()>>;

/// A connected system, ready to create topics and clients.
pub trait Driver: Send + Sync {
    /// Creates `topic` with `partitions` partitions (peers without partitions create one
    /// stream or queue and ignore the count) and returns once it can take writes.
    fn create_topic<'a>(&'a self, topic: &'a str, partitions: u32) -> BoxFuture<'a, anyhow::Result<()>>;

    /// A producer for `topic`.
    fn producer<'a>(&'a self, topic: &'a str) -> BoxFuture<'a, anyhow::Result<Box<dyn BenchProducer>>>;

    /// A consumer reading every message of `topic` from its beginning, sharing the work with
    /// the other `members` consumers of subscription `subscription` (`member` is 0-based).
    fn consumer<'a>(
        &'a self,
        topic: &'a str,
        subscription: u32,
        member: u32,
        members: u32,
    ) -> BoxFuture<'a, anyhow::Result<Box<dyn BenchConsumer>>>;
}

/// Sends messages.
pub trait BenchProducer: Send + Sync {
    /// Hands one message over. Returns once the system has taken it (it may wait for buffer
    /// space), with a future that resolves at its acknowledgement. Calls are made in order,
    /// one at a time, so a producer that batches sees messages in send order.
    fn send(&self, key: Option<Bytes>, payload: Bytes) -> BoxFuture<'_, anyhow::Result<AckFuture>>;

    /// Waits until everything sent is acknowledged or failed.
    fn close(self: Box<Self>) -> BoxFuture<'static, ()>;
}

/// Reads messages.
pub trait BenchConsumer: Send {
    /// The next payloads, waiting briefly (well under a second) when there are none.
    fn poll(&mut self) -> BoxFuture<'_, anyhow::Result<Vec<Bytes>>>;
}
