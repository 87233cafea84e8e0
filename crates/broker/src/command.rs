//! The body of a partition's Raft entry.
//!
//! * append: `version (2) ‖ 1 ‖ append time (i64) ‖ count (u32) ‖ (length (u32) ‖ batch)*`,
//!   little-endian. One or more record batches in Kafka's format, each exactly as the producer
//!   encoded it; its records occupy consecutive offsets in batch order. The append time (the
//!   leader's clock when it accepted the batches) sits in the fixed header so the state machine
//!   can index it without reading the batches.
//! * expire producers: `version ‖ 2 ‖ older than (i64 ms)`. Occupies no offsets. The leader
//!   proposes it so that every replica forgets idle producers at the same point of the log.
//! * trim: `version ‖ 3 ‖ new log start offset (u64)`. Occupies no offsets. The leader proposes
//!   it (retention, `DeleteRecords`) with the offset already chosen, so the state machine reads
//!   no clock and every replica moves its log start to the same offset at the same point.
//! * compact: `version ‖ 4 ‖ clean to (u64) ‖ tombstones before (u64) ‖ time (i64 ms) ‖
//!   delete retention (u64 ms)`. Occupies no offsets. The leader proposes it for a compacted
//!   topic with the offsets already chosen from its clock and the topic's settings (see
//!   [`crate::cleaning`]); every replica moves its cleaning point at the same place in the log.
//! * share: `version ‖ 5 ‖ ShareEntry` (protobuf, `proto/rill/partition.proto`). Occupies no
//!   offsets. A change of a share group's state on this partition, with the leader's decision
//!   and clock in it (see [`crate::share`]).
//!
//! Version 1 held protobuf-encoded batches; entries of that version are refused (data
//! directories from before the move to Kafka's format do not open, see `docs/storage.md`).

use bytes::{Buf, BufMut, Bytes, BytesMut};

const VERSION: u8 = 2;
const KIND_APPEND: u8 = 1;
const KIND_EXPIRE_PRODUCERS: u8 = 2;
const KIND_TRIM: u8 = 3;
const KIND_COMPACT: u8 = 4;
const KIND_SHARE: u8 = 5;
const COMPACT_LEN: usize = 2 + 8 + 8 + 8 + 8;
const HEADER_LEN: usize = 1 + 1 + 8 + 4;

/// Encodes an append of `batches`, appended by the leader at `append_time_ms`.
pub fn encode_append(append_time_ms: i64, batches: &[Bytes]) -> Bytes {
    let size: usize = batches.iter().map(|b| 4 + b.len()).sum();
    let mut out = BytesMut::with_capacity(HEADER_LEN + size);
    out.put_u8(VERSION);
    out.put_u8(KIND_APPEND);
    out.put_i64_le(append_time_ms);
    out.put_u32_le(batches.len() as u32);
    for b in batches {
        out.put_u32_le(b.len() as u32);
        out.put_slice(b);
    }
    out.freeze()
}

/// Encodes "forget producers whose last batch was appended before `older_than_ms`".
pub fn encode_expire_producers(older_than_ms: i64) -> Bytes {
    let mut out = BytesMut::with_capacity(10);
    out.put_u8(VERSION);
    out.put_u8(KIND_EXPIRE_PRODUCERS);
    out.put_i64_le(older_than_ms);
    out.freeze()
}

/// The `older_than_ms` of an expire-producers entry, if `body` is one.
pub fn expire_producers(body: &[u8]) -> Option<i64> {
    if body.len() < 10 || body[0] != VERSION || body[1] != KIND_EXPIRE_PRODUCERS {
        return None;
    }
    Some(i64::from_le_bytes(body[2..10].try_into().ok()?))
}

/// Encodes "records below `before` are deleted": the log start offset moves up to `before`
/// (never past the high watermark at the entry's place in the log, never back).
pub fn encode_trim(before: u64) -> Bytes {
    let mut out = BytesMut::with_capacity(10);
    out.put_u8(VERSION);
    out.put_u8(KIND_TRIM);
    out.put_u64_le(before);
    out.freeze()
}

/// The offset of a trim entry, if `body` is one.
pub fn trim(body: &[u8]) -> Option<u64> {
    if body.len() < 10 || body[0] != VERSION || body[1] != KIND_TRIM {
        return None;
    }
    Some(u64::from_le_bytes(body[2..10].try_into().ok()?))
}

/// A compact entry: the cleaning point the leader chose (see [`crate::cleaning`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compact {
    /// Records below this offset keep only the newest record per key.
    pub clean_to: u64,
    /// Tombstones below this offset (that are the newest record of their key) are removed.
    pub tombstones_before: u64,
    /// The leader's clock when it proposed the entry (ms since the epoch).
    pub time_ms: i64,
    /// The topic's `delete.retention.ms` then, so every replica prunes its cleaning history alike.
    pub delete_retention_ms: u64,
}

