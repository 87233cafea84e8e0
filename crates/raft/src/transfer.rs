//! [`SnapshotStream`]: a snapshot as openraft sends and receives it, carrying the log entries a
//! follower must have besides the state, streamed in bounded memory.
//!
//! A record partition's records live in its Raft log. Raft purges the log only below the entry
//! holding the log start offset (see [`crate::log_store`]), so a follower whose log ends below
//! the leader's purge point is sent a snapshot; that snapshot must carry the retained entries
//! (log start → snapshot point) with the state, or the follower would hold state without the
//! records it describes. The stream is (format version 1):
//!
//! ```text
//! "RILLSNP1" ‖ u32 header length ‖ SnapshotData (state, what follows, declared)
//!            ‖ (u32 length ‖ entry as stored)*   one per log index, first_index ..= last
//!            ‖ u32 CRC-32C of every byte before it
//! ```
//!
//! * **Sending** ([`SnapshotStream::outgoing`]) reads the entries from the log as openraft asks
//!   for chunks, a few at a time, holding a [`Pin`] so the log keeps them until the transfer
//!   ends. Its length must be known before the first chunk (openraft seeks to the end first), so
//!   the entries' stored size is summed when the transfer starts — lazily, so that merely
//!   opening the current snapshot (openraft does at every start) reads nothing.
//! * **Receiving** ([`SnapshotStream::incoming`]) parses the stream as chunks arrive and stages
//!   each entry in the engine (`LogStore::stage`): memory holds at most one entry and one
//!   chunk. It refuses a stream that breaks what its header declares (sizes, counts, an entry
//!   out of order or out of place, a wrong checksum) before openraft sees it complete.
//!   [`crate::state_machine::SmStore`] installs what it received.
//!
//! openraft's chunked transfer reads and writes strictly in order, except that a failed chunk is
//! sent again from its start, and a snapshot mismatch restarts from offset 0: a sender keeps a
//! checkpoint at the start of the chunk being sent and can rewind to it, or to 0.

use std::io::{self, SeekFrom};
use std::pin::Pin as StdPin;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes, BytesMut};
use prost::Message;
use rill_proto::raft as pb;
use tokio::io::{AsyncRead, AsyncSeek, AsyncWrite, ReadBuf};

use crate::codec::{self, InstallMarker};
use crate::log_store::{LogStore, Pin};
use crate::state_machine::Applied;
use crate::types::LogId;

/// The first bytes of every snapshot stream.
const MAGIC: &[u8; 8] = b"RILLSNP1";
/// The largest state a header may carry (the metadata group's or a coordinator's state).
pub const MAX_HEADER_BYTES: usize = 1 << 30;
/// The largest entry a stream may carry (far above the largest batch a produce may carry).
pub const MAX_ENTRY_BYTES: usize = 256 << 20;
/// Entries read from the log per step of a send.
const READ_ENTRIES: usize = 8;
/// Bytes of received entries staged per engine write.
const STAGE_BYTES: usize = 4 << 20;

fn invalid(reason: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, reason.into())
}

/// A pinned entry the sender expected is not in the log (it never should be: the pin keeps it).
fn missing_entry(index: u64) -> io::Error {
    io::Error::other(format!("log entry {index} is missing while sending a snapshot"))
}

fn storage(e: crate::Error) -> io::Error {
    io::Error::other(e.to_string())
}

/// What a snapshot carries besides the entries: the adapter's applied state, the state
/// machine's bytes and the first position whose entries come with it.
#[derive(Debug, Clone)]
pub struct SnapshotState {
    /// What the snapshot covers.
    pub applied: Applied,
    /// The state machine's own snapshot.
    pub data: Bytes,
    /// The first position whose entries the snapshot carries, if it carries any.
    pub retained_from: Option<u64>,
}

/// A snapshot received in full, ready for `LogStore::install`.
#[derive(Debug, Clone)]
pub struct Received {
    /// The state.
    pub state: SnapshotState,
    /// The log side of the installation.
    pub marker: InstallMarker,
}

/// openraft's `SnapshotData`: a snapshot being sent, or one being received.
pub enum SnapshotStream {
    /// Read by openraft to send chunks.
    Outgoing(Box<Outgoing>),
    /// Written by openraft with the chunks that arrive.
    Incoming(Box<Incoming>),
}

