//! Subscriptions by regular expression (KIP-848's `SubscribedTopicRegex`): a member names a
//! pattern, and the coordinator subscribes it to every topic whose whole name the pattern
//! matches — those that exist at each decision, so a topic created later that matches joins the
//! group's assignment at the next heartbeat.
//!
//! The syntax is RE2's (the `regex` crate's, which Kafka's RE2/J also follows), matched against
//! the whole name as Kafka's `Pattern.matcher(name).matches()` does: librdkafka's `^orders-.*`
//! matches `orders-eu`, not `my-orders-eu`. Matching takes time linear in the name, and a
//! pattern's compiled size is bounded, so a hostile pattern costs the coordinator no more than
//! [`MAX_PATTERN_BYTES`] and the bounds below.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use regex::{Regex, RegexBuilder};

use crate::error::{CoordinatorError, Result};

/// Longest pattern accepted (bytes). librdkafka joins a consumer's patterns into one, so a few
/// dozen patterns must fit.
pub const MAX_PATTERN_BYTES: usize = 4096;
/// Most memory one compiled pattern may take (bytes), and as much again for its lazy DFA.
const MAX_COMPILED_BYTES: usize = 1 << 20;
/// Most compiled patterns kept for reuse ([`TopicPattern::cached`]); past it the cache starts
/// over. With [`MAX_COMPILED_BYTES`] this bounds what the cache can hold, however many distinct
/// patterns clients send.
const MAX_CACHED: usize = 32;

/// A member's subscription pattern, compiled.
#[derive(Debug, Clone)]
pub struct TopicPattern {
    regex: Regex,
    /// The pattern unanchored, for the unanchored-pattern mutation (simulation only).
    unanchored: Option<Regex>,
}

impl TopicPattern {
    /// Compiles `source`, anchored at both ends. An empty pattern, one longer than
    /// [`MAX_PATTERN_BYTES`], one that does not parse or one that compiles too large is refused
    /// with `INVALID_REGULAR_EXPRESSION`.
    pub fn parse(source: &str) -> Result<Self> {
        let invalid = |reason: String| CoordinatorError::InvalidRegularExpression { pattern: clip(source), reason };
        if source.is_empty() {
            return Err(invalid("it is empty".into()));
        }
        if source.len() > MAX_PATTERN_BYTES {
            return Err(invalid(format!("it is {} bytes long; at most {MAX_PATTERN_BYTES}", source.len())));
        }
        let regex = RegexBuilder::new(&format!("^(?:{source})$"))
            .size_limit(MAX_COMPILED_BYTES)
            .dfa_size_limit(MAX_COMPILED_BYTES)
            .build()
            .map_err(|e| invalid(e.to_string()))?;
        let unanchored = rill_rt::mutation::active(rill_rt::mutation::Mutation::UnanchoredPattern)
            .then(|| RegexBuilder::new(source).size_limit(MAX_COMPILED_BYTES).build().ok())
            .flatten();
        Ok(Self { regex, unanchored })
    }

    /// [`Self::parse`], reusing the compiled pattern of an earlier call with the same source:
    /// the coordinator matches each member's pattern at every decision, and the members of a
    /// group usually send the same one. The cache is the process's, bounded by `MAX_CACHED`
    /// entries; a refused pattern is not kept.
    pub fn cached(source: &str) -> Result<Self> {
        static CACHE: OnceLock<Mutex<HashMap<String, TopicPattern>>> = OnceLock::new();
        let cache = CACHE.get_or_init(Mutex::default);
        if let Some(hit) = cache.lock().unwrap_or_else(|p| p.into_inner()).get(source) {
            return Ok(hit.clone());
        }
        let compiled = Self::parse(source)?;
        let mut cache = cache.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= MAX_CACHED {
            cache.clear();
        }
        cache.insert(source.to_string(), compiled.clone());
        Ok(compiled)
    }

    /// True when the pattern matches the whole of `topic`.
    pub fn matches(&self, topic: &str) -> bool {
        match &self.unanchored {
            Some(unanchored) => unanchored.is_match(topic),
            None => self.regex.is_match(topic),
        }
    }
}

/// `source` as an error message shows it: at most 100 characters.
fn clip(source: &str) -> String {
    match source.char_indices().nth(100) {
        Some((end, _)) => format!("{}…", &source[..end]),
        None => source.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pattern_matches_whole_names_only() {
        let p = TopicPattern::parse("^orders-.*").unwrap();
        assert!(p.matches("orders-eu"));
        assert!(p.matches("orders-"));
        assert!(!p.matches("my-orders-eu"));
        let p = TopicPattern::parse("orders").unwrap();
        assert!(p.matches("orders"));
        assert!(!p.matches("orders-eu"), "anchored at the end too, as Kafka's matches()");
        // librdkafka's way of joining a consumer's patterns.
        let p = TopicPattern::parse("(^a.*)|(^b-[0-9]+)").unwrap();
        assert!(p.matches("apple") && p.matches("b-12") && !p.matches("b-x") && !p.matches("cab"));
    }

    #[test]
    fn bad_patterns_are_refused_with_the_reason() {
        for bad in ["", "(", "[z-a]", "a{5000}{5000}"] {
            let err = TopicPattern::parse(bad).unwrap_err();
            assert!(matches!(err, CoordinatorError::InvalidRegularExpression { .. }), "{bad:?}: {err}");
        }
        let long = "a".repeat(MAX_PATTERN_BYTES + 1);
        let err = TopicPattern::parse(&long).unwrap_err().to_string();
        assert!(err.contains("at most 4096") && err.len() < 400, "{err}");
    }

    #[test]
    fn a_cached_pattern_matches_as_a_parsed_one_and_bad_ones_are_still_refused() {
        // More distinct patterns than the cache keeps: it starts over and stays right.
        for round in 0..2 {
            for i in 0..(MAX_CACHED + 5) {
                let p = TopicPattern::cached(&format!("t{i}-.*")).unwrap();
                assert!(p.matches(&format!("t{i}-x")) && !p.matches(&format!("u{i}-x")), "round {round}, {i}");
            }
        }
        assert!(TopicPattern::cached("(").is_err());
        assert!(TopicPattern::cached("(").is_err(), "a refused pattern is not kept");
    }
}
