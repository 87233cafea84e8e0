//! The service layer: every public operation of a Rill node, once, for every listener.
//!
//! ```text
//!  gRPC listener (api/) ──┐ decode                               encode ┌─► gRPC answer
//!  (Kafka listener) ──────┼─► RequestContext + neutral input ─► Service ─┤
//!                         │   {principal, client id, host,       fn      └─► per-entry Refusal,
//!                         │    listener, the rule's needs}        │           or RequestError
//!                         ▼                                       ▼
//!              rule table per listener          authorization per resource, request limits,
//!              (what each request needs)        metadata checks, long polls, coordinator calls
//!                                                          │
//!                           Node (replicas, metadata) · broker partitions · coordinators
//! ```
//!
//! A listener decodes a request into this layer's plain Rust inputs, calls one [`Service`]
//! function with the request's [`RequestContext`], and encodes what it returns. Nothing that
//! decides — a metadata check, a long poll, a version or epoch parsed, an authorization decision,
//! a coordinator's side effect — is left to a listener, so a second protocol serves the same
//! semantics by translating alone. A listener differs only in wire shape: gRPC drops a
//! `read_committed` fetch's aborted batches on the server, where Kafka clients receive the list.
//!
//! * [`context`]: [`RequestContext`] and [`Principal`] — who asks, from where, through which
//!   listener, needing what.
//! * [`authz`]: the authorization model (resources, operations, the [`authz::Authorizer`]) and
//!   decisions per resource.
//! * [`limits`]: how many entries one request may name, and which repeats are refused.
//! * [`checks`]: the request checks that need no running node (also what the fuzz targets call).
//! * [`routing`]: the replica or coordinator partition a request names, on this node.
//! * [`records`]: produce (plain, idempotent, transactional with its verification), fetch (long
//!   poll, response budget, isolation), list offsets, producer ids.
//! * [`topics`]: the topic admin calls, records deletion, the cluster's description and
//!   membership, metadata and finding coordinators.
//! * [`groups`]: consumer groups — heartbeats, offsets (committed plainly or in a transaction),
//!   descriptions, listings, deletions.
//! * [`classic`]: classic groups — JoinGroup, SyncGroup, Heartbeat, LeaveGroup.
//! * [`transactions`]: adding to, ending, describing, listing and aborting transactions.
//! * [`share`]: share groups' records — fetches that acquire records with the acknowledgements
//!   they carry, and acknowledgements.
//! * [`share_admin`]: share groups as a whole — their settings, where a group stands on the
//!   partitions this node leads, and which groups there are.
//! * [`status`]: live partition state gathered from the replicas.
//! * [`internal`]: what the internal listener serves other nodes — writing transaction markers,
//!   answering verification asks.
//!
//! Coordinator calls go to the shard of the coordinator partition this node leads
//! (`crate::coordinators`), which owns that coordinator's leader-local state; a transactional
//! write is verified with its coordinator through the node's one `crate::txn_verify::Verifier`.
//!
//! Outcomes are per entry where the operation is per entry ([`Answers`]: a [`Refusal`] for an
//! entry not served); a [`RequestError`] refuses a whole request.

pub mod authz;
pub mod checks;
pub mod classic;
pub mod context;
pub mod groups;
pub mod internal;
pub mod limits;
pub mod records;
pub mod routing;
pub mod share;
pub mod share_admin;
pub mod status;
pub mod topics;
pub mod transactions;

use std::sync::Arc;

use rill_raft::NodeId;

pub use authz::{Authorization, Denied, ResourceType};
pub use context::{Listener, Principal, RequestContext};

use crate::coordinators::Coordinators;
pub use crate::errors::Refusal;
use crate::node::Node;
use crate::txn_verify::Verifier;

/// A whole request refused: nothing of it was done.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RequestError {
    /// A field no per-entry answer can carry is malformed.
    #[error("{0}")]
    Invalid(String),
    /// The request names more entries than one request may ([`limits`]).
    #[error("{request} names {count} {what}; one request may name at most {max}: split it")]
    TooManyEntries {
        /// The request's name.
        request: &'static str,
        /// What it names too many of.
        what: &'static str,
        /// How many it names.
        count: usize,
        /// The bound.
        max: usize,
    },
    /// The caller may not use a resource the whole answer is about, and the answer has no place
    /// for a per-entry code (describing the cluster).
    #[error(transparent)]
    Denied(Denied),
    /// This node's storage failed: it knows no current leaders, so clients must ask another node.
    #[error("node {node}'s storage failed: {reason}")]
    StorageFailed {
        /// This node.
        node: NodeId,
        /// What failed.
        reason: String,
    },
}

/// One entry's answer: what was done, or why not.
pub type Answer<T> = Result<T, Refusal>;

/// A per-partition operation's answers, topic by topic in the order asked.
pub type Answers<T> = Vec<TopicAnswers<T>>;

/// The answers for one topic of a per-partition operation, partitions in the order asked.
#[derive(Debug, Clone, PartialEq)]
pub struct TopicAnswers<T> {
    /// The topic, as the request named it.
    pub topic: String,
    /// Each partition asked, with its answer.
    pub partitions: Vec<(u32, Answer<T>)>,
}

/// The service layer of one node: its public operations over the node's replicas, metadata and
/// coordinators, deciding authorization with one authorizer. Cheap to clone; every listener of
/// the node shares one.
#[derive(Clone)]
pub struct Service {
    node: Arc<Node>,
    coordinators: Arc<Coordinators>,
    verifier: Arc<Verifier>,
    authz: Authorization,
}

impl Service {
    /// The service of `node`, whose coordinator shards are `coordinators`, deciding with
    /// `authz`. One per node: every listener of the node shares it.
    pub fn new(node: Arc<Node>, coordinators: Arc<Coordinators>, authz: Authorization) -> Self {
        let verifier = Verifier::new(node.clone(), coordinators.clone());
        Self { node, coordinators, verifier, authz }
    }

    /// The same service deciding with `authz` instead (tests).
    #[cfg(test)]
    pub(crate) fn with_authorization(&self, authz: Authorization) -> Self {
        Self { authz, ..self.clone() }
    }

    /// The node it serves.
    pub fn node(&self) -> &Arc<Node> {
        &self.node
    }

    /// The leader of `topic`/`partition` and the term it leads in, as this node knows them
    /// (no request is sent): what a listener hints to a client it refuses as not the leader.
    pub fn partition_leadership(&self, topic: &str, partition: u32) -> Option<(NodeId, u64)> {
        let group = self.node.meta().topics.get(topic)?.partitions.get(partition as usize)?.group;
        self.node.leadership_of(group)
    }

    /// `Ok` when the request of `ctx` may touch `name` of type `kind`; else the refusal that
    /// answers the entries about it.
    fn authorize(&self, ctx: &RequestContext, kind: ResourceType, name: &str) -> Answer<()> {
        self.authz.check(ctx, kind, name).map_err(|e| e.refusal())
    }

    /// True when a listing answered to `ctx` may show `name` of type `kind`.
    fn lists(&self, ctx: &RequestContext, kind: ResourceType, name: &str) -> bool {
        self.authz.lists(ctx, kind, name)
    }

    /// Refuses the whole request unless it may touch `name` of type `kind` (for answers that
    /// have no place for a per-entry code).
    fn authorize_request(&self, ctx: &RequestContext, kind: ResourceType, name: &str) -> Result<(), RequestError> {
        self.authz.check(ctx, kind, name).map_err(RequestError::Denied)
    }
}
#[cfg(test)]
pub(crate) mod tests;
#[cfg(test)]
mod tests_share;
