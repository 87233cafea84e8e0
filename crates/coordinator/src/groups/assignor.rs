//! Server-side assignors (KIP-848): given the group's members, what each subscribes to and the
//! partitions of the subscribed topics, the **target assignment** — which partitions each member
//! should own. Runs on the coordinator's leader only; its result is replicated, so an assignor
//! needs no determinism for correctness (it is deterministic all the same, for tests).
//!
//! * [`Assignor::Uniform`] (the default): balanced and sticky — every member subscribed to the
//!   same topics gets the same number of partitions give or take one, and a partition stays
//!   with its current target owner whenever balance allows, so a rebalance moves as few
//!   partitions as it can.
//! * [`Assignor::Range`]: per topic, the members subscribed to it in member-id order get
//!   consecutive ranges of partitions (the first `partitions % members` one more): co-partitioned
//!   topics land partition `p` of each on the same member.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

/// Partitions by topic name.
pub type TopicPartitions = BTreeMap<String, BTreeSet<u32>>;

/// What an assignor is given.
#[derive(Debug, Clone, Default)]
pub struct AssignmentSpec {
    /// The group's members by member id.
    pub members: BTreeMap<String, MemberSpec>,
    /// Every topic some member subscribes to that exists, with its partition count.
    pub topics: BTreeMap<String, u32>,
}

/// One member as an assignor sees it.
#[derive(Debug, Clone, Default)]
pub struct MemberSpec {
    /// The static member's instance id, if any.
    pub instance_id: Option<String>,
    /// The topics it subscribes to (some may not exist: they are not in `AssignmentSpec::topics`).
    pub subscribed: BTreeSet<String>,
    /// Its current target assignment (what the previous run gave it), for stickiness.
    pub current: TopicPartitions,
}

/// A server-side assignor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Assignor {
    /// Balanced and sticky (`uniform`).
    #[default]
    Uniform,
    /// Ranges per topic (`range`).
    Range,
}

impl Assignor {
    /// The name the group protocol and the group's configuration use for this assignor (Kafka's
    /// `group.remote.assignor` values), so a client asking for `uniform` gets this one.
    pub fn name(self) -> &'static str {
        match self {
            Assignor::Uniform => "uniform",
            Assignor::Range => "range",
        }
    }

    /// The assignor `name` selects. `None` for any other name (no case folding, no aliases): the
    /// coordinator rejects an unknown assignor rather than quietly running a different strategy.
    pub fn parse(name: &str) -> Option<Assignor> {
        match name {
            "uniform" => Some(Assignor::Uniform),
            "range" => Some(Assignor::Range),
            _ => None,
        }
    }

    /// The target assignment for `spec`: an entry for every member (an empty map for one that gets
    /// nothing, so the caller can tell "nothing" from "not computed"), holding only existing
    /// partitions of topics the member subscribes to, each topic with a non-empty set. Every
    /// partition of a topic someone subscribes to goes to exactly one of its subscribers.
    pub fn assign(self, spec: &AssignmentSpec) -> BTreeMap<String, TopicPartitions> {
        let group = Group::new(spec);
        let owners = match self {
            Assignor::Uniform if group.is_homogeneous() => uniform_homogeneous(&group),
            Assignor::Uniform => uniform_general(&group),
            Assignor::Range => range(&group),
        };
        group.output(&owners)
    }
}

/// A member, as its position in member-id order (`Group::ids`): the assignors work on vectors
/// indexed by it rather than on maps keyed by strings.
type Member = usize;

/// Who owns each partition, as `owners[topic][partition]` (topics as `Group::topics` indices).
type Owners = Vec<Vec<Option<Member>>>;

/// A topic there is something to assign for: it exists, has partitions and someone subscribes.
struct Topic<'a> {
    name: &'a str,
    partitions: u32,
    /// The members subscribed to it, in member-id order.
    subscribers: Vec<Member>,
}

/// The spec indexed once, so the assignors neither look names up nor re-check subscriptions to
/// topics that do not exist.
struct Group<'a> {
    spec: &'a AssignmentSpec,
    /// Member ids in order: `Member` indexes this.
    ids: Vec<&'a str>,
    /// The assignable topics in name order.
    topics: Vec<Topic<'a>>,
    /// `topics` indices by name.
    by_name: BTreeMap<&'a str, usize>,
    /// Per member, the `topics` indices it subscribes to, ascending.
    member_topics: Vec<Vec<usize>>,
}

