//! Encodings: stored log entries, and Raft messages on the wire.
//!
//! A stored entry is `version ‖ base position ‖ units ‖ header length ‖ header ‖ body`. The body
//! (the state machine command — for a partition, its record batches) is stored raw after a small
//! header, so reading an entry back hands out a slice of the stored bytes without copying or
//! re-decoding it.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use openraft::EntryPayload;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::types::{Entry, LogId, Membership, Payload};

const ENTRY_FORMAT_V1: u8 = 1;
const FIXED_HEADER_LEN: usize = 1 + 8 + 4 + 4;

#[derive(Serialize, Deserialize)]
enum Header {
    Blank(LogId),
    Normal(LogId),
    Membership(LogId, Membership),
}

/// An entry as stored, with the position it starts at.
#[derive(Debug, Clone)]
pub struct StoredEntry {
    /// First position the entry occupies (positions are dense across the group's log).
    pub base: u64,
    /// The entry.
    pub entry: Entry,
}

impl StoredEntry {
    /// Positions the entry occupies (0 for blank and membership entries).
    pub fn units(&self) -> u32 {
        match &self.entry.payload {
            EntryPayload::Normal(p) => p.units,
            _ => 0,
        }
    }

    /// The position after this entry.
    pub fn end(&self) -> u64 {
        self.base + u64::from(self.units())
    }
}

/// Encodes `entry` starting at position `base`.
pub fn encode_entry(base: u64, entry: &Entry) -> Result<Bytes, String> {
    let (header, units, body) = match &entry.payload {
        EntryPayload::Blank => (Header::Blank(entry.log_id), 0, Bytes::new()),
        EntryPayload::Normal(p) => (Header::Normal(entry.log_id), p.units, p.body.clone()),
        EntryPayload::Membership(m) => (Header::Membership(entry.log_id, m.clone()), 0, Bytes::new()),
    };
    let header = bincode::serialize(&header).map_err(|e| e.to_string())?;
    let header_len = u32::try_from(header.len()).map_err(|_| "entry header too large".to_string())?;
    let mut out = BytesMut::with_capacity(FIXED_HEADER_LEN + header.len() + body.len());
    out.put_u8(ENTRY_FORMAT_V1);
    out.put_u64_le(base);
    out.put_u32_le(units);
    out.put_u32_le(header_len);
    out.put_slice(&header);
    out.put_slice(&body);
    Ok(out.freeze())
}

/// Decodes a stored entry. The body is a zero-copy slice of `bytes`.
pub fn decode_entry(mut bytes: Bytes) -> Result<StoredEntry, String> {
    if bytes.len() < FIXED_HEADER_LEN {
        return Err(format!("entry of {} bytes is shorter than its fixed header", bytes.len()));
    }
    let version = bytes.get_u8();
    if version != ENTRY_FORMAT_V1 {
        return Err(format!("unknown entry format version {version}"));
    }
    let base = bytes.get_u64_le();
    let units = bytes.get_u32_le();
    let header_len = bytes.get_u32_le() as usize;
    if bytes.len() < header_len {
        return Err("entry header runs past the end".into());
    }
    let header_bytes = bytes.split_to(header_len);
    let header: Header = bincode::deserialize(&header_bytes).map_err(|e| e.to_string())?;
    let entry = match header {
        Header::Blank(log_id) => Entry { log_id, payload: EntryPayload::Blank },
        Header::Normal(log_id) => {
            Entry { log_id, payload: EntryPayload::Normal(Payload { units, body: bytes, proposal: 0 }) }
        }
        Header::Membership(log_id, m) => Entry { log_id, payload: EntryPayload::Membership(m) },
    };
    Ok(StoredEntry { base, entry })
}

/// Serializes a Raft message (request or response) for the transport.
pub fn encode_message<T: Serialize>(msg: &T) -> Result<Bytes, String> {
    bincode::serialize(msg).map(Bytes::from).map_err(|e| e.to_string())
}

/// Deserializes a Raft message from the transport.
pub fn decode_message<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    bincode::deserialize(bytes).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use openraft::{BasicNode, CommittedLeaderId};

    use super::*;

    fn log_id(term: u64, index: u64) -> LogId {
        LogId::new(CommittedLeaderId::new(term, 1), index)
    }

    #[test]
    fn round_trips_every_entry_kind() {
        let normal = Entry {
            log_id: log_id(3, 9),
            payload: EntryPayload::Normal(Payload { units: 5, body: Bytes::from_static(b"records"), proposal: 77 }),
        };
        let decoded = decode_entry(encode_entry(40, &normal).unwrap()).unwrap();
        assert_eq!(decoded.base, 40);
        assert_eq!(decoded.end(), 45);
        assert_eq!(decoded.entry.log_id, normal.log_id);
        match decoded.entry.payload {
            // The proposal tag is leader-local and not stored.
            EntryPayload::Normal(p) => {
                assert_eq!(p, Payload { units: 5, body: Bytes::from_static(b"records"), proposal: 0 })
            }
            other => panic!("unexpected {other:?}"),
        }

        let blank = Entry { log_id: log_id(4, 10), payload: EntryPayload::Blank };
        let d = decode_entry(encode_entry(45, &blank).unwrap()).unwrap();
        assert_eq!((d.base, d.units()), (45, 0));

        let members: BTreeSet<u64> = [1, 2, 3].into();
        let nodes = members
            .iter()
            .map(|id| (*id, BasicNode::new(format!("n{id}"))))
            .collect::<std::collections::BTreeMap<_, _>>();
        let m = Membership::new(vec![members], nodes);
        let me = Entry { log_id: log_id(1, 0), payload: EntryPayload::Membership(m.clone()) };
        match decode_entry(encode_entry(0, &me).unwrap()).unwrap().entry.payload {
            EntryPayload::Membership(got) => assert_eq!(got, m),
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn rejects_truncated_and_unknown_versions() {
        let e = Entry { log_id: log_id(1, 1), payload: EntryPayload::Blank };
        let good = encode_entry(0, &e).unwrap();
        assert!(decode_entry(good.slice(..5)).is_err());
        let mut bad = good.to_vec();
        bad[0] = 99;
        assert!(decode_entry(bad.into()).is_err());
        let mut short = good.to_vec();
        short.truncate(FIXED_HEADER_LEN + 1);
        assert!(decode_entry(short.into()).is_err());
    }
}
