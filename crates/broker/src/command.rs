//! The body of a partition's Raft entry.
//!
//! `version ‖ kind ‖ count ‖ (length ‖ RecordBatch)*`, little-endian. An entry carries one or more
//! record batches, each exactly as the producer encoded it (plus the leader's append time); its
//! records occupy consecutive offsets in batch order.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use prost::Message;
use rill_proto::common::RecordBatch;

const VERSION: u8 = 1;
const KIND_APPEND: u8 = 1;

/// Encodes an append of `batches`.
pub fn encode_append(batches: &[RecordBatch]) -> Bytes {
    let size: usize = batches.iter().map(|b| 4 + b.encoded_len()).sum();
    let mut out = BytesMut::with_capacity(2 + 4 + size);
    out.put_u8(VERSION);
    out.put_u8(KIND_APPEND);
    out.put_u32_le(batches.len() as u32);
    for b in batches {
        out.put_u32_le(b.encoded_len() as u32);
        // Encoding into a buffer with enough capacity cannot fail.
        let _ = b.encode(&mut out);
    }
    out.freeze()
}

/// Decodes the batches of an append entry. Record bytes are zero-copy slices of `body`.
pub fn decode_append(mut body: Bytes) -> Result<Vec<RecordBatch>, String> {
    if body.len() < 6 {
        return Err("partition entry shorter than its header".into());
    }
    let version = body.get_u8();
    let kind = body.get_u8();
    if version != VERSION || kind != KIND_APPEND {
        return Err(format!("unknown partition entry version {version} kind {kind}"));
    }
    let n = body.get_u32_le() as usize;
    let mut out = Vec::with_capacity(n.min(1024));
    for _ in 0..n {
        if body.len() < 4 {
            return Err("partition entry truncated".into());
        }
        let len = body.get_u32_le() as usize;
        if body.len() < len {
            return Err("partition entry batch runs past the end".into());
        }
        let batch = RecordBatch::decode(body.split_to(len)).map_err(|e| e.to_string())?;
        out.push(batch);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use rill_proto::batch;
    use rill_proto::common::{Compression, Record};

    use super::*;

    #[test]
    fn round_trips_batches() {
        let mk = |v: &'static str| {
            batch::build(
                vec![Record { timestamp_ms: 5, key: None, value: Bytes::from_static(v.as_bytes()), headers: vec![] }],
                Compression::None,
            )
            .unwrap()
        };
        let batches = vec![mk("a"), mk("b")];
        let decoded = decode_append(encode_append(&batches)).unwrap();
        assert_eq!(decoded, batches);
        assert!(decode_append(encode_append(&batches).slice(..9)).is_err());
        assert!(decode_append(Bytes::from_static(&[9, 9, 0, 0, 0, 0])).is_err());
    }
}