impl<'a> Group<'a> {
    fn new(spec: &'a AssignmentSpec) -> Group<'a> {
        let ids: Vec<&str> = spec.members.keys().map(String::as_str).collect();
        // Walking the members' subscriptions (not topics × members) keeps this proportional to
        // the subscriptions; members come in id order, so each subscriber list is sorted.
        let mut subscribers: BTreeMap<&str, Vec<Member>> = BTreeMap::new();
        for (member, spec_member) in spec.members.values().enumerate() {
            for name in &spec_member.subscribed {
                if spec.topics.get(name).is_some_and(|&partitions| partitions > 0) {
                    subscribers.entry(name.as_str()).or_default().push(member);
                }
            }
        }
        let mut topics = Vec::with_capacity(subscribers.len());
        let mut by_name = BTreeMap::new();
        let mut member_topics = vec![Vec::new(); ids.len()];
        for (name, subscribers) in subscribers {
            let index = topics.len();
            for &member in &subscribers {
                member_topics[member].push(index);
            }
            by_name.insert(name, index);
            let partitions = spec.topics.get(name).copied().unwrap_or(0);
            topics.push(Topic { name, partitions, subscribers });
        }
        Group { spec, ids, topics, by_name, member_topics }
    }

    /// Whether every member subscribes to the same assignable topics: then a balanced assignment
    /// is plain quotas, and the sticky quota path keeps as much as can be kept.
    fn is_homogeneous(&self) -> bool {
        self.member_topics.windows(2).all(|pair| pair[0] == pair[1])
    }

    fn unowned(&self) -> Owners {
        self.topics.iter().map(|topic| vec![None; topic.partitions as usize]).collect()
    }

    /// Each member's current partitions that are still its to keep — the topic is assignable, it
    /// still subscribes and the partition still exists — with `owners` set accordingly. A partition
    /// two members claim (a transient overlap of targets) goes to the lower member id only, since
    /// members are walked in id order. Each member's list is in (topic, partition) order.
    fn claims(&self) -> (Owners, Vec<Vec<(usize, u32)>>) {
        let mut owners = self.unowned();
        let mut claims = vec![Vec::new(); self.ids.len()];
        for (member, spec_member) in self.spec.members.values().enumerate() {
            for (name, partitions) in &spec_member.current {
                let Some(&topic) = self.by_name.get(name.as_str()) else { continue };
                if self.member_topics[member].binary_search(&topic).is_err() {
                    continue;
                }
                for &partition in partitions.range(..self.topics[topic].partitions) {
                    let slot = &mut owners[topic][partition as usize];
                    if slot.is_none() {
                        *slot = Some(member);
                        claims[member].push((topic, partition));
                    }
                }
            }
        }
        (owners, claims)
    }

    /// The owners as the assignor's result: every member present, topics with non-empty sets only.
    fn output(&self, owners: &Owners) -> BTreeMap<String, TopicPartitions> {
        let mut assigned = vec![TopicPartitions::new(); self.ids.len()];
        for (topic, owners) in self.topics.iter().zip(owners) {
            let mut by_member: BTreeMap<Member, BTreeSet<u32>> = BTreeMap::new();
            for (partition, owner) in (0..topic.partitions).zip(owners) {
                if let Some(member) = owner {
                    by_member.entry(*member).or_default().insert(partition);
                }
            }
            for (member, partitions) in by_member {
                if let Some(member) = assigned.get_mut(member) {
                    member.insert(topic.name.to_owned(), partitions);
                }
            }
        }
        self.ids.iter().map(|id| (*id).to_owned()).zip(assigned).collect()
    }
}

/// Uniform when every member subscribes to the same topics. Each member's quota is `P / M`, and
/// the `P % M` extra partitions go to the members claiming the most (ties to the lower id): a
/// member then keeps `min(claimed, quota)` of its current partitions, the most any balanced
/// assignment can keep. It keeps the first of them in (topic, partition) order and releases the
/// rest; the released and unowned partitions are dealt round-robin to the members under quota,
/// which spreads each topic over them.
fn uniform_homogeneous(group: &Group) -> Owners {
    let (mut owners, mut claims) = group.claims();
    let members = group.ids.len();
    let total: usize = group.topics.iter().map(|topic| topic.partitions as usize).sum();
    let floor = total.checked_div(members).unwrap_or(0);
    let extra = total.checked_rem(members).unwrap_or(0);
    let mut by_claims: Vec<Member> = (0..members).collect();
    by_claims.sort_by(|&a, &b| claims[b].len().cmp(&claims[a].len()).then(a.cmp(&b)));
    let mut quota = vec![floor; members];
    for &member in by_claims.iter().take(extra) {
        quota[member] += 1;
    }
    for (member, claimed) in claims.iter_mut().enumerate() {
        let keep = quota[member].min(claimed.len());
        for (topic, partition) in claimed.drain(keep..) {
            owners[topic][partition as usize] = None;
        }
    }
    let mut counts: Vec<usize> = claims.iter().map(Vec::len).collect();
    let mut hungry: VecDeque<Member> = (0..members).filter(|&member| counts[member] < quota[member]).collect();
    for slot in owners.iter_mut().flatten().filter(|slot| slot.is_none()) {
        let Some(member) = hungry.pop_front() else { break };
        *slot = Some(member);
        counts[member] += 1;
        if counts[member] < quota[member] {
            hungry.push_back(member);
        }
    }
    owners
}

/// Uniform with differing subscriptions, where quotas do not exist: each member keeps all it
/// claims, every unowned partition goes to the least-loaded subscriber of its topic (topics with
/// fewer subscribers first, as they have fewer places to go), then partitions move from the most-
/// to the least-loaded subscriber of their topic until no topic has an owner two or more above one
/// of its subscribers. Each move lowers the sum of squared counts, so this ends; only partitions
/// that balance requires move.
fn uniform_general(group: &Group) -> Owners {
    let (mut owners, claims) = group.claims();
    let mut counts: Vec<usize> = claims.iter().map(Vec::len).collect();
    let mut order: Vec<usize> = (0..group.topics.len()).collect();
    order.sort_by_key(|&topic| (group.topics[topic].subscribers.len(), topic));
    for topic in order {
        // Only this topic's subscribers gain partitions here, so a set built for it stays true.
        let mut least: BTreeSet<(usize, Member)> =
            group.topics[topic].subscribers.iter().map(|&member| (counts[member], member)).collect();
        for slot in owners[topic].iter_mut().filter(|slot| slot.is_none()) {
            let Some((count, member)) = least.pop_first() else { break };
            *slot = Some(member);
            counts[member] = count + 1;
            least.insert((count + 1, member));
        }
    }
    let mut balancer = Balancer::new(group, &owners, counts);
    // Only members whose counts change can unbalance a topic, and only topics they subscribe to:
    // those are checked after each drain, so `pending` holds every unbalanced topic. Topics with
    // fewer subscribers go first, as for unowned partitions: drained last, they would find their
    // few subscribers already filled from the widely subscribed topics, and partitions would move
    // twice.
    let key = |topic: usize| (group.topics[topic].subscribers.len(), topic);
    let mut pending: BTreeSet<(usize, usize)> =
        (0..group.topics.len()).filter(|&topic| balancer.excess(topic).is_some()).map(key).collect();
    let mut touched = BTreeSet::new();
    while let Some((_, topic)) = pending.pop_first() {
        while let Some(giver) = balancer.excess(topic) {
            if !balancer.drain(topic, giver, &mut owners[topic], &mut touched) {
                break;
            }
            for member in std::mem::take(&mut touched) {
                for &other in &group.member_topics[member] {
                    if other != topic && balancer.excess(other).is_some() {
                        pending.insert(key(other));
                    }
                }
            }
        }
    }
    owners
}

/// The general uniform assignor's balancing state: per topic, its subscribers and the members
/// holding some of its partitions, both ordered by count, so whether a topic is unbalanced is a
/// look at two ends, and a move costs only updating the two members' topics.
struct Balancer<'g> {
    member_topics: &'g [Vec<usize>],
    counts: Vec<usize>,
    /// Per topic, `(count, member)` of its subscribers.
    subscribers: Vec<BTreeSet<(usize, Member)>>,
    /// Per topic, `(count, member)` of the members holding at least one of its partitions.
    holders: Vec<BTreeSet<(usize, Member)>>,
    /// Per topic, the partitions each holder has, the next to give last.
    held: Vec<BTreeMap<Member, Vec<u32>>>,
}