impl SnapshotStream {
    /// A snapshot of `state` at `last` to send, with the log's entries from the one holding
    /// `state.retained_from` through `last`.
    pub fn outgoing(log: LogStore, last: Option<LogId>, state: SnapshotState) -> Self {
        Self::Outgoing(Box::new(Outgoing { log, last, state, ready: None, seek_to: None }))
    }

    /// An empty stream to receive a snapshot into, staging its entries through `log`.
    pub fn incoming(log: LogStore) -> Self {
        Self::Incoming(Box::new(Incoming::new(log)))
    }

    /// The snapshot received in full (after openraft shut the stream down).
    pub fn received(&self) -> Option<&Received> {
        match self {
            Self::Incoming(i) => i.done.as_ref(),
            Self::Outgoing(_) => None,
        }
    }
}

// ------------------------------------------------------------------ sending ---------------

/// Where a send is: every field needed to go on from here, so a checkpoint is a copy.
#[derive(Clone)]
struct ReadPos {
    /// Stream offset of the next byte.
    offset: u64,
    /// Unsent bytes of the current frame.
    frame: Bytes,
    /// Whether `frame` is the trailer (not covered by the checksum).
    trailer: bool,
    /// Next log index to read.
    next_index: u64,
    /// CRC-32C of the bytes before `offset` (excluding the trailer).
    crc: u32,
    /// The trailer was produced.
    ended: bool,
}

struct Ready {
    head: Bytes,
    total: u64,
    /// Entries sent: `first ..= last` (empty when `first > last`).
    first: u64,
    last: u64,
    pos: ReadPos,
    checkpoint: ReadPos,
    _pin: Option<Pin>,
}

/// A snapshot being sent.
pub struct Outgoing {
    log: LogStore,
    last: Option<LogId>,
    state: SnapshotState,
    ready: Option<Ready>,
    seek_to: Option<SeekFrom>,
}

impl Outgoing {
    /// Sizes the stream and pins its entries, on first use.
    fn ready(&mut self) -> io::Result<&mut Ready> {
        if self.ready.is_none() {
            if let Some(from) = self.state.retained_from.filter(|f| *f < self.log.start_position()) {
                // Never a snapshot that leaves a hole: its records are gone from this log.
                return Err(io::Error::other(format!(
                    "the snapshot needs records from position {from} on but the log stores them from {} on",
                    self.log.start_position()
                )));
            }
            let range = match (self.state.retained_from, self.last) {
                (Some(from), Some(last)) => match self.log.index_of_position(from).map_err(storage)? {
                    Some(first) if first <= last.index => Some((first, last.index)),
                    _ => None,
                },
                _ => None,
            };
            let (pin, first, last, body) = match range {
                Some((first, last)) => {
                    let pin = self.log.pin(first).map_err(storage)?;
                    let bytes = self.log.raw_bytes(first, last + 1).map_err(storage)?;
                    let count = last - first + 1;
                    (Some(pin), first, last, bytes + 4 * count + 4)
                }
                None => (None, 1, 0, 4),
            };
            let header = pb::SnapshotData {
                applied: Some(codec::applied_to(&self.state.applied)),
                data: self.state.data.clone(),
                retained_from: self.state.retained_from,
                first_index: (first <= last).then_some(first),
                entry_count: if first <= last { last - first + 1 } else { 0 },
                body_bytes: body,
            }
            .encode_to_vec();
            let mut head = Vec::with_capacity(12 + header.len());
            head.extend_from_slice(MAGIC);
            head.extend_from_slice(&(header.len() as u32).to_be_bytes());
            head.extend_from_slice(&header);
            let head = Bytes::from(head);
            let total = head.len() as u64 + body;
            let pos =
                ReadPos { offset: 0, frame: head.clone(), trailer: false, next_index: first, crc: 0, ended: false };
            self.ready = Some(Ready { head, total, first, last, checkpoint: pos.clone(), pos, _pin: pin });
        }
        self.ready.as_mut().ok_or_else(|| io::Error::other("snapshot stream not ready"))
    }

