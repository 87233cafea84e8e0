//! The value log's record format: one [`WriteBatch`], framed and checksummed.
//!
//! ```text
//! record := body_len: u32 LE | crc32c(body): u32 LE | body
//! body   := op_count: u32 LE | op*
//! op     := kind: u8 | keyspace: u8 | key_len: u32 LE | key
//!           | (put)          value_len: u32 LE | value
//!           | (delete_range) end_len: u32 LE | end
//! ```
//!
//! A record is written with one `write` call and is valid only if its whole body is present
//! and matches its checksum, so a torn write at the end of the log is recognised and dropped.
//! Values are stored verbatim, so a [`ValuePointer`](crate::vlog::ValuePointer) can address
//! one inside its record and read it back with a single positioned read.

use bytes::Bytes;
use rill_storage::{Error, Keyspace, Result, WriteBatch, WriteOp};

/// Bytes before a record's body: its length and checksum.
pub const HEADER_BYTES: u64 = 8;

/// The shortest body `encode` writes (the op count of an empty batch).
pub const MIN_BODY_BYTES: u64 = 4;

const PUT: u8 = 1;
const DELETE: u8 = 2;
const DELETE_RANGE: u8 = 3;

/// A batch encoded as a whole record (header included), with where each put's value sits in it.
pub struct EncodedBatch {
    /// The record: header, then body.
    pub record: Vec<u8>,
    /// For every op of the batch, in order: the offset of its value from the record's start
    /// (puts only).
    pub value_offsets: Vec<Option<u64>>,
}

fn len_u32(len: usize, what: &str) -> Result<u32> {
    u32::try_from(len).map_err(|_| Error::Io(format!("{what} of {len} bytes exceeds the value log's 4 GiB limit")))
}

fn keyspace_code(ks: Keyspace) -> u8 {
    // `ordinal` is stable (it fixes `Keyspace::ALL`'s order) and below 256.
    ks.ordinal() as u8
}

fn keyspace_of(code: u8) -> Result<Keyspace> {
    Keyspace::ALL
        .get(usize::from(code))
        .copied()
        .ok_or_else(|| Error::Corruption(format!("value log record names unknown keyspace {code}")))
}

/// Encodes `batch` as a record.
pub fn encode(batch: &WriteBatch) -> Result<EncodedBatch> {
    let ops = batch.ops();
    let mut body = Vec::with_capacity(HEADER_BYTES as usize + 4 + batch.size_bytes() + ops.len() * 14);
    let mut value_offsets = Vec::with_capacity(ops.len());
    body.extend_from_slice(&[0; HEADER_BYTES as usize]);
    body.extend_from_slice(&len_u32(ops.len(), "a batch")?.to_le_bytes());
    let field = |body: &mut Vec<u8>, bytes: &[u8], what: &str| -> Result<u64> {
        body.extend_from_slice(&len_u32(bytes.len(), what)?.to_le_bytes());
        let at = body.len() as u64;
        body.extend_from_slice(bytes);
        Ok(at)
    };
    for op in ops {
        match op {
            WriteOp::Put { keyspace, key, value } => {
                body.extend_from_slice(&[PUT, keyspace_code(*keyspace)]);
                field(&mut body, key, "a key")?;
                value_offsets.push(Some(field(&mut body, value, "a value")?));
            }
            WriteOp::Delete { keyspace, key } => {
                body.extend_from_slice(&[DELETE, keyspace_code(*keyspace)]);
                field(&mut body, key, "a key")?;
                value_offsets.push(None);
            }
            WriteOp::DeleteRange { keyspace, start, end } => {
                body.extend_from_slice(&[DELETE_RANGE, keyspace_code(*keyspace)]);
                field(&mut body, start, "a key")?;
                field(&mut body, end, "a key")?;
                value_offsets.push(None);
            }
        }
    }
    let body_len = len_u32(body.len() - HEADER_BYTES as usize, "a batch")?;
    let crc = crc32c::crc32c(&body[HEADER_BYTES as usize..]);
    body[..4].copy_from_slice(&body_len.to_le_bytes());
    body[4..HEADER_BYTES as usize].copy_from_slice(&crc.to_le_bytes());
    Ok(EncodedBatch { record: body, value_offsets })
}

