//! Share groups as a whole (docs/queues.md): their settings, kept in the metadata every node
//! holds; and — from the partitions this node leads, where their state lives — where a group
//! stands (Redis' `XPENDING` view) and which groups there are. A client asks every node and
//! merges the answers.

use super::authz::ResourceType;
use super::{Answer, RequestContext, Service};
use crate::errors;

impl Service {
    /// Changes share group `group`'s settings: keys set, keys reset to their defaults, checked
    /// together. Answers every key with its effective value once this node has applied it.
    pub async fn alter_share_group_config(
        &self,
        ctx: &RequestContext,
        group: String,
        set: Vec<(String, String)>,
        reset: Vec<String>,
    ) -> Answer<Vec<GroupSetting>> {
        self.authorize(ctx, ResourceType::Group, &group)?;
        self.node.meta().check_alter_group_config(&group, &set, &reset).map_err(|e| errors::meta(&e))?;
        let command = rill_meta::MetaCommand::AlterGroupConfig { group: group.clone(), set, reset };
        let entries = match self.node.propose_meta(&command).await {
            Err(e) => return Err(errors::propose(&e)),
            Ok(rill_meta::MetaResult::Refused(e)) => return Err(errors::meta(&e)),
            Ok(rill_meta::MetaResult::GroupConfigUpdated { entries, .. }) => entries,
            Ok(other) => return Err(errors::unexpected_meta_answer(&other)),
        };
        let g = group.clone();
        let wanted = entries.clone();
        self.node
            .wait_for_meta(super::topics::META_WAIT, move |m| {
                m.group_configs.get(&g).map_or(wanted.is_empty(), |e| *e == wanted)
            })
            .await;
        Ok(group_settings(&entries))
    }

    /// Share group `group`'s settings: every key with its effective value.
    pub fn describe_share_group_config(&self, ctx: &RequestContext, group: &str) -> Answer<Vec<GroupSetting>> {
        self.authorize(ctx, ResourceType::Group, group)?;
        rill_meta::group_config::check_group_id(group).map_err(|e| errors::meta(&e))?;
        let meta = self.node.meta();
        Ok(group_settings(meta.group_configs.get(group).unwrap_or(&Default::default())))
    }
}

/// One setting of a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupSetting {
    /// The key.
    pub key: String,
    /// Its effective value.
    pub value: String,
    /// True when the group did not set it.
    pub default: bool,
}

fn group_settings(entries: &rill_meta::group_config::GroupConfigEntries) -> Vec<GroupSetting> {
    rill_meta::ShareGroupConfig::from_stored(entries)
        .entries()
        .into_iter()
        .map(|(key, value)| GroupSetting { default: !entries.contains_key(&key), key, value })
        .collect()
}

/// The most acquired records a describe lists per partition.
pub const MAX_DESCRIBED_RECORDS: u32 = 1_000;

/// An acquired record and who holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldRecord {
    /// Its offset.
    pub offset: u64,
    /// The member holding it.
    pub member: String,
    /// How often it was delivered, this time included.
    pub delivery_count: u16,
    /// When the lock runs out (the leader's clock).
    pub lock_until_ms: i64,
    /// When it was acquired.
    pub acquired_ms: i64,
}

/// Where a share group stands on one partition this node leads.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SharePartitionView {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: u32,
    /// The leader's term.
    pub leader_epoch: u64,
    /// Every record below it is done.
    pub start_offset: u64,
    /// One past the highest offset the group acquired.
    pub end_offset: u64,
    /// The partition's high watermark.
    pub high_watermark: u64,
    /// Records acquired.
    pub acquired: u32,
    /// Records delivered before and acquirable again.
    pub available: u32,
    /// Records waiting out a delay.
    pub delayed: u32,
    /// Records archived and waiting for their dead-letter copy.
    pub dead_letter_waiting: u32,
    /// When the oldest record not done (at the start offset) was appended; `None` when every
    /// record below the high watermark is done.
    pub oldest_pending_append_ms: Option<i64>,
    /// Acquired records, oldest lock first, up to the request's bound.
    pub held: Vec<HeldRecord>,
    /// The dead-letter topic and partition this partition's copies go to, once pinned.
    pub dead_letters_to: Option<(String, u32)>,
}

