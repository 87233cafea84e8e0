//! Key layout. Every key starts with the big-endian group id, so one group's keys are contiguous
//! and a whole group can be removed with one range delete.
//!
//! | keyspace  | key                         | value                        |
//! |-----------|-----------------------------|------------------------------|
//! | RaftLog   | group ‖ index               | encoded entry ([`crate::codec`]) |
//! | RaftMeta  | group ‖ `v`                 | vote                         |
//! | RaftMeta  | group ‖ `c`                 | committed log id             |
//! | RaftMeta  | group ‖ `p`                 | last purged log id           |
//! | RaftMeta  | group ‖ `i`                 | an installation in progress  |
//! | RaftLog   | staging(group) ‖ index      | entries of a snapshot being received |
//! | LogIndex  | group ‖ position            | log index of the entry starting at that position |
//! | State     | group ‖ `s`                 | latest state machine snapshot |

use crate::types::GroupId;

/// `group ‖ n`, both big-endian.
pub fn group_u64(group: GroupId, n: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&group.to_be_bytes());
    k[8..].copy_from_slice(&n.to_be_bytes());
    k
}

/// `group ‖ tag`.
pub fn group_tag(group: GroupId, tag: u8) -> [u8; 9] {
    let mut k = [0u8; 9];
    k[..8].copy_from_slice(&group.to_be_bytes());
    k[8] = tag;
    k
}

/// The first key of `group` (inclusive).
pub fn group_start(group: GroupId) -> [u8; 8] {
    group.to_be_bytes()
}

/// The first key after every key of `group` (exclusive). Group ids never reach `u64::MAX`.
pub fn group_end(group: GroupId) -> [u8; 8] {
    group.saturating_add(1).to_be_bytes()
}

/// The group id under which group `group` stages the entries of a snapshot it receives: the
/// same id with the top bit set (group ids never use it), so staged entries sit in the Raft log
/// keyspace (values in the value log) without mixing with the log.
pub fn staging(group: GroupId) -> GroupId {
    group | STAGING_BIT
}

/// The bit that marks a staging group id.
pub const STAGING_BIT: u64 = 1 << 63;

/// The `u64` suffix of a `group ‖ n` key.
pub fn suffix_u64(key: &[u8]) -> Option<u64> {
    let tail: [u8; 8] = key.get(8..16)?.try_into().ok()?;
    Some(u64::from_be_bytes(tail))
}

/// Vote tag.
pub const VOTE: u8 = b'v';
/// Committed log id tag.
pub const COMMITTED: u8 = b'c';
/// Last purged log id tag.
pub const PURGED: u8 = b'p';
/// Installation marker tag.
pub const INSTALLING: u8 = b'i';
/// Snapshot tag.
pub const SNAPSHOT: u8 = b's';
