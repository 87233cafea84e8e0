//! Share groups as a whole (docs/queues.md): their settings, kept in the metadata every node
//! holds.

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
