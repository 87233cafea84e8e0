//! [`Record`]: one record of a batch, and its encoding.
//!
//! ```text
//!  length varint │ attributes i8 (unused, 0) │ timestampDelta varlong │ offsetDelta varint │
//!  keyLength varint (-1: null) │ key │ valueLength varint (-1: null) │ value │
//!  headerCount varint │ (headerKeyLength varint │ headerKey │ headerValueLength varint (-1: null) │ value)*
//! ```

use std::ops::Range;

use bytes::Bytes;

use crate::varint::{get_varint, get_varlong, put_varint, put_varlong, varint_len, varlong_len};

/// The fewest bytes a record can take: length, attributes, timestamp and offset deltas, key and
/// value lengths, header count — one byte each. Bounds how many records a buffer can hold.
pub const MIN_RECORD_BYTES: usize = 7;
/// The fewest bytes a header can take (its key and value lengths).
const MIN_HEADER_BYTES: usize = 2;

/// A record header. Kafka allows repeated keys and null values; both are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// The key (UTF-8 by convention; kept as sent).
    pub key: Bytes,
    /// The value; `None` is null.
    pub value: Option<Bytes>,
}

/// One record.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Record {
    /// Offset relative to the batch's first record (0, 1, 2, … in a batch as produced).
    pub offset_delta: i32,
    /// Timestamp in ms since the Unix epoch (what it means: the batch's timestamp type).
    pub timestamp_ms: i64,
    /// The key; `None` is null.
    pub key: Option<Bytes>,
    /// The value; `None` is null (with a key: a tombstone).
    pub value: Option<Bytes>,
    /// Headers, in order.
    pub headers: Vec<Header>,
}

fn opt_len(b: &Option<Bytes>) -> usize {
    b.as_ref().map_or(0, Bytes::len)
}

/// A length field for `b` (-1 for null).
fn len_field(b: &Option<Bytes>) -> Result<i32, String> {
    match b {
        None => Ok(-1),
        Some(v) => i32::try_from(v.len()).map_err(|_| format!("a field of {} bytes is too large", v.len())),
    }
}

impl Record {
    /// Bytes this record takes in a batch with `base_timestamp`, length prefix included.
    pub fn encoded_len(&self, base_timestamp: i64) -> usize {
        let body = self.body_len(base_timestamp);
        varint_len(i32::try_from(body).unwrap_or(i32::MAX)) + body
    }

    fn body_len(&self, base_timestamp: i64) -> usize {
        let field = |b: &Option<Bytes>| varint_len(len_field(b).unwrap_or(i32::MAX)) + opt_len(b);
        let headers: usize = self
            .headers
            .iter()
            .map(|h| varint_len(i32::try_from(h.key.len()).unwrap_or(i32::MAX)) + h.key.len() + field(&h.value))
            .sum();
        1 + varlong_len(self.timestamp_ms.wrapping_sub(base_timestamp))
            + varint_len(self.offset_delta)
            + field(&self.key)
            + field(&self.value)
            + varint_len(i32::try_from(self.headers.len()).unwrap_or(i32::MAX))
            + headers
    }

    /// Appends this record's encoding (in a batch whose first timestamp is `base_timestamp`).
    pub fn encode(&self, base_timestamp: i64, out: &mut Vec<u8>) -> Result<(), String> {
        let body = i32::try_from(self.body_len(base_timestamp)).map_err(|_| "a record is too large".to_string())?;
        put_varint(out, body);
        out.push(0);
        put_varlong(out, self.timestamp_ms.wrapping_sub(base_timestamp));
        put_varint(out, self.offset_delta);
        let field = |b: &Option<Bytes>, out: &mut Vec<u8>| -> Result<(), String> {
            put_varint(out, len_field(b)?);
            if let Some(v) = b {
                out.extend_from_slice(v);
            }
            Ok(())
        };
        field(&self.key, out)?;
        field(&self.value, out)?;
        put_varint(out, i32::try_from(self.headers.len()).map_err(|_| "too many headers".to_string())?);
        for h in &self.headers {
            put_varint(out, i32::try_from(h.key.len()).map_err(|_| "a header key is too large".to_string())?);
            out.extend_from_slice(&h.key);
            field(&h.value, out)?;
        }
        Ok(())
    }
}

/// One record as [`RecordReader`] read it.
pub(crate) struct Scanned {
    pub(crate) offset_delta: i32,
    pub(crate) timestamp_ms: i64,
    pub(crate) key: Option<Bytes>,
    pub(crate) value: Option<Bytes>,
    /// Empty unless collected.
    pub(crate) headers: Vec<Header>,
    /// Where the record's encoding (length prefix included) lies in the region.
    pub(crate) encoding: Range<usize>,
}

