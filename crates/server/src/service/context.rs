//! Who is asking, from where, through which listener: the [`RequestContext`] every service
//! function takes.
//!
//! A listener builds one per request (gRPC: from the request's peer address and metadata) or per
//! connection (a Kafka connection, once it has authenticated), and never changes it while the
//! request runs. The service layer reads the principal for its authorization decisions, the
//! client id and host for what it records about a caller (a consumer group member's description),
//! and the listener's rule for what the request needs.

use std::fmt;

use super::authz::Need;

/// Who is asking. Every caller is [`Principal::Anonymous`] until clients authenticate (TLS client
/// certificates, SASL); then a listener names the authenticated user.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Principal {
    /// A caller that did not authenticate.
    Anonymous,
    /// An authenticated user, `User:<name>` as Kafka writes principals.
    User(String),
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // Kafka's name for the unauthenticated principal.
            Self::Anonymous => f.write_str("User:ANONYMOUS"),
            Self::User(name) => write!(f, "User:{name}"),
        }
    }
}

/// The listener a request arrived on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Listener {
    /// The gRPC client listener (`listen`).
    Grpc,
    /// The Kafka wire-protocol listener (`kafka-listen`).
    Kafka,
}

impl Listener {
    /// Its name in logs and answers.
    pub fn name(self) -> &'static str {
        match self {
            Self::Grpc => "grpc",
            Self::Kafka => "kafka",
        }
    }
}

/// One request's caller and what the listener's rule table says it needs.
#[derive(Debug, Clone)]
pub struct RequestContext {
    /// Who is asking.
    pub principal: Principal,
    /// The client's own name for itself (Kafka's `client.id`; gRPC's `rill-client-id` header);
    /// empty when it gave none.
    pub client_id: String,
    /// The address the request came from (an IP address, no port); empty when unknown.
    pub client_host: String,
    /// The listener it arrived on.
    pub listener: Listener,
    /// The (resource type, operation) pairs this request needs, from its listener's rule for it.
    /// The service layer decides each resource the request touches against them.
    pub needs: &'static [Need],
}

impl RequestContext {
    /// An anonymous caller on `listener` whose request needs `needs`.
    pub fn anonymous(listener: Listener, needs: &'static [Need]) -> Self {
        Self { principal: Principal::Anonymous, client_id: String::new(), client_host: String::new(), listener, needs }
    }
}

/// Longest client id a request context keeps; a longer one is cut (client ids are short names,
/// and a group member's is stored with it).
pub const MAX_CLIENT_ID_BYTES: usize = 255;

/// The client id a request context keeps of what the client sent: at most
/// [`MAX_CLIENT_ID_BYTES`], cut at a character boundary. Every listener keeps ids by this rule.
pub fn kept_client_id(sent: &str) -> String {
    let mut end = sent.len().min(MAX_CLIENT_ID_BYTES);
    while !sent.is_char_boundary(end) {
        end -= 1;
    }
    sent[..end].to_string()
}