    fn seek(&mut self, to: SeekFrom) -> io::Result<u64> {
        let r = self.ready()?;
        let target = match to {
            SeekFrom::Start(o) => o,
            SeekFrom::End(0) => return Ok(r.total),
            SeekFrom::Current(0) => return Ok(r.pos.offset),
            other => return Err(invalid(format!("snapshot stream cannot seek to {other:?}"))),
        };
        if target == r.pos.offset {
            r.checkpoint = r.pos.clone();
        } else if target == r.checkpoint.offset {
            r.pos = r.checkpoint.clone();
        } else if target == 0 {
            r.pos =
                ReadPos { offset: 0, frame: r.head.clone(), trailer: false, next_index: r.first, crc: 0, ended: false };
            r.checkpoint = r.pos.clone();
        } else {
            return Err(invalid(format!(
                "snapshot stream at {} cannot seek to {target} (only to a chunk's start)",
                r.pos.offset
            )));
        }
        Ok(target)
    }

    /// Fills `out` with the next bytes.
    fn read_into(&mut self, out: &mut ReadBuf<'_>) -> io::Result<()> {
        let log = self.log.clone();
        let r = self.ready()?;
        while out.remaining() > 0 {
            if !r.pos.frame.is_empty() {
                let n = r.pos.frame.len().min(out.remaining());
                let chunk = r.pos.frame.split_to(n);
                if !r.pos.trailer {
                    r.pos.crc = crc32c::crc32c_append(r.pos.crc, &chunk);
                }
                out.put_slice(&chunk);
                r.pos.offset += n as u64;
                continue;
            }
            if r.pos.next_index <= r.last && r.first <= r.last {
                let until = r.last + 1;
                let rows = log.read_raw(r.pos.next_index, until, READ_ENTRIES).map_err(storage)?;
                let mut frames = BytesMut::new();
                for (index, value) in rows {
                    if index != r.pos.next_index {
                        return Err(missing_entry(r.pos.next_index));
                    }
                    frames.extend_from_slice(&(value.len() as u32).to_be_bytes());
                    frames.extend_from_slice(&value);
                    r.pos.next_index += 1;
                }
                if frames.is_empty() {
                    return Err(missing_entry(r.pos.next_index));
                }
                r.pos.frame = frames.freeze();
                continue;
            }
            if !r.pos.ended {
                r.pos.ended = true;
                r.pos.trailer = true;
                r.pos.frame = Bytes::copy_from_slice(&r.pos.crc.to_be_bytes());
                continue;
            }
            break;
        }
        Ok(())
    }
}

// ------------------------------------------------------------------ receiving -------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Magic,
    HeaderLen,
    Header(usize),
    EntryLen,
    Entry(usize),
    Trailer,
    Done,
}

/// A snapshot being received.
pub struct Incoming {
    log: LogStore,
    buf: BytesMut,
    step: Step,
    received: u64,
    /// Total stream length, once the header told it.
    declared: Option<u64>,
    crc: u32,
    header: Option<pb::SnapshotData>,
    next_index: u64,
    next_position: Option<u64>,
    entries_seen: u64,
    first_base: Option<u64>,
    last_log_id: Option<LogId>,
    body_seen: u64,
    staged: Vec<(u64, Bytes)>,
    staged_bytes: usize,
    done: Option<Received>,
}

impl Incoming {
    /// Nothing received yet; entries are staged through `log`.
    fn new(log: LogStore) -> Self {
        Self {
            log,
            buf: BytesMut::new(),
            step: Step::Magic,
            received: 0,
            declared: None,
            crc: 0,
            header: None,
            next_index: 0,
            next_position: None,
            entries_seen: 0,
            first_base: None,
            last_log_id: None,
            body_seen: 0,
            staged: Vec::new(),
            staged_bytes: 0,
            done: None,
        }
    }

    /// The sender started over: forget what arrived.
    fn restart(&mut self) -> io::Result<()> {
        self.log.clear_staging().map_err(storage)?;
        *self = Self::new(self.log.clone());
        Ok(())
    }