impl<'g> Balancer<'g> {
    fn new(group: &'g Group, owners: &Owners, counts: Vec<usize>) -> Balancer<'g> {
        let mut held: Vec<BTreeMap<Member, Vec<u32>>> = vec![BTreeMap::new(); group.topics.len()];
        for ((topic, owners), held) in group.topics.iter().zip(owners).zip(&mut held) {
            for (partition, owner) in (0..topic.partitions).zip(owners) {
                if let Some(member) = owner {
                    held.entry(*member).or_default().push(partition);
                }
            }
        }
        let subscribers = group
            .topics
            .iter()
            .map(|topic| topic.subscribers.iter().map(|&member| (counts[member], member)).collect())
            .collect();
        let holders = held.iter().map(|held| held.keys().map(|&member| (counts[member], member)).collect()).collect();
        Balancer { member_topics: &group.member_topics, counts, subscribers, holders, held }
    }

    /// The most-loaded holder of `topic` (ties to the higher id), if it has two or more partitions
    /// more than the topic's least-loaded subscriber.
    fn excess(&self, topic: usize) -> Option<Member> {
        let &(high, giver) = self.holders[topic].last()?;
        let &(low, _) = self.subscribers[topic].first()?;
        (high >= low + 2).then_some(giver)
    }

    /// Moves `giver`'s partitions of `topic`, one at a time, each to the least-loaded subscriber
    /// (ties to the lower id), while the giver stays the topic's most-loaded holder and two or more
    /// above that subscriber. The giver is recounted once at the end, not after each partition:
    /// with a member holding thousands of partitions over many topics, that is what keeps
    /// balancing cheap. Adds the members whose counts changed to `touched`; returns whether any
    /// partition moved.
    fn drain(
        &mut self,
        topic: usize,
        giver: Member,
        owners: &mut [Option<Member>],
        touched: &mut BTreeSet<Member>,
    ) -> bool {
        let start = self.counts[giver];
        let mut count = start;
        loop {
            // Until the recount the giver is listed under `start`, still the highest: the holder
            // before it is the next most-loaded, and no subscriber listed first is the giver
            // unless none is below it.
            let next = self.holders[topic].iter().rev().nth(1).map_or(0, |&(count, _)| count);
            let Some(&(low, taker)) = self.subscribers[topic].first() else { break };
            if taker == giver || count < low + 2 || count < next {
                break;
            }
            let Some(partition) = self.held[topic].get_mut(&giver).and_then(Vec::pop) else { break };
            owners[partition as usize] = Some(taker);
            let taken = self.held[topic].entry(taker).or_default();
            taken.push(partition);
            if taken.len() == 1 {
                self.holders[topic].insert((low, taker));
            }
            self.recount(taker, low + 1);
            touched.insert(taker);
            count -= 1;
        }
        if self.held[topic].get(&giver).is_some_and(Vec::is_empty) {
            self.held[topic].remove(&giver);
            self.holders[topic].remove(&(start, giver));
        }
        self.recount(giver, count);
        if count < start {
            touched.insert(giver);
        }
        count < start
    }

    /// Sets `member`'s count, keeping every ordering it appears in true.
    fn recount(&mut self, member: Member, count: usize) {
        let old = self.counts[member];
        for &topic in &self.member_topics[member] {
            self.subscribers[topic].remove(&(old, member));
            self.subscribers[topic].insert((count, member));
            if self.holders[topic].remove(&(old, member)) {
                self.holders[topic].insert((count, member));
            }
        }
        self.counts[member] = count;
    }
}

/// Range: per topic, its subscribers in id order take consecutive runs from partition 0, the first
/// `partitions % subscribers` one longer — so topics with equal partition counts and subscribers
/// put partition `p` of each on the same member, which co-partitioned joins rely on.
fn range(group: &Group) -> Owners {
    let mut owners = group.unowned();
    for (topic, owners) in group.topics.iter().zip(owners.iter_mut()) {
        let subscribers = u32::try_from(topic.subscribers.len()).unwrap_or(u32::MAX);
        let base = topic.partitions.checked_div(subscribers).unwrap_or(0);
        let extra = topic.partitions.checked_rem(subscribers).unwrap_or(0) as usize;
        let mut start = 0usize;
        for (index, &member) in topic.subscribers.iter().enumerate() {
            let end = start + base as usize + usize::from(index < extra);
            for slot in &mut owners[start..end] {
                *slot = Some(member);
            }
            start = end;
        }
    }
    owners
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn set(partitions: impl IntoIterator<Item = u32>) -> BTreeSet<u32> {
        partitions.into_iter().collect()
    }

    fn member(subscribed: &[&str], current: &[(&str, &[u32])]) -> MemberSpec {
        MemberSpec {
            instance_id: None,
            subscribed: subscribed.iter().map(|topic| (*topic).to_owned()).collect(),
            current: current
                .iter()
                .map(|(topic, partitions)| ((*topic).to_owned(), set(partitions.iter().copied())))
                .collect(),
        }
    }

    fn spec(topics: &[(&str, u32)], members: Vec<(&str, MemberSpec)>) -> AssignmentSpec {
        AssignmentSpec {
            members: members.into_iter().map(|(id, member)| (id.to_owned(), member)).collect(),
            topics: topics.iter().map(|(topic, partitions)| ((*topic).to_owned(), *partitions)).collect(),
        }
    }

    fn partitions_of(result: &BTreeMap<String, TopicPartitions>, member: &str, topic: &str) -> Vec<u32> {
        result
            .get(member)
            .and_then(|topics| topics.get(topic))
            .map(|set| set.iter().copied().collect())
            .unwrap_or_default()
    }

    fn count(result: &BTreeMap<String, TopicPartitions>, member: &str) -> usize {
        result.get(member).map(|topics| topics.values().map(BTreeSet::len).sum()).unwrap_or(0)
    }

    /// How many of `member`'s partitions in `after` were in its `before`.
    fn kept(before: &[(&str, &[u32])], after: &TopicPartitions) -> usize {
        before
            .iter()
            .map(|(topic, partitions)| {
                after.get(*topic).map_or(0, |now| partitions.iter().filter(|p| now.contains(p)).count())
            })
            .sum()
    }

    #[test]
    fn names_round_trip() {
        for assignor in [Assignor::Uniform, Assignor::Range] {
            assert_eq!(Assignor::parse(assignor.name()), Some(assignor));
        }
        assert_eq!(Assignor::parse("Uniform"), None);
        assert_eq!(Assignor::parse("roundrobin"), None);
        assert_eq!(Assignor::parse(""), None);
        assert_eq!(Assignor::default(), Assignor::Uniform);
    }

    #[test]
    fn a_joining_member_takes_only_the_freed_partitions() {
        let a: &[(&str, &[u32])] = &[("t", &[0, 1, 2])];
        let b: &[(&str, &[u32])] = &[("t", &[3, 4, 5])];
        let spec =
            spec(&[("t", 6)], vec![("a", member(&["t"], a)), ("b", member(&["t"], b)), ("c", member(&["t"], &[]))]);
        let result = Assignor::Uniform.assign(&spec);
        for id in ["a", "b", "c"] {
            assert_eq!(count(&result, id), 2, "{result:?}");
        }
        assert_eq!(kept(a, &result["a"]), 2);
        assert_eq!(kept(b, &result["b"]), 2);
        assert_eq!(partitions_of(&result, "c", "t"), vec![2, 5]);
    }

    #[test]
    fn a_leaving_member_spreads_only_its_partitions() {
        let a: &[(&str, &[u32])] = &[("t", &[0, 1])];
        let b: &[(&str, &[u32])] = &[("t", &[2, 3])];
        // c owned 4 and 5 and has left: its partitions are the only ones to move.
        let spec = spec(&[("t", 6)], vec![("a", member(&["t"], a)), ("b", member(&["t"], b))]);
        let result = Assignor::Uniform.assign(&spec);
        assert_eq!(result.len(), 2);
        assert_eq!(partitions_of(&result, "a", "t"), vec![0, 1, 4]);
        assert_eq!(partitions_of(&result, "b", "t"), vec![2, 3, 5]);
    }

    #[test]
    fn a_rerun_changes_nothing() {
        let spec1 = spec(
            &[("t", 7), ("u", 3)],
            vec![("a", member(&["t", "u"], &[])), ("b", member(&["t", "u"], &[])), ("c", member(&["t"], &[]))],
        );
        let first = Assignor::Uniform.assign(&spec1);
        let mut spec2 = spec1.clone();
        for (id, member) in &mut spec2.members {
            member.current = first[id].clone();
        }
        assert_eq!(Assignor::Uniform.assign(&spec2), first);
    }

    #[test]
    fn members_beyond_the_partition_count_get_nothing() {
        let members = ["a", "b", "c", "d", "e"].map(|id| (id, member(&["t"], &[]))).to_vec();
        let spec = spec(&[("t", 3)], members);
        for assignor in [Assignor::Uniform, Assignor::Range] {
            let result = assignor.assign(&spec);
            assert_eq!(result.len(), 5);
            assert_eq!(result.values().filter(|topics| topics.is_empty()).count(), 2, "{assignor:?}: {result:?}");
            assert!(result.values().all(|topics| topics.values().all(|set| set.len() <= 1)));
        }
        let range = Assignor::Range.assign(&spec);
        assert!(range["d"].is_empty() && range["e"].is_empty());
    }

    #[test]
    fn a_claim_two_members_make_goes_to_the_lower_id() {
        let spec =
            spec(&[("t", 2)], vec![("a", member(&["t"], &[("t", &[1])])), ("b", member(&["t"], &[("t", &[1])]))]);
        let result = Assignor::Uniform.assign(&spec);
        assert_eq!(partitions_of(&result, "a", "t"), vec![1]);
        assert_eq!(partitions_of(&result, "b", "t"), vec![0]);
    }

    #[test]
    fn range_lays_out_runs_with_the_longer_ones_first() {
        let members = ["a", "b", "c"].map(|id| (id, member(&["t"], &[]))).to_vec();
        let result = Assignor::Range.assign(&spec(&[("t", 7)], members));
        assert_eq!(partitions_of(&result, "a", "t"), vec![0, 1, 2]);
        assert_eq!(partitions_of(&result, "b", "t"), vec![3, 4]);
        assert_eq!(partitions_of(&result, "c", "t"), vec![5, 6]);
    }

    #[test]
    fn range_puts_co_partitioned_topics_together() {
        let members = ["b", "a"].map(|id| (id, member(&["orders", "payments"], &[("orders", &[0, 1, 2])]))).to_vec();
        let result = Assignor::Range.assign(&spec(&[("orders", 5), ("payments", 5)], members));
        for id in ["a", "b"] {
            assert_eq!(partitions_of(&result, id, "orders"), partitions_of(&result, id, "payments"));
        }
        assert_eq!(partitions_of(&result, "a", "orders"), vec![0, 1, 2]);
        assert_eq!(partitions_of(&result, "b", "orders"), vec![3, 4]);
    }

    #[test]
    fn an_unknown_topic_is_ignored() {
        let spec = spec(
            &[("t", 2)],
            vec![
                ("a", member(&["t", "ghost"], &[("ghost", &[0]), ("t", &[0, 7])])),
                ("b", member(&["ghost"], &[("ghost", &[1]), ("t", &[1])])),
            ],
        );
        for assignor in [Assignor::Uniform, Assignor::Range] {
            let result = assignor.assign(&spec);
            assert_eq!(partitions_of(&result, "a", "t"), vec![0, 1], "{assignor:?}");
            assert_eq!(result["a"].len(), 1);
            assert!(result["b"].is_empty());
        }
    }

    #[test]
    fn an_empty_group_gets_an_empty_assignment() {
        let spec = spec(&[("t", 4)], Vec::new());
        for assignor in [Assignor::Uniform, Assignor::Range] {
            assert!(assignor.assign(&spec).is_empty());
            assert!(assignor.assign(&AssignmentSpec::default()).is_empty());
        }
    }

    #[test]
    fn differing_subscriptions_are_balanced_where_eligibility_allows() {
        // Only a may take t; u is shared, so b and c take it and a keeps t's three.
        let spec = spec(
            &[("t", 3), ("u", 4)],
            vec![
                ("a", member(&["t", "u"], &[("u", &[0, 1, 2, 3])])),
                ("b", member(&["u"], &[])),
                ("c", member(&["u"], &[])),
            ],
        );
        let result = Assignor::Uniform.assign(&spec);
        assert_eq!(partitions_of(&result, "a", "t"), vec![0, 1, 2]);
        assert_eq!(partitions_of(&result, "a", "u"), Vec::<u32>::new());
        assert_eq!(count(&result, "b") + count(&result, "c"), 4);
        assert_eq!(count(&result, "b"), 2);
    }

    /// 10,000 partitions over 1,000 members, with the same and with differing subscriptions, from
    /// scratch and after members join; checks the result, and that this stays cheap.
    #[test]
    fn scales_to_thousands_of_partitions_and_members() {
        let topics: Vec<(String, u32)> = (0..100).map(|t| (format!("topic-{t:03}"), 100)).collect();
        for homogeneous in [true, false] {
            let mut spec = AssignmentSpec {
                topics: topics.iter().cloned().collect(),
                members: (0..1000)
                    .map(|m| {
                        let subscribed = topics
                            .iter()
                            .enumerate()
                            .filter(|(t, _)| homogeneous || (t * 7 + m * 13) % 10 < 6)
                            .map(|(_, (name, _))| name.clone())
                            .collect();
                        (format!("member-{m:04}"), MemberSpec { subscribed, ..MemberSpec::default() })
                    })
                    .collect(),
            };
            let first = Assignor::Uniform.assign(&spec);
            check_valid(&spec, &first).unwrap_or_else(|e| panic!("{e}"));
            check_balanced(&spec, &first).unwrap_or_else(|e| panic!("{e}"));
            for (id, member) in &mut spec.members {
                member.current = first[id].clone();
            }
            let subscribed = spec.members.values().next().map(|m| m.subscribed.clone()).unwrap_or_default();
            for m in 1000..1100 {
                spec.members.insert(
                    format!("member-{m:04}"),
                    MemberSpec { subscribed: subscribed.clone(), ..MemberSpec::default() },
                );
            }
            let second = Assignor::Uniform.assign(&spec);
            check_valid(&spec, &second).unwrap_or_else(|e| panic!("{e}"));
            check_balanced(&spec, &second).unwrap_or_else(|e| panic!("{e}"));
        }
        // The worst case for moving: one member holds everything, and 999 join subscribing to
        // nested sets of topics, the first to all of them, the last to one.
        let everything: TopicPartitions =
            topics.iter().map(|(name, count)| (name.clone(), (0..*count).collect())).collect();
        let spec = AssignmentSpec {
            topics: topics.iter().cloned().collect(),
            members: (0..1000)
                .map(|m| {
                    let subscribed = topics.iter().take(100 - m % 100).map(|(name, _)| name.clone()).collect();
                    let current = if m == 0 { everything.clone() } else { TopicPartitions::new() };
                    (format!("member-{m:04}"), MemberSpec { instance_id: None, subscribed, current })
                })
                .collect(),
        };
        let result = Assignor::Uniform.assign(&spec);
        check_valid(&spec, &result).unwrap_or_else(|e| panic!("{e}"));
        check_balanced(&spec, &result).unwrap_or_else(|e| panic!("{e}"));
    }

    /// Every partition of every subscribed topic exactly once, to a subscriber; every member
    /// present; nothing else (no unknown topic, no partition past the count, no empty set).
    fn check_valid(spec: &AssignmentSpec, result: &BTreeMap<String, TopicPartitions>) -> Result<(), String> {
        if !result.keys().eq(spec.members.keys()) {
            return Err(format!(
                "members {:?} != {:?}",
                result.keys().collect::<Vec<_>>(),
                spec.members.keys().collect::<Vec<_>>()
            ));
        }
        let mut owner: BTreeMap<(&str, u32), &str> = BTreeMap::new();
        for (id, topics) in result {
            for (topic, partitions) in topics {
                let Some(&count) = spec.topics.get(topic) else { return Err(format!("{id}: unknown topic {topic}")) };
                if !spec.members[id].subscribed.contains(topic) {
                    return Err(format!("{id}: {topic} not subscribed"));
                }
                if partitions.is_empty() {
                    return Err(format!("{id}: empty set for {topic}"));
                }
                for &partition in partitions {
                    if partition >= count {
                        return Err(format!("{id}: {topic}-{partition} does not exist"));
                    }
                    if let Some(other) = owner.insert((topic, partition), id) {
                        return Err(format!("{topic}-{partition} to both {other} and {id}"));
                    }
                }
            }
        }
        for (topic, &count) in &spec.topics {
            if spec.members.values().any(|member| member.subscribed.contains(topic)) {
                if let Some(partition) = (0..count).find(|&p| !owner.contains_key(&(topic.as_str(), p))) {
                    return Err(format!("{topic}-{partition} unassigned"));
                }
            }
        }
        Ok(())
    }

    /// No partition could move to another subscriber of its topic holding two or more fewer.
    fn check_balanced(spec: &AssignmentSpec, result: &BTreeMap<String, TopicPartitions>) -> Result<(), String> {
        let mut least: BTreeMap<&str, (usize, &str)> = BTreeMap::new();
        for (id, member) in &spec.members {
            for topic in &member.subscribed {
                let held = count(result, id);
                let entry = least.entry(topic.as_str()).or_insert((held, id.as_str()));
                if held < entry.0 {
                    *entry = (held, id.as_str());
                }
            }
        }
        for (id, topics) in result {
            for topic in topics.keys() {
                if let Some(&(fewest, other)) = least.get(topic.as_str()) {
                    if fewest + 1 < count(result, id) {
                        return Err(format!(
                            "{topic} could move from {id} ({}) to {other} ({fewest})",
                            count(result, id)
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// Range's layout: per topic, its subscribers in id order hold consecutive runs from 0, the
    /// first `partitions % subscribers` one longer.
    fn check_range(spec: &AssignmentSpec, result: &BTreeMap<String, TopicPartitions>) -> Result<(), String> {
        for (topic, &count) in &spec.topics {
            let subscribers: Vec<&String> =
                spec.members.iter().filter(|(_, m)| m.subscribed.contains(topic)).map(|(id, _)| id).collect();
            let mut next = 0;
            for (index, id) in subscribers.iter().enumerate() {
                let len = count as usize / subscribers.len() + usize::from(index < count as usize % subscribers.len());
                let expected: Vec<u32> = (next..).take(len).collect();
                if partitions_of(result, id, topic) != expected {
                    return Err(format!("{id} {topic}: {:?} != {expected:?}", partitions_of(result, id, topic)));
                }
                next += len as u32;
            }
        }
        Ok(())
    }

    /// The members' current partitions each may keep: the topic exists and is subscribed, the
    /// partition exists, and no lower member id claims it too.
    fn valid_current(spec: &AssignmentSpec) -> BTreeMap<&str, BTreeSet<(&str, u32)>> {
        let mut claimed = BTreeSet::new();
        let mut valid = BTreeMap::new();
        for (id, member) in &spec.members {
            let mut mine = BTreeSet::new();
            for (topic, partitions) in &member.current {
                let Some(&count) = spec.topics.get(topic) else { continue };
                if !member.subscribed.contains(topic) {
                    continue;
                }
                for &partition in partitions.range(..count) {
                    if claimed.insert((topic.as_str(), partition)) {
                        mine.insert((topic.as_str(), partition));
                    }
                }
            }
            valid.insert(id.as_str(), mine);
        }
        valid
    }

    /// Same subscriptions: counts are floor or ceil of P / M, and the partitions kept are the most
    /// a balanced assignment can keep — `min(claimed, floor)` each, plus one for each of the
    /// `P % M` ceil quotas that goes to a member claiming at least ceil.
    fn check_homogeneous(spec: &AssignmentSpec, result: &BTreeMap<String, TopicPartitions>) -> Result<(), String> {
        let Some(first) = spec.members.values().next() else { return Ok(()) };
        let topics: BTreeSet<&String> = first.subscribed.iter().filter(|t| spec.topics.contains_key(*t)).collect();
        let total: usize = topics.iter().map(|t| spec.topics[*t] as usize).sum();
        let members = spec.members.len();
        let (floor, extra) = (total / members, total % members);
        let ceil = floor + usize::from(extra > 0);
        for id in spec.members.keys() {
            if !(floor..=ceil).contains(&count(result, id)) {
                return Err(format!("{id} holds {} not {floor}..={ceil}", count(result, id)));
            }
        }
        let valid = valid_current(spec);
        let at_ceil = valid.values().filter(|v| v.len() >= ceil).count();
        let expected = valid.values().map(|v| v.len().min(floor)).sum::<usize>() + extra.min(at_ceil);
        let kept: usize = valid
            .iter()
            .map(|(id, mine)| {
                mine.iter().filter(|(topic, p)| result[*id].get(*topic).is_some_and(|set| set.contains(p))).count()
            })
            .sum();
        if kept != expected {
            return Err(format!("kept {kept}, could keep {expected}"));
        }
        Ok(())
    }

    const TOPICS: [&str; 9] = ["t0", "t1", "t2", "t3", "t4", "t5", "t6", "t7", "ghost"];

    /// Up to 8 topics of 0..20 partitions (plus a `ghost` that never exists) and up to 12 members
    /// subscribing to random topics — or all to the same ones — with random current assignments
    /// that may name missing topics, missing partitions, unsubscribed topics and each other's.
    fn arb_spec() -> impl Strategy<Value = AssignmentSpec> {
        let topics = prop::collection::vec(0u32..20, 0..=8);
        let member = (0u16..512, prop::collection::vec((0usize..9, 0u32..24), 0..30));
        let members = prop::collection::btree_map(0u32..40, member, 0..=12);
        (topics, members, any::<bool>(), 0u16..512).prop_map(|(topics, members, homogeneous, shared)| {
            let names = |mask: u16| -> BTreeSet<String> {
                TOPICS.iter().enumerate().filter(|(i, _)| mask & (1 << i) != 0).map(|(_, t)| (*t).to_owned()).collect()
            };
            AssignmentSpec {
                topics: topics.iter().enumerate().map(|(i, &count)| (TOPICS[i].to_owned(), count)).collect(),
                members: members
                    .into_iter()
                    .map(|(id, (mask, current))| {
                        let mut assigned = TopicPartitions::new();
                        for (topic, partition) in current {
                            assigned.entry(TOPICS[topic].to_owned()).or_default().insert(partition);
                        }
                        let subscribed = names(if homogeneous { shared } else { mask });
                        (format!("m{id:02}"), MemberSpec { instance_id: None, subscribed, current: assigned })
                    })
                    .collect(),
            }
        })
    }

    fn is_homogeneous(spec: &AssignmentSpec) -> bool {
        let valid = |m: &MemberSpec| -> BTreeSet<String> {
            m.subscribed.iter().filter(|t| spec.topics.contains_key(*t)).cloned().collect()
        };
        let mut members = spec.members.values();
        let Some(first) = members.next() else { return true };
        let first = valid(first);
        members.all(|m| valid(m) == first)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1000))]

        #[test]
        fn uniform_is_valid_balanced_and_sticky(spec in arb_spec()) {
            let result = Assignor::Uniform.assign(&spec);
            prop_assert_eq!(check_valid(&spec, &result), Ok(()));
            prop_assert_eq!(check_balanced(&spec, &result), Ok(()));
            if is_homogeneous(&spec) {
                prop_assert_eq!(check_homogeneous(&spec, &result), Ok(()));
            }
            prop_assert_eq!(&Assignor::Uniform.assign(&spec), &result);
        }

        #[test]
        fn uniform_rerun_on_its_own_result_changes_nothing(spec in arb_spec()) {
            let first = Assignor::Uniform.assign(&spec);
            let mut again = spec.clone();
            for (id, member) in &mut again.members {
                member.current = first[id].clone();
            }
            prop_assert_eq!(Assignor::Uniform.assign(&again), first);
        }

        #[test]
        fn range_is_valid_and_laid_out_in_runs(spec in arb_spec()) {
            let result = Assignor::Range.assign(&spec);
            prop_assert_eq!(check_valid(&spec, &result), Ok(()));
            prop_assert_eq!(check_range(&spec, &result), Ok(()));
        }
    }
}