/// Parses a header into the body length and checksum.
pub fn parse_header(h: &[u8; HEADER_BYTES as usize]) -> (u32, u32) {
    let word = |i: usize| u32::from_le_bytes([h[i], h[i + 1], h[i + 2], h[i + 3]]);
    (word(0), word(4))
}

/// True when `body` matches checksum `crc`.
pub fn body_is_intact(body: &[u8], crc: u32) -> bool {
    crc32c::crc32c(body) == crc
}

/// Decodes a checksummed body back into its batch and the offsets of its values from the
/// record's start.
pub fn decode(body: &Bytes) -> Result<EncodedOps> {
    let mut r = Reader { body, at: 0 };
    let count = r.u32()?;
    let mut batch = WriteBatch::new();
    let mut value_offsets = Vec::new();
    for _ in 0..count {
        let kind = r.u8()?;
        let keyspace = keyspace_of(r.u8()?)?;
        let (_, key) = r.field()?;
        match kind {
            PUT => {
                let (at, value) = r.field()?;
                batch.put(keyspace, key.to_vec(), value);
                value_offsets.push(Some(HEADER_BYTES + at));
            }
            DELETE => {
                batch.delete(keyspace, key.to_vec());
                value_offsets.push(None);
            }
            DELETE_RANGE => {
                let (_, end) = r.field()?;
                batch.delete_range(keyspace, key.to_vec(), end.to_vec());
                value_offsets.push(None);
            }
            other => return Err(Error::Corruption(format!("value log record has unknown op kind {other}"))),
        }
    }
    if r.at != body.len() {
        return Err(Error::Corruption("value log record has trailing bytes".into()));
    }
    Ok(EncodedOps { batch, value_offsets })
}

/// Where [`read_op`] reads a record's ops from: a stream over a segment file, so a record is
/// walked without holding its body (see [`crate::vlog::SegmentCursor`]).
pub trait OpSource {
    /// Fills `buf` from the current position, moving past it.
    fn read_exact(&mut self, buf: &mut [u8]) -> Result<()>;
    /// Moves past `n` bytes without reading them.
    fn skip(&mut self, n: u64);
    /// The current position (a byte offset in the segment file).
    fn position(&self) -> u64;
}

/// One op of a record as [`read_op`] streams it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamedOp {
    /// A put, read up to its value: the value's `value_len` bytes start at `value_at` (a
    /// position in the same file) and have been skipped.
    Put {
        /// Its keyspace.
        keyspace: Keyspace,
        /// Its key.
        key: Vec<u8>,
        /// Where its value starts in the file.
        value_at: u64,
        /// Its value's length.
        value_len: u32,
    },
    /// A delete or range delete (read and skipped).
    Other,
}

/// Reads the op count at the start of a record body from `src`.
pub fn read_op_count(src: &mut impl OpSource) -> Result<u32> {
    let mut b = [0; 4];
    src.read_exact(&mut b)?;
    Ok(u32::from_le_bytes(b))
}

/// Reads one op of a record body from `src`, which must not run past `body_end` (the position
/// where the body ends). Values are skipped, not read: memory stays at one key, however large
/// the record. Fields are not checked against the record's checksum, which needs the whole
/// body; a caller that acts on a value must check the value's own checksum.
pub fn read_op(src: &mut impl OpSource, body_end: u64) -> Result<StreamedOp> {
    let mut head = [0; 2];
    read_within(src, body_end, &mut head)?;
    let (kind, keyspace) = (head[0], keyspace_of(head[1])?);
    let key_len = field_len(src, body_end)?;
    // `key_len` is within the body, which is within the segment file: bounded by what is there.
    let mut key = vec![0; key_len as usize];
    src.read_exact(&mut key)?;
    match kind {
        PUT => {
            let value_len = field_len(src, body_end)?;
            let value_at = src.position();
            src.skip(value_len);
            // `field_len` read it as a u32.
            Ok(StreamedOp::Put { keyspace, key, value_at, value_len: value_len as u32 })
        }
        DELETE => Ok(StreamedOp::Other),
        DELETE_RANGE => {
            let end_len = field_len(src, body_end)?;
            src.skip(end_len);
            Ok(StreamedOp::Other)
        }
        other => Err(Error::Corruption(format!("value log record has unknown op kind {other}"))),
    }
}