impl Service {
    /// Where share group `group` stands on each partition this node leads that it has read
    /// (and `ctx` may describe), with up to `max_records` acquired records each (at most
    /// [`MAX_DESCRIBED_RECORDS`]); the node's clock.
    pub fn describe_share_group(
        &self,
        ctx: &RequestContext,
        group: &str,
        max_records: u32,
    ) -> Answer<(i64, Vec<SharePartitionView>)> {
        self.authorize(ctx, ResourceType::Group, group)?;
        rill_meta::group_config::check_group_id(group).map_err(|e| errors::meta(&e))?;
        let now_ms = rill_rt::wall_clock_ms();
        let max_records = max_records.min(MAX_DESCRIBED_RECORDS) as usize;
        let mut views: Vec<SharePartitionView> = self
            .node
            .partitions()
            .into_iter()
            .filter(|p| self.lists(ctx, ResourceType::Topic, p.topic()))
            .filter_map(|p| {
                let term = p.leading_term()?;
                let state = p.share_state(group)?;
                Some(partition_view(&p, term, &state, max_records))
            })
            .collect();
        views.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
        Ok((now_ms, views))
    }

    /// The share groups that have read a partition this node leads (those `ctx` may describe),
    /// each with how many of those partitions.
    pub fn list_share_groups(&self, ctx: &RequestContext) -> Vec<(String, u32)> {
        let mut groups: std::collections::BTreeMap<String, u32> = std::collections::BTreeMap::new();
        for p in self.node.partitions() {
            if p.leading_term().is_none() {
                continue;
            }
            for g in p.share_groups() {
                *groups.entry(g).or_default() += 1;
            }
        }
        groups.into_iter().filter(|(g, _)| self.lists(ctx, ResourceType::Group, g)).collect()
    }
}

/// The view of `state` (a group's state on `p`, led in `term`).
fn partition_view(
    p: &rill_broker::Partition,
    term: u64,
    state: &rill_broker::share::SharePartition,
    max_records: usize,
) -> SharePartitionView {
    use rill_broker::share::InFlight;
    let high_watermark = p.high_watermark();
    let mut view = SharePartitionView {
        topic: p.topic().to_string(),
        partition: p.partition(),
        leader_epoch: term,
        start_offset: state.start_offset(),
        end_offset: state.end_offset(),
        high_watermark,
        dead_letter_waiting: state.dead_letters().0.len() as u32,
        dead_letters_to: state.dead_letter_writer().map(|w| (w.topic.clone(), w.partition)),
        ..Default::default()
    };
    for (offset, t) in state.in_flight() {
        match &t.state {
            InFlight::Acquired { member, lock_until_ms } => {
                view.acquired += 1;
                view.held.push(HeldRecord {
                    offset: *offset,
                    member: member.clone(),
                    delivery_count: t.delivery_count,
                    lock_until_ms: *lock_until_ms,
                    acquired_ms: t.last_delivery_ms,
                });
            }
            InFlight::Available => view.available += 1,
            InFlight::Delayed { .. } => view.delayed += 1,
            InFlight::DeadLettering(_) => {}
        }
    }
    view.held.sort_by_key(|h| (h.lock_until_ms, h.offset));
    view.held.truncate(max_records);
    if view.start_offset < high_watermark {
        // The batch holding the start offset: its append time is the oldest pending record's.
        view.oldest_pending_append_ms = p
            .fetch(view.start_offset as i64, 1, rill_broker::Isolation::ReadUncommitted)
            .ok()
            .and_then(|f| f.batches.first().map(|b| b.append_time_ms));
    }
    view
}