    fn write(&mut self, data: &[u8]) -> io::Result<()> {
        if self.step == Step::Done {
            return Err(invalid("snapshot stream continues past its end"));
        }
        let after = self.received + data.len() as u64;
        if self.declared.is_some_and(|d| after > d) {
            return Err(invalid(format!(
                "snapshot stream longer than the {} bytes it declared",
                self.declared.unwrap_or(0)
            )));
        }
        self.received = after;
        self.buf.extend_from_slice(data);
        self.parse()
    }

    /// Takes `n` bytes from the buffer, checksummed, once they are all there.
    fn take(&mut self, n: usize) -> Option<Bytes> {
        if self.buf.len() < n {
            return None;
        }
        let b = self.buf.split_to(n).freeze();
        self.crc = crc32c::crc32c_append(self.crc, &b);
        if matches!(self.step, Step::EntryLen | Step::Entry(_)) {
            self.body_seen += n as u64;
        }
        Some(b)
    }

    fn parse(&mut self) -> io::Result<()> {
        loop {
            match self.step {
                Step::Magic => {
                    let Some(m) = self.take(MAGIC.len()) else { return Ok(()) };
                    if &m[..] != MAGIC {
                        return Err(invalid("not a snapshot stream of a known format"));
                    }
                    self.step = Step::HeaderLen;
                }
                Step::HeaderLen => {
                    let Some(mut b) = self.take(4) else { return Ok(()) };
                    let n = b.get_u32() as usize;
                    if n > MAX_HEADER_BYTES {
                        return Err(invalid(format!("snapshot header of {n} bytes; the limit is {MAX_HEADER_BYTES}")));
                    }
                    self.step = Step::Header(n);
                }
                Step::Header(n) => {
                    let Some(b) = self.take(n) else { return Ok(()) };
                    let h = pb::SnapshotData::decode(b)
                        .map_err(|e| invalid(format!("undecodable snapshot header: {e}")))?;
                    let head = (MAGIC.len() + 4 + n) as u64;
                    let declared =
                        head.checked_add(h.body_bytes).ok_or_else(|| invalid("snapshot stream length overflows"))?;
                    if self.received > declared {
                        return Err(invalid("snapshot stream longer than it declared"));
                    }
                    let min_body = h.entry_count.saturating_mul(4).saturating_add(4);
                    if h.body_bytes < min_body {
                        return Err(invalid("snapshot stream declares fewer bytes than its entries need"));
                    }
                    if (h.entry_count == 0) != h.first_index.is_none() {
                        return Err(invalid("snapshot stream declares entries without a first index, or the reverse"));
                    }
                    self.declared = Some(declared);
                    self.next_index = h.first_index.unwrap_or(0);
                    self.step = if h.entry_count > 0 { Step::EntryLen } else { Step::Trailer };
                    self.header = Some(h);
                }
                Step::EntryLen => {
                    let Some(mut b) = self.take(4) else { return Ok(()) };
                    let n = b.get_u32() as usize;
                    if n > MAX_ENTRY_BYTES {
                        return Err(invalid(format!("snapshot entry of {n} bytes; the limit is {MAX_ENTRY_BYTES}")));
                    }
                    self.step = Step::Entry(n);
                }
                Step::Entry(n) => {
                    let Some(b) = self.take(n) else { return Ok(()) };
                    self.entry(b)?;
                    let count = self.header.as_ref().map_or(0, |h| h.entry_count);
                    self.step = if self.entries_seen < count { Step::EntryLen } else { Step::Trailer };
                }
                Step::Trailer => {
                    if self.buf.len() < 4 {
                        return Ok(());
                    }
                    let want = self.crc;
                    let got = self.buf.split_to(4).get_u32();
                    if got != want {
                        return Err(invalid(format!("snapshot stream checksum {got:#010x}, computed {want:#010x}")));
                    }
                    if !self.buf.is_empty() {
                        return Err(invalid("snapshot stream continues past its end"));
                    }
                    self.step = Step::Done;
                }
                Step::Done => {
                    return if self.buf.is_empty() {
                        Ok(())
                    } else {
                        Err(invalid("snapshot stream continues past its end"))
                    };
                }
            }
        }
    }

