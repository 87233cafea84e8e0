//! Where a node's record partitions send share groups' dead-letter copies
//! ([`rill_broker::share::dead_letters`]): to the dead-letter partition's leader — appended
//! directly when that is this node, else through the leader's internal
//! `Cluster.WriteDeadLetter` — with producer ids from the node's block. Every outcome is read
//! through one mapping from Rill's error codes (`append_outcome`), local or remote alike.

use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use rill_broker::share::dead_letters::{AppendError, DeadLetterSink, SinkFuture};
use rill_broker::{Acks, Partition};
use rill_proto::common::ErrorCode;
use rill_proto::internal::WriteDeadLetterRequest;

use crate::errors::{self, Refusal};
use crate::node::{Hosted, Node};

/// How long one copy may take to be stored.
pub(crate) const APPEND_TIMEOUT: Duration = Duration::from_secs(10);

/// The node's [`DeadLetterSink`], given to each record partition it hosts.
#[derive(Debug)]
pub(crate) struct NodeDeadLetters {
    node: Weak<Node>,
}

impl NodeDeadLetters {
    pub(crate) fn new(node: Weak<Node>) -> Self {
        Self { node }
    }
}

impl DeadLetterSink for NodeDeadLetters {
    fn partition_count(&self, topic: &str) -> Option<u32> {
        let node = self.node.upgrade()?;
        let meta = node.topic(topic).filter(|t| !t.is_internal())?;
        u32::try_from(meta.partitions.len()).ok()
    }

    fn producer_id(&self) -> SinkFuture<Result<i64, String>> {
        let node = self.node.clone();
        Box::pin(async move {
            let node = node.upgrade().ok_or("the node is stopping")?;
            node.next_producer_id().await.map_err(|e| e.to_string())
        })
    }

    fn append(&self, topic: String, partition: u32, batch: Bytes) -> SinkFuture<Result<(), AppendError>> {
        let node = self.node.clone();
        Box::pin(async move {
            let node = node.upgrade().ok_or_else(|| AppendError::Retry("the node is stopping".into()))?;
            append(&node, &topic, partition, batch).await
        })
    }
}

/// Appends `batch` at the leader of `topic`/`partition`.
async fn append(node: &Arc<Node>, topic: &str, partition: u32, batch: Bytes) -> Result<(), AppendError> {
    let Some(group) = node.topic(topic).and_then(|t| t.partitions.get(partition as usize).map(|a| a.group)) else {
        return Err(AppendError::Gone(format!("{topic}/{partition} does not exist")));
    };
    if let Some(Hosted::Records(p)) = node.replica(group).filter(|h| h.replica().state().is_leader) {
        return append_outcome(append_local(&p, batch).await.err());
    }
    let Some(leader) = node.leader_of(group) else {
        return Err(AppendError::Retry(format!("{topic}/{partition} has no leader yet")));
    };
    let Some(mut client) = node.cluster_client(leader) else {
        return Err(AppendError::Retry(format!("no address for node {leader}")));
    };
    let request = WriteDeadLetterRequest {
        from_node: node.id(),
        topic: topic.to_string(),
        partition,
        batch,
        timeout_ms: APPEND_TIMEOUT.as_millis() as u32,
    };
    match rill_rt::timeout(APPEND_TIMEOUT * 2, client.write_dead_letter(request)).await {
        Err(_) => Err(AppendError::Retry(format!("node {leader} did not answer in time"))),
        Ok(Err(status)) => Err(AppendError::Retry(status.message().to_string())),
        Ok(Ok(answer)) => {
            let answer = answer.into_inner();
            let code = ErrorCode::try_from(answer.error_code).unwrap_or(ErrorCode::UnknownServerError);
            let refusal = (code != ErrorCode::None).then(|| Refusal::new(code, answer.error_message));
            append_outcome(refusal)
        }
    }
}

/// Appends a copy to a partition this node leads, as an idempotent producer's batch with
/// `acks=all`: a copy stored before (the same producer and sequence number) is answered as
/// stored.
pub(crate) async fn append_local(partition: &Partition, batch: Bytes) -> Result<(), Refusal> {
    match partition.produce(batch, Acks::All, APPEND_TIMEOUT, None).await {
        Ok(_) => Ok(()),
        Err(e) => Err(errors::partition(&e, |_| None)),
    }
}

/// What a dead-letter partition's answer means to the writer.
fn append_outcome(refusal: Option<Refusal>) -> Result<(), AppendError> {
    let Some(r) = refusal else { return Ok(()) };
    match r.code {
        // Older than the partition remembers: stored before.
        ErrorCode::DuplicateSequenceNumber => Ok(()),
        // Forgotten (expired), or a sequence the partition cannot place (its copies lost): a
        // new writer starts over from sequence 0.
        ErrorCode::UnknownProducerId | ErrorCode::OutOfOrderSequenceNumber => Err(AppendError::UnknownProducer),
        ErrorCode::MessageTooLarge => Err(AppendError::TooLarge(r.message)),
        ErrorCode::UnknownTopicOrPartition => Err(AppendError::Gone(r.message)),
        _ => Err(AppendError::Retry(r.message)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_map_to_what_the_writer_does() {
        let refused = |code| append_outcome(Some(Refusal::new(code, "x")));
        assert_eq!(append_outcome(None), Ok(()));
        assert_eq!(refused(ErrorCode::DuplicateSequenceNumber), Ok(()), "stored before");
        assert_eq!(refused(ErrorCode::UnknownProducerId), Err(AppendError::UnknownProducer));
        assert_eq!(refused(ErrorCode::MessageTooLarge), Err(AppendError::TooLarge("x".into())));
        assert_eq!(refused(ErrorCode::UnknownTopicOrPartition), Err(AppendError::Gone("x".into())));
        assert_eq!(refused(ErrorCode::NotLeaderOrFollower), Err(AppendError::Retry("x".into())));
    }
}