/// Reads records one after another from the decompressed records region of a batch. Fields are
/// zero-copy slices of that region. Nothing is allocated from a declared count or length
/// before the bytes it describes are known to be there.
pub(crate) struct RecordReader<'a> {
    data: &'a Bytes,
    pos: usize,
}

impl<'a> RecordReader<'a> {
    pub(crate) fn new(data: &'a Bytes) -> Self {
        Self { data, pos: 0 }
    }

    /// Bytes not read yet.
    pub(crate) fn remaining(&self) -> usize {
        self.data.len() - self.pos
    }

    /// Reads the next record: its offset delta, and the record itself when `keep` (with `keep`
    /// false its fields are checked but not collected: validation).
    pub(crate) fn next(&mut self, base_timestamp: i64, keep: bool) -> Result<(i32, Option<Record>), String> {
        let s = self.scan(base_timestamp, keep)?;
        let record = keep.then(|| Record {
            offset_delta: s.offset_delta,
            timestamp_ms: s.timestamp_ms,
            key: s.key,
            value: s.value,
            headers: s.headers,
        });
        Ok((s.offset_delta, record))
    }

    /// Reads the next record without collecting its headers (they are checked): its fields and
    /// where its encoding lies in the region, so that it can be copied as it is.
    pub(crate) fn next_raw(&mut self, base_timestamp: i64) -> Result<Scanned, String> {
        self.scan(base_timestamp, false)
    }

    /// Reads and checks the next record, collecting its headers when `collect_headers`.
    fn scan(&mut self, base_timestamp: i64, collect_headers: bool) -> Result<Scanned, String> {
        let d: &[u8] = self.data;
        let start = self.pos;
        let length = get_varint(d, &mut self.pos).ok_or("bad record length")?;
        let length = usize::try_from(length).map_err(|_| format!("negative record length {length}"))?;
        let end = self
            .pos
            .checked_add(length)
            .filter(|e| *e <= d.len())
            .ok_or_else(|| format!("record length {length} runs past the {} bytes left", d.len() - self.pos))?;
        // Every field below is read within the record's own bytes.
        let body = &d[..end];
        let mut pos = self.pos;
        // The record attributes byte is unused; Kafka ignores it, and so does Rill.
        body.get(pos).ok_or("record truncated at its attributes")?;
        pos += 1;
        let ts_delta = get_varlong(body, &mut pos).ok_or("bad timestamp delta")?;
        let offset_delta = get_varint(body, &mut pos).ok_or("bad offset delta")?;
        let key = self.field(body, &mut pos, "key")?;
        let value = self.field(body, &mut pos, "value")?;
        let count = get_varint(body, &mut pos).ok_or("bad header count")?;
        let count = usize::try_from(count).map_err(|_| format!("negative header count {count}"))?;
        if count > (end - pos) / MIN_HEADER_BYTES {
            return Err(format!("{count} headers cannot fit in {} bytes", end - pos));
        }
        let mut headers = Vec::with_capacity(if collect_headers { count } else { 0 });
        for _ in 0..count {
            let klen = get_varint(body, &mut pos).ok_or("bad header key length")?;
            let klen = usize::try_from(klen).map_err(|_| format!("header key length {klen} is negative"))?;
            let kend = pos.checked_add(klen).filter(|e| *e <= end).ok_or("header key runs past the record")?;
            let header_key = self.data.slice(pos..kend);
            pos = kend;
            let header_value = self.field(body, &mut pos, "header value")?;
            if collect_headers {
                headers.push(Header { key: header_key, value: header_value });
            }
        }
        if pos != end {
            return Err(format!("record declares {length} bytes but its fields take {}", pos - self.pos));
        }
        self.pos = end;
        Ok(Scanned {
            offset_delta,
            timestamp_ms: base_timestamp.wrapping_add(ts_delta),
            key,
            value,
            headers,
            encoding: start..end,
        })
    }

    /// A nullable length-prefixed field at `*pos`, within `body`.
    fn field(&self, body: &[u8], pos: &mut usize, what: &str) -> Result<Option<Bytes>, String> {
        let len = get_varint(body, pos).ok_or_else(|| format!("bad {what} length"))?;
        if len == -1 {
            return Ok(None);
        }
        let len = usize::try_from(len).map_err(|_| format!("{what} length {len} is invalid"))?;
        let end =
            pos.checked_add(len).filter(|e| *e <= body.len()).ok_or_else(|| format!("{what} runs past the record"))?;
        let v = self.data.slice(*pos..end);
        *pos = end;
        Ok(Some(v))
    }
}