    /// Checks one carried entry against its place and stages it.
    fn entry(&mut self, bytes: Bytes) -> io::Result<()> {
        let e = codec::decode_entry(bytes.clone()).map_err(|r| invalid(format!("undecodable snapshot entry: {r}")))?;
        let index = e.entry.log_id.index;
        if index != self.next_index {
            return Err(invalid(format!("snapshot entry {index} where entry {} belongs", self.next_index)));
        }
        if let Some(p) = self.next_position {
            if e.base != p {
                return Err(invalid(format!("snapshot entry {index} starts at position {}; expected {p}", e.base)));
            }
        }
        self.first_base.get_or_insert(e.base);
        self.next_position = Some(e.end());
        self.next_index += 1;
        self.entries_seen += 1;
        self.last_log_id = Some(e.entry.log_id);
        self.staged_bytes += bytes.len();
        self.staged.push((index, bytes));
        if self.staged_bytes >= STAGE_BYTES {
            self.flush_staged()?;
        }
        Ok(())
    }

    fn flush_staged(&mut self) -> io::Result<()> {
        if !self.staged.is_empty() {
            self.log.stage(&self.staged).map_err(storage)?;
            self.staged.clear();
            self.staged_bytes = 0;
        }
        Ok(())
    }

    /// The end of the stream: everything declared arrived and fits together.
    fn finish(&mut self) -> io::Result<()> {
        if self.done.is_some() {
            return Ok(());
        }
        if self.step != Step::Done {
            return Err(invalid(format!("snapshot stream ended early, after {} bytes", self.received)));
        }
        self.flush_staged()?;
        let h = self.header.take().ok_or_else(|| invalid("snapshot stream without a header"))?;
        if self.body_seen + 4 != h.body_bytes {
            return Err(invalid("snapshot stream's entries do not fill what it declared"));
        }
        let applied = codec::applied_from(h.applied.ok_or_else(|| invalid("snapshot applied state is missing"))?);
        let last = applied.log_id.ok_or_else(|| invalid("snapshot of an empty log"))?;
        if h.entry_count > 0 {
            if self.last_log_id != Some(last) {
                return Err(invalid(format!(
                    "snapshot's entries end at {:?}, not at its last log id {last}",
                    self.last_log_id
                )));
            }
            if self.next_position != Some(applied.position) {
                return Err(invalid("snapshot's entries end at another position than its state"));
            }
            if h.retained_from.is_some_and(|from| self.first_base.is_some_and(|b| b > from)) {
                return Err(invalid("snapshot's entries start above the first position they must carry"));
            }
        }
        let marker = InstallMarker {
            last,
            end_position: applied.position,
            first_index: h.first_index,
            entry_count: h.entry_count,
            start_position: self.first_base.unwrap_or(applied.position),
        };
        self.log.expect_install(marker);
        let state = SnapshotState { applied, data: h.data, retained_from: h.retained_from };
        self.done = Some(Received { state, marker });
        Ok(())
    }
}

// ------------------------------------------------------------------ io traits -------------

impl AsyncRead for SnapshotStream {
    fn poll_read(self: StdPin<&mut Self>, _cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Outgoing(o) => Poll::Ready(o.read_into(buf)),
            Self::Incoming(_) => Poll::Ready(Err(io::Error::other("a snapshot being received is not read"))),
        }
    }
}

impl AsyncWrite for SnapshotStream {
    fn poll_write(self: StdPin<&mut Self>, _cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Self::Incoming(i) => Poll::Ready(i.write(data).map(|()| data.len())),
            Self::Outgoing(_) => Poll::Ready(Err(io::Error::other("a snapshot being sent is not written"))),
        }
    }

    fn poll_flush(self: StdPin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: StdPin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Self::Incoming(i) => Poll::Ready(i.finish()),
            Self::Outgoing(_) => Poll::Ready(Ok(())),
        }
    }
}

impl AsyncSeek for SnapshotStream {
    fn start_seek(self: StdPin<&mut Self>, position: SeekFrom) -> io::Result<()> {
        match self.get_mut() {
            Self::Outgoing(o) => {
                o.seek_to = Some(position);
                Ok(())
            }
            Self::Incoming(i) => match position {
                SeekFrom::Start(o) if o == i.received => Ok(()),
                SeekFrom::Start(0) => i.restart(),
                SeekFrom::Current(0) => Ok(()),
                other => Err(invalid(format!("a snapshot is received in order; cannot seek to {other:?}"))),
            },
        }
    }