/// Reads `buf.len()` bytes that must end by `body_end`.
fn read_within(src: &mut impl OpSource, body_end: u64, buf: &mut [u8]) -> Result<()> {
    if src.position() + buf.len() as u64 > body_end {
        return Err(Error::Corruption("value log record ends inside an op".into()));
    }
    src.read_exact(buf)
}

/// Reads a field's length prefix; the field must end by `body_end`.
fn field_len(src: &mut impl OpSource, body_end: u64) -> Result<u64> {
    let mut b = [0; 4];
    read_within(src, body_end, &mut b)?;
    let len = u64::from(u32::from_le_bytes(b));
    if src.position() + len > body_end {
        return Err(Error::Corruption("value log record ends inside an op".into()));
    }
    Ok(len)
}

/// A decoded record body.
pub struct EncodedOps {
    /// The batch the record holds.
    pub batch: WriteBatch,
    /// As [`EncodedBatch::value_offsets`].
    pub value_offsets: Vec<Option<u64>>,
}

struct Reader<'a> {
    body: &'a Bytes,
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<(usize, Bytes)> {
        let end = self.at.checked_add(n).filter(|end| *end <= self.body.len());
        let end = end.ok_or_else(|| Error::Corruption("value log record ends inside an op".into()))?;
        let start = self.at;
        self.at = end;
        Ok((start, self.body.slice(start..end)))
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?.1[0])
    }
    fn u32(&mut self) -> Result<u32> {
        let (_, b) = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    fn field(&mut self) -> Result<(u64, Bytes)> {
        let len = self.u32()? as usize;
        let (at, bytes) = self.take(len)?;
        Ok((at as u64, bytes))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_round_trip_with_value_offsets() {
        let mut b = WriteBatch::new();
        b.put(Keyspace::RaftLog, b"k1".to_vec(), b"value-one".to_vec());
        b.delete(Keyspace::State, b"gone".to_vec());
        b.delete_range(Keyspace::LogIndex, b"a".to_vec(), b"z".to_vec());
        b.put(Keyspace::RaftMeta, b"k2".to_vec(), Vec::new());
        let enc = encode(&b).unwrap();
        let record = Bytes::from(enc.record);
        let mut h = [0; HEADER_BYTES as usize];
        h.copy_from_slice(&record[..HEADER_BYTES as usize]);
        let (len, crc) = parse_header(&h);
        let body = record.slice(HEADER_BYTES as usize..);
        assert_eq!(len as usize, body.len());
        assert!(body_is_intact(&body, crc));
        let dec = decode(&body).unwrap();
        assert_eq!(dec.batch, b);
        assert_eq!(dec.value_offsets, enc.value_offsets);
        let at = enc.value_offsets[0].unwrap() as usize;
        assert_eq!(&record[at..at + 9], b"value-one");
        assert_eq!(enc.value_offsets[1], None);
    }

    #[test]
    fn damaged_bodies_are_refused() {
        let mut b = WriteBatch::new();
        b.put(Keyspace::RaftLog, b"key".to_vec(), b"value".to_vec());
        let record = encode(&b).unwrap().record;
        let mut h = [0; HEADER_BYTES as usize];
        h.copy_from_slice(&record[..HEADER_BYTES as usize]);
        let (_, crc) = parse_header(&h);
        let body = record[HEADER_BYTES as usize..].to_vec();
        assert!(body_is_intact(&body, crc));
        let mut flipped = body.clone();
        flipped[6] ^= 1;
        assert!(!body_is_intact(&flipped, crc));
        // A structurally short body is an error even with a matching checksum.
        let short = Bytes::from(body[..body.len() - 2].to_vec());
        assert!(matches!(decode(&short), Err(Error::Corruption(_))));
    }
}
