//! Classic consumer groups (Kafka's JoinGroup / SyncGroup / Heartbeat / LeaveGroup), in which the
//! group's leader member computes the assignment and the coordinator hands it out: each request
//! checked, authorized (Read on the group), and decided by the classic engine of the group's
//! coordinator shard ([`crate::coordinators::classic`]). The Kafka listener serves them as
//! Kafka's APIs; the gRPC listener serves them too, so that a gRPC client that assigns
//! partitions itself can use them and the simulation can drive them under faults.

use std::time::Duration;

use rill_coordinator::groups::classic::{Heartbeat, JoinAnswer, JoinGroup, LeaveGroup, Left, SyncAnswer, SyncGroup};
use rill_coordinator::CoordinatorError;

use super::authz::ResourceType;
use super::limits;
use super::routing::group_coordinator;
use super::{Answer, RequestContext, RequestError, Service};
use crate::coordinators::GroupShard;
use crate::errors;

/// Longest a JoinGroup's rebalance timeout may hold its answer, beyond which the engine has
/// answered it anyway: a bound on how long a listener waits.
const MAX_JOIN_WAIT: Duration = Duration::from_secs(30 * 60);

/// What a JoinGroup gets.
#[derive(Debug, Clone, PartialEq)]
pub enum JoinOutcome {
    /// It joined the generation.
    Joined(JoinAnswer),
    /// It must join again with `member_id` (KIP-394: a new member is first given its id, so a
    /// client that times out and retries does not leave a defunct member behind each time);
    /// `refusal` is the `MEMBER_ID_REQUIRED` to answer with it.
    MemberIdRequired {
        /// The id to join with.
        member_id: String,
        /// The refusal carrying the code and message.
        refusal: crate::errors::Refusal,
    },
}

impl Service {
    /// The group coordinator shard of `group_id`, once the request may use the group (Read).
    fn classic_shard(&self, ctx: &RequestContext, group_id: &str) -> Answer<std::sync::Arc<GroupShard>> {
        self.authorize(ctx, ResourceType::Group, group_id)?;
        let coordinator = group_coordinator(&self.node, group_id)?;
        self.coordinators.groups().of(&coordinator)
    }

    /// Joins a classic group's next generation (the client id and host from the context):
    /// answered once the join phase completes — or at once with the member id to join with, or
    /// an error.
    pub async fn join_group(&self, ctx: &RequestContext, mut req: JoinGroup) -> Answer<JoinOutcome> {
        let shard = self.classic_shard(ctx, &req.group_id)?;
        req.client_id = ctx.client_id.clone();
        req.client_host = ctx.client_host.clone();
        let joined = rill_rt::timeout(MAX_JOIN_WAIT, shard.classic().join(&req)).await.unwrap_or_else(|_| {
            Err(CoordinatorError::NotAvailable("the join phase did not complete in time; join again".into()))
        });
        match joined {
            Ok(answer) => Ok(JoinOutcome::Joined(answer)),
            Err(CoordinatorError::MemberIdRequired { group_id, member_id }) => {
                let e = CoordinatorError::MemberIdRequired { group_id, member_id: member_id.clone() };
                Ok(JoinOutcome::MemberIdRequired { member_id, refusal: errors::coordinator(&e) })
            }
            Err(e) => Err(errors::coordinator(&e)),
        }
    }

    /// Takes a member's assignment for its generation (the leader sends every member's),
    /// answered once the generation's assignments are stored.
    pub async fn sync_group(&self, ctx: &RequestContext, req: SyncGroup) -> Answer<SyncAnswer> {
        let shard = self.classic_shard(ctx, &req.group_id)?;
        shard.classic().sync(&req).await.map_err(|e| errors::coordinator(&e))
    }

    /// A classic member's heartbeat: `REBALANCE_IN_PROGRESS` when it must rejoin.
    pub fn group_heartbeat(&self, ctx: &RequestContext, req: &Heartbeat) -> Answer<()> {
        let shard = self.classic_shard(ctx, &req.group_id)?;
        shard.classic().heartbeat(req).map_err(|e| errors::coordinator(&e))
    }

    /// Removes members from a classic group, each answered on its own.
    pub fn leave_group(&self, ctx: &RequestContext, req: &LeaveGroup) -> Result<Answer<Vec<Left>>, RequestError> {
        limits::check_counts("LeaveGroup", 0, req.members.len())?;
        let left = self
            .classic_shard(ctx, &req.group_id)
            .and_then(|shard| shard.classic().leave(req).map_err(|e| errors::coordinator(&e)));
        Ok(left)
    }
}