    fn poll_complete(self: StdPin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<u64>> {
        match self.get_mut() {
            Self::Outgoing(o) => match o.seek_to.take() {
                Some(to) => Poll::Ready(o.seek(to)),
                None => Poll::Ready(o.ready().map(|r| r.pos.offset)),
            },
            Self::Incoming(i) => Poll::Ready(Ok(i.received)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use openraft::storage::RaftLogStorage;
    use openraft::{CommittedLeaderId, Entry, EntryPayload};
    use rill_storage::{Engine, Keyspace, MemEngine, Syncer, WriteBatch};
    use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};

    use super::*;
    use crate::codec::Wire;
    use crate::keys;
    use crate::log_store::{Rewrite, TailBudget};
    use crate::types::Payload;

    const G: u64 = 5;

    fn lid(term: u64, index: u64) -> LogId {
        openraft::LogId::new(CommittedLeaderId::new(term, 1), index)
    }

    /// Writes entries `1..=n` of term `term` straight into the engine, two positions each,
    /// with bodies naming their term and index.
    fn write_log(engine: &MemEngine, term: u64, n: u64) {
        let mut b = WriteBatch::new();
        for i in 1..=n {
            let body = Bytes::from(format!("t{term}-e{i}"));
            let e =
                Entry { log_id: lid(term, i), payload: EntryPayload::Normal(Payload { units: 2, body, proposal: 0 }) };
            let base = (i - 1) * 2;
            b.put(Keyspace::RaftLog, keys::group_u64(G, i).to_vec(), codec::encode_entry(base, &e).unwrap());
            b.put(Keyspace::LogIndex, keys::group_u64(G, base).to_vec(), i.to_be_bytes().to_vec());
        }
        engine.write(b, true).unwrap();
    }

    fn open(engine: &MemEngine) -> LogStore {
        let engine: Arc<dyn Engine> = Arc::new(engine.clone());
        LogStore::open(G, engine.clone(), Syncer::start(engine), TailBudget::new(1 << 20)).unwrap()
    }

    fn state(last: u64, position: u64, retained_from: Option<u64>) -> SnapshotState {
        let applied = Applied { log_id: Some(lid(1, last)), position, ..Applied::default() };
        SnapshotState { applied, data: Bytes::from_static(b"machine state"), retained_from }
    }

    /// Reads a whole outgoing stream the way openraft's chunked sender does: the length first,
    /// then chunks of `chunk` bytes, each after a seek to its start, the third one twice (a
    /// retried chunk).
    async fn send_all(stream: &mut SnapshotStream, chunk: usize) -> Vec<Vec<u8>> {
        let end = stream.seek(SeekFrom::End(0)).await.unwrap();
        let (mut offset, mut chunks, mut n) = (0u64, Vec::new(), 0);
        while offset < end {
            stream.seek(SeekFrom::Start(offset)).await.unwrap();
            let mut buf = vec![0u8; chunk.min((end - offset) as usize)];
            stream.read_exact(&mut buf).await.unwrap();
            n += 1;
            if n == 3 {
                // Sent again from its start, as after a failed RPC.
                stream.seek(SeekFrom::Start(offset)).await.unwrap();
                let mut again = vec![0u8; buf.len()];
                stream.read_exact(&mut again).await.unwrap();
                assert_eq!(again, buf, "a rewound chunk reads the same bytes");
            }
            offset += buf.len() as u64;
            chunks.push(buf);
        }
        let mut rest = Vec::new();
        assert_eq!(stream.read_to_end(&mut rest).await.unwrap(), 0, "nothing past the declared end");
        chunks
    }

    async fn receive_all(log: &LogStore, chunks: &[Vec<u8>]) -> io::Result<SnapshotStream> {
        let mut incoming = SnapshotStream::incoming(log.clone());
        for c in chunks {
            incoming.write_all(c).await?;
        }
        incoming.shutdown().await?;
        Ok(incoming)
    }

    #[tokio::test]
    async fn a_snapshot_carries_the_retained_entries_and_installs_them_at_their_positions() {
        let leader = MemEngine::new();
        write_log(&leader, 1, 10);
        let leader_log = open(&leader);
        // Position 9 is in entry 5 (positions 8 and 9): entries 5..=10 travel.
        let mut out = SnapshotStream::outgoing(leader_log.clone(), Some(lid(1, 10)), state(10, 20, Some(9)));
        let chunks = send_all(&mut out, 7).await;

        let follower = MemEngine::new();
        write_log(&follower, 2, 3); // a divergent, shorter log
        let log = open(&follower);
        let incoming = receive_all(&log, &chunks).await.unwrap();
        let received = incoming.received().cloned().unwrap();
        assert_eq!(received.marker.first_index, Some(5));
        assert_eq!(
            (received.marker.entry_count, received.marker.start_position, received.marker.end_position),
            (6, 8, 20)
        );
        assert_eq!(&received.state.data[..], b"machine state");

        // openraft purges for the snapshot before the state machine installs it: positions
        // move at once, nothing is written.
        log.clone().purge(lid(1, 10)).await.unwrap();
        assert_eq!(log.end_position(), 20, "entries after the snapshot are numbered from its end");
        log.install(received.marker, WriteBatch::new()).unwrap();
        log.clone().purge(lid(1, 10)).await.unwrap(); // a purge after the installation: nothing

        let theirs: Vec<_> = leader_log.read_all().unwrap().into_iter().filter(|e| e.entry.log_id.index >= 5).collect();
        let ours = log.read_all().unwrap();
        assert_eq!(ours.len(), 6);
        for (a, b) in ours.iter().zip(&theirs) {
            assert_eq!((a.base, &a.entry), (b.base, &b.entry));
        }
        let check = |log: &LogStore| {
            assert_eq!((log.start_position(), log.end_position(), log.first_kept()), (8, 20, 5));
            assert_eq!((log.retained_from(), log.last_purged_index()), (Some(5), Some(10)));
            assert_eq!(log.index_of_position(9).unwrap(), Some(5));
            assert_eq!(log.read_positioned(0, u64::MAX, 100).unwrap().len(), 6);
        };
        check(&log);
        let staged = keys::staging(G);
        let rows = follower.scan(Keyspace::RaftLog, &keys::group_start(staged), &keys::group_end(staged), 10).unwrap();
        assert!(rows.is_empty(), "nothing staged is left");
        drop(log);
        let reopened = open(&follower);
        check(&reopened);
        let state = reopened.clone().get_log_state().await.unwrap();
        assert_eq!((state.last_purged_log_id, state.last_log_id), (Some(lid(1, 10)), Some(lid(1, 10))));
    }

    #[tokio::test]
    async fn an_installation_interrupted_by_a_crash_is_finished_when_the_log_opens() {
        let leader = MemEngine::new();
        write_log(&leader, 1, 8);
        let mut out = SnapshotStream::outgoing(open(&leader), Some(lid(1, 8)), state(8, 16, Some(4)));
        let chunks = send_all(&mut out, 5).await;
        let follower = MemEngine::new();
        write_log(&follower, 1, 2);
        let log = open(&follower);
        let received = receive_all(&log, &chunks).await.unwrap().received().cloned().unwrap();
        // The first step of `install`, durably, then power fails before the move.
        let mut b = WriteBatch::new();
        b.put(Keyspace::RaftMeta, keys::group_tag(G, keys::INSTALLING).to_vec(), received.marker.encode());
        follower.write(b, true).unwrap();
        follower.power_fail(0);
        drop(log);
        let log = open(&follower);
        assert_eq!((log.first_kept(), log.start_position(), log.end_position()), (3, 4, 16));
        let bases: Vec<u64> = log.read_all().unwrap().iter().map(|e| e.base).collect();
        assert_eq!(bases, vec![4, 6, 8, 10, 12, 14]);
        assert!(follower.get(Keyspace::RaftMeta, &keys::group_tag(G, keys::INSTALLING)).unwrap().is_none());
    }

    #[tokio::test]
    async fn a_damaged_or_short_stream_is_refused() {
        let leader = MemEngine::new();
        write_log(&leader, 1, 4);
        let mut out = SnapshotStream::outgoing(open(&leader), Some(lid(1, 4)), state(4, 8, Some(0)));
        let whole: Vec<u8> = send_all(&mut out, 1 << 20).await.concat();
        let follower = MemEngine::new();
        let log = open(&follower);

        let mut flipped = whole.clone();
        let at = whole.len() - 10;
        flipped[at] ^= 1;
        assert!(receive_all(&log, &[flipped]).await.is_err(), "a flipped byte fails the checksum");
        assert!(receive_all(&log, &[whole[..whole.len() - 1].to_vec()]).await.is_err(), "a short stream");
        let mut longer = whole.clone();
        longer.push(0);
        assert!(receive_all(&log, &[longer]).await.is_err(), "a longer stream");
        assert!(receive_all(&log, &[b"RILLSNP9".to_vec()]).await.is_err(), "an unknown format");
        assert!(receive_all(&log, &[whole]).await.is_ok(), "the stream itself is fine");
    }

    #[tokio::test]
    async fn a_transfer_in_flight_keeps_its_entries_until_it_ends() {
        let engine = MemEngine::new();
        write_log(&engine, 1, 10);
        let log = open(&engine);
        let mut out = SnapshotStream::outgoing(log.clone(), Some(lid(1, 10)), state(10, 20, Some(4)));
        out.seek(SeekFrom::End(0)).await.unwrap(); // pins from entry 3
        log.retain_from(8).unwrap();
        log.clone().purge(lid(1, 7)).await.unwrap();
        assert_eq!(log.first_kept(), 3, "the transfer still reads entries 3 and up");
        let chunks = send_all(&mut out, 64).await;
        assert!(!chunks.is_empty());
        drop(out);
        assert_eq!((log.first_kept(), log.start_position()), (8, 14), "deleted once the transfer ended");
        let late = SnapshotStream::outgoing(log.clone(), Some(lid(1, 10)), state(10, 20, Some(4)));
        let mut late = late;
        assert!(late.seek(SeekFrom::End(0)).await.is_err(), "a transfer of deleted entries fails");
    }

    #[tokio::test]
    async fn a_rewritten_entry_keeps_its_place_and_is_what_the_log_serves() {
        let engine = MemEngine::new();
        write_log(&engine, 1, 4);
        let log = open(&engine);
        assert_eq!(log.rewrite(2, 2, Bytes::from_static(b"compacted")).unwrap(), Rewrite::Done);
        let read = log.read_positioned(1, 5, 10).unwrap();
        let got: Vec<(u64, u64, u32, &[u8])> = read.iter().map(|e| (e.index, e.base, e.units, &e.body[..])).collect();
        assert_eq!(
            got,
            vec![
                (1, 0, 2, &b"t1-e1"[..]),
                (2, 2, 2, &b"compacted"[..]),
                (3, 4, 2, &b"t1-e3"[..]),
                (4, 6, 2, &b"t1-e4"[..])
            ]
        );
        assert_eq!(log.index_of_position(3).unwrap(), Some(2), "positions are untouched");
        assert_eq!(log.rewrite(2, 4, Bytes::from_static(b"x")).unwrap(), Rewrite::Gone, "another position");
        assert_eq!(log.rewrite(9, 16, Bytes::from_static(b"x")).unwrap(), Rewrite::Gone, "an entry not there");
        {
            let _sending = log.pin(2).unwrap();
            assert_eq!(log.rewrite(3, 4, Bytes::from_static(b"x")).unwrap(), Rewrite::Held, "a transfer reads it");
            assert_eq!(log.rewrite(1, 0, Bytes::from_static(b"e1")).unwrap(), Rewrite::Done, "below the pin");
        }
        assert_eq!(log.rewrite(3, 4, Bytes::from_static(b"t1-e3")).unwrap(), Rewrite::Done, "once the pin is gone");
        drop(log);
        let reopened = open(&engine);
        assert_eq!(&reopened.read_positioned(2, 3, 1).unwrap()[0].body[..], b"compacted", "the rewrite is stored");
    }
}