/// Encodes a compact entry.
pub fn encode_compact(c: &Compact) -> Bytes {
    let mut out = BytesMut::with_capacity(COMPACT_LEN);
    out.put_u8(VERSION);
    out.put_u8(KIND_COMPACT);
    out.put_u64_le(c.clean_to);
    out.put_u64_le(c.tombstones_before);
    out.put_i64_le(c.time_ms);
    out.put_u64_le(c.delete_retention_ms);
    out.freeze()
}

/// The cleaning point of a compact entry, if `body` is one.
pub fn compact(body: &[u8]) -> Option<Compact> {
    if body.len() < COMPACT_LEN || body[0] != VERSION || body[1] != KIND_COMPACT {
        return None;
    }
    let word = |at: usize| -> Option<[u8; 8]> { body.get(at..at + 8)?.try_into().ok() };
    Some(Compact {
        clean_to: u64::from_le_bytes(word(2)?),
        tombstones_before: u64::from_le_bytes(word(10)?),
        time_ms: i64::from_le_bytes(word(18)?),
        delete_retention_ms: u64::from_le_bytes(word(26)?),
    })
}

/// Encodes a share entry around `entry`, the encoded `ShareEntry` ([`crate::share::stored`]).
pub fn encode_share(entry: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(2 + entry.len());
    out.put_u8(VERSION);
    out.put_u8(KIND_SHARE);
    out.put_slice(entry);
    out.freeze()
}

/// The encoded `ShareEntry` of a share entry, if `body` is one.
pub fn share(body: &[u8]) -> Option<&[u8]> {
    match body {
        [VERSION, KIND_SHARE, entry @ ..] => Some(entry),
        _ => None,
    }
}

/// The append time in an entry's header, without reading its batches.
pub fn append_time(body: &[u8]) -> Option<i64> {
    if body.len() < HEADER_LEN || body[0] != VERSION || body[1] != KIND_APPEND {
        return None;
    }
    Some(i64::from_le_bytes(body[2..10].try_into().ok()?))
}

/// The batches of an append entry, as zero-copy slices of `body`.
pub fn decode_append(mut body: Bytes) -> Result<Vec<Bytes>, String> {
    if body.len() < HEADER_LEN {
        return Err("partition entry shorter than its header".into());
    }
    let version = body.get_u8();
    let kind = body.get_u8();
    if version != VERSION || kind != KIND_APPEND {
        return Err(format!("unknown partition entry version {version} kind {kind}"));
    }
    let _append_time = body.get_i64_le();
    let n = body.get_u32_le() as usize;
    // Every batch takes at least its four length bytes: bound the count by what is there.
    let mut out = Vec::with_capacity(n.min(body.len() / 4));
    for _ in 0..n {
        if body.len() < 4 {
            return Err("partition entry truncated".into());
        }
        let len = body.get_u32_le() as usize;
        if body.len() < len {
            return Err("partition entry batch runs past the end".into());
        }
        out.push(body.split_to(len));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use rill_records::{BatchBuilder, Compression, Record};

    use super::*;

    #[test]
    fn round_trips_batches_and_time() {
        let mk = |v: &'static str| {
            let mut b = BatchBuilder::new(Compression::None);
            b.push(Record { timestamp_ms: 5, value: Some(Bytes::from_static(v.as_bytes())), ..Record::default() })
                .unwrap();
            b.build().unwrap()
        };
        let batches = vec![mk("a"), mk("b")];
        let body = encode_append(1234, &batches);
        assert_eq!(append_time(&body), Some(1234));
        assert_eq!(decode_append(body.clone()).unwrap(), batches);
        assert!(decode_append(body.slice(..13)).is_err());
        assert!(decode_append(body.slice(..body.len() - 1)).is_err());
        assert!(decode_append(Bytes::from_static(&[9, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0])).is_err());
        let mut v1 = body.to_vec();
        v1[0] = 1;
        assert!(decode_append(v1.into()).is_err(), "version 1 entries are not read");
        assert_eq!(append_time(&[9, 9]), None);
        let expire = encode_expire_producers(77);
        assert_eq!(expire_producers(&expire), Some(77));
        assert_eq!(append_time(&expire), None);
        assert_eq!(expire_producers(&body), None);
        let trim_entry = encode_trim(u64::MAX - 1);
        assert_eq!(trim(&trim_entry), Some(u64::MAX - 1));
        assert_eq!((append_time(&trim_entry), expire_producers(&trim_entry)), (None, None));
        assert_eq!(trim(&expire), None);
        assert_eq!(trim(&trim_entry[..9]), None);
        let c = Compact { clean_to: 10, tombstones_before: 4, time_ms: -3, delete_retention_ms: u64::MAX };
        let compact_entry = encode_compact(&c);
        assert_eq!(compact(&compact_entry), Some(c));
        assert_eq!(
            (append_time(&compact_entry), trim(&compact_entry), expire_producers(&compact_entry)),
            (None, None, None)
        );
        assert_eq!(compact(&compact_entry[..COMPACT_LEN - 1]), None);
        assert_eq!(compact(&trim_entry), None);
    }
}
