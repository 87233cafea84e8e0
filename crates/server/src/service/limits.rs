//! The shape every request must have before a handler looks at its entries: how many topics
//! and partitions one request may name, and which repeated entries are merged or refused. An
//! answer is then never more than a small multiple of its request, whatever the request repeats.
//!
//! * Metadata: a repeated topic name is answered once (as Kafka does).
//! * Produce, Fetch, ListOffsets: a (topic, partition) named twice is answered
//!   `INVALID_REQUEST` for the second entry, and nothing is done for it.
//! * More than [`MAX_TOPICS_PER_REQUEST`] topics or [`MAX_PARTITIONS_PER_REQUEST`] partitions:
//!   the whole request is refused ([`RequestError::TooManyEntries`]), before any work.

use std::collections::{HashMap, HashSet};

use super::RequestError;

/// Most topics one request may name.
pub const MAX_TOPICS_PER_REQUEST: usize = 10_000;
/// Most (topic, partition) entries one request may name, over all its topics.
pub const MAX_PARTITIONS_PER_REQUEST: usize = 100_000;

/// Refuses request `request` (its name, for the message) when it names more than the bounds
/// allow; `partitions` counts every entry.
pub fn check_counts(request: &'static str, topics: usize, partitions: usize) -> Result<(), RequestError> {
    let too_many = |what, count, max| RequestError::TooManyEntries { request, what, count, max };
    if topics > MAX_TOPICS_PER_REQUEST {
        return Err(too_many("topics", topics, MAX_TOPICS_PER_REQUEST));
    }
    if partitions > MAX_PARTITIONS_PER_REQUEST {
        return Err(too_many("partitions", partitions, MAX_PARTITIONS_PER_REQUEST));
    }
    Ok(())
}

/// The (topic, partition) entries of one request seen so far. Keyed by topic first, so a request
/// costs one allocated name per distinct topic, not one per partition entry (Fetch runs this
/// for every partition of every consumer's requests).
#[derive(Default)]
pub struct SeenPartitions(HashMap<String, HashSet<u32>>);

impl SeenPartitions {
    /// True the first time `topic`/`partition` is named in this request.
    pub fn first(&mut self, topic: &str, partition: u32) -> bool {
        match self.0.get_mut(topic) {
            Some(partitions) => partitions.insert(partition),
            None => {
                self.0.insert(topic.to_string(), HashSet::from([partition]));
                true
            }
        }
    }
}

/// `names` with repeats removed, in first-seen order.
pub fn distinct(names: Vec<String>) -> Vec<String> {
    let mut seen = HashSet::new();
    names.into_iter().filter(|n| seen.insert(n.clone())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repeats_are_seen_and_merged() {
        let mut seen = SeenPartitions::default();
        assert!(seen.first("a", 0) && seen.first("a", 1) && seen.first("b", 0));
        assert!(!seen.first("a", 0));
        assert_eq!(distinct(vec!["x".into(), "y".into(), "x".into()]), vec!["x".to_string(), "y".to_string()]);
        assert!(check_counts("Fetch", MAX_TOPICS_PER_REQUEST, MAX_PARTITIONS_PER_REQUEST).is_ok());
        let refused = check_counts("Fetch", 1, MAX_PARTITIONS_PER_REQUEST + 1).unwrap_err();
        assert!(matches!(refused, RequestError::TooManyEntries { count: 100_001, .. }), "{refused}");
        assert!(refused.to_string().contains("100001 partitions"), "{refused}");
    }
}
