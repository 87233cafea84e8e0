//! The value log: the node's write-ahead log, and the home of Raft log entry bytes.
//!
//! Every [`WriteBatch`](rill_storage::WriteBatch) is appended here as one checksummed record
//! (see [`crate::record`]) before RocksDB sees it. Raft log values are then never copied again:
//! RocksDB stores a [`ValuePointer`] into the record instead. The log is a directory of
//! segment files, `NNNNNNNNNNNNNNNNNNNN.vlog`; only the newest (the *active* segment) is
//! written, at its end, and a new one is started when it is full and at every open.
//!
//! # Segment format
//! ```text
//! version 2 (written by this build)          version 1 (earlier builds; read, never written)
//! 0     "RILLVLG2"                             0  "RILLVLG1"
//! 8     synced-length slot A (16 bytes)        8  records…
//! 2048  synced-length slot B (16 bytes)
//! 4096  records…
//!
//! slot := version = 1: u8 | 0: [u8; 3] | synced_len: u64 LE | crc32c(first 12 bytes): u32 LE
//! ```
//! A slot says "the first `synced_len` bytes of this file are durable". It is written into the
//! header before an fsync and made durable by that same fsync, so it costs no extra fsync; and
//! since an fsync interrupted by a power failure may have written the slot but not all the data,
//! the slot written before an fsync records what the *previous* fsync of the segment made
//! durable, never what this one will. The slots alternate (the older one is overwritten), so a
//! torn slot write leaves the other intact. A segment closed by a rotation or a clean close is
//! sealed: one more fsync after its slot says its whole length.
//!
//! # Durability
//! * [`ValueLog::sync`] fsyncs the active segment. Before a new segment is started the old one
//!   is sealed, so one sync covers every record appended before it, in any segment.
//! * At open, [`ValueLog::open`] hands every intact record after a given position to the
//!   caller in order (replay) and checks the segment that position is in from its start.
//!   Damage inside the synced part of a segment (below its synced length, or below the
//!   position the index already covers) is corruption: the open fails naming the file and the
//!   byte offset. So is damage anywhere in a segment that is not the newest, and a segment
//!   shorter than its synced length. Only bytes past the synced length of the newest segment
//!   are a torn tail (writes no fsync covered), and cut off. A version 1 segment has no synced
//!   length: damage at the end of the newest one is cut as before.
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{BufReader, ErrorKind, Read};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard};

use bytes::Bytes;
use rill_storage::{Error, Keyspace, Result};

use crate::record;

/// The first bytes of every segment file this build writes (format name and version).
pub const SEGMENT_MAGIC: &[u8; 8] = b"RILLVLG2";

/// The first bytes of a segment written by an earlier build (records right after the magic, no
/// synced length).
pub const SEGMENT_MAGIC_V1: &[u8; 8] = b"RILLVLG1";

const MAGIC_BYTES: u64 = SEGMENT_MAGIC.len() as u64;

/// The header of a version 2 segment: magic and synced-length slots; records start after it.
/// One 4 KiB page: small next to a segment (128 MiB by default), and the unit a page cache
/// rewrites.
pub const SEGMENT_HEADER_BYTES: u64 = 4096;

/// Where the two synced-length slots are: in different 512-byte sectors of the header, so a
/// torn write of one (a sector is what a disk writes atomically) leaves the other intact.
const SLOT_OFFSETS: [u64; 2] = [8, 2048];

/// Encoded size of a synced-length slot.
const SLOT_BYTES: usize = 16;

/// Version byte of the synced-length slot format.
const SLOT_VERSION: u8 = 1;

/// The layout of one segment file, by its magic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentFormat {
    /// Written by earlier builds: records from byte 8, no synced length.
    V1,
    /// Records from [`SEGMENT_HEADER_BYTES`], a synced length in the header.
    V2,
}

impl SegmentFormat {
    fn of(magic: &[u8]) -> Option<Self> {
        match magic {
            m if m == SEGMENT_MAGIC => Some(Self::V2),
            m if m == SEGMENT_MAGIC_V1 => Some(Self::V1),
            _ => None,
        }
    }

    /// Where the first record starts.
    pub fn data_start(self) -> u64 {
        match self {
            Self::V1 => MAGIC_BYTES,
            Self::V2 => SEGMENT_HEADER_BYTES,
        }
    }
}

fn io_err(what: impl std::fmt::Display, e: std::io::Error) -> Error {
    Error::Io(format!("{what}: {e}"))
}

fn encode_slot(synced_len: u64) -> [u8; SLOT_BYTES] {
    let mut out = [0; SLOT_BYTES];
    out[0] = SLOT_VERSION;
    out[4..12].copy_from_slice(&synced_len.to_le_bytes());
    let crc = crc32c::crc32c(&out[..12]);
    out[12..].copy_from_slice(&crc.to_le_bytes());
    out
}

/// The synced length a slot records; `None` for a slot never written, torn or damaged.
fn decode_slot(b: &[u8; SLOT_BYTES]) -> Option<u64> {
    let mut crc = [0; 4];
    crc.copy_from_slice(&b[12..]);
    if b[0] != SLOT_VERSION || b[1..4] != [0; 3] || crc32c::crc32c(&b[..12]) != u32::from_le_bytes(crc) {
        return None;
    }
    let mut len = [0; 8];
    len.copy_from_slice(&b[4..12]);
    Some(u64::from_le_bytes(len))
}

/// Both slots of a version 2 segment (`None` for one that does not decode).
fn read_slots(file: &File) -> std::io::Result<[Option<u64>; 2]> {
    let mut out = [None; 2];
    for (slot, at) in out.iter_mut().zip(SLOT_OFFSETS) {
        let mut b = [0; SLOT_BYTES];
        file.read_exact_at(&mut b, at)?;
        *slot = decode_slot(&b);
    }
    Ok(out)
}

/// Records `synced_len` in the slot that does not hold the larger synced length, so the other
/// one survives if this write is torn. Durable with the file's next fsync.
fn write_synced_len(file: &File, synced_len: u64) -> std::io::Result<()> {
    let victim = match read_slots(file)? {
        [None, _] => 0,
        [_, None] => 1,
        [Some(a), Some(b)] => usize::from(a > b),
    };
    file.write_all_at(&encode_slot(synced_len), SLOT_OFFSETS[victim])
}

/// What the gate knows of the active segment's durability.
#[derive(Debug, Default)]
struct GateState {
    /// The newest segment synced through the gate.
    segment: u64,
    /// Bytes of it the last completed fsync made durable.
    synced: u64,
    /// The synced length its header records (durable or about to be).
    recorded: u64,
}

/// Every fsync of the log goes through one gate, which remembers a failure. After a failed
/// fsync the kernel may have dropped the dirty pages and reports the error to one caller only:
/// a concurrent or later fsync of the same file can return success for data that is gone. So
/// fsyncs are serialised, and once one failed every later one fails too.
///
/// The gate also keeps the active segment's synced length up to date (see the module docs).
#[derive(Debug, Default)]
pub struct SyncGate {
    state: Mutex<GateState>,
    failed: AtomicBool,
}

impl SyncGate {
    fn lock(&self) -> Result<std::sync::MutexGuard<'_, GateState>> {
        let state = self.state.lock().map_err(|_| Error::Unavailable("value log sync lock poisoned".into()))?;
        if self.failed() {
            return Err(Error::Unavailable("an earlier fsync of the value log failed".into()));
        }
        Ok(state)
    }

    fn fsync(&self, file: &File, id: u64) -> Result<()> {
        file.sync_data().map_err(|e| {
            self.failed.store(true, Ordering::SeqCst);
            io_err(format_args!("syncing value log segment {id}"), e)
        })
    }

    fn record(&self, file: &File, id: u64, synced_len: u64) -> Result<()> {
        write_synced_len(file, synced_len).map_err(|e| {
            self.failed.store(true, Ordering::SeqCst);
            io_err(format_args!("recording the synced length of value log segment {id}"), e)
        })
    }

    /// fsyncs segment `file` (id `id`, a version 2 segment), whose first `len` bytes have been
    /// written. Its header is first told what the previous fsync of it made durable; `len` is
    /// durable when this returns.
    pub fn sync(&self, file: &File, id: u64, len: u64) -> Result<()> {
        let mut s = self.lock()?;
        if id > s.segment {
            // A new segment is created with its header as its synced length.
            *s = GateState { segment: id, synced: SEGMENT_HEADER_BYTES, recorded: SEGMENT_HEADER_BYTES };
        }
        let current = id == s.segment;
        if current && s.synced > s.recorded {
            self.record(file, id, s.synced)?;
            s.recorded = s.synced;
        }
        self.fsync(file, id)?;
        if current {
            s.synced = s.synced.max(len);
        }
        Ok(())
    }

    /// Seals segment `file` (id `id`) at `len` bytes: fsyncs it, records `len` as its synced
    /// length (version 2 only) and fsyncs again, so that its header covers all of it.
    pub fn seal(&self, file: &File, id: u64, len: u64, format: SegmentFormat) -> Result<()> {
        let mut s = self.lock()?;
        self.fsync(file, id)?;
        if format == SegmentFormat::V2 {
            self.record(file, id, len)?;
            self.fsync(file, id)?;
            if id >= s.segment {
                *s = GateState { segment: id, synced: len, recorded: len };
            }
        }
        Ok(())
    }

    /// True once an fsync failed.
    pub fn failed(&self) -> bool {
        self.failed.load(Ordering::SeqCst)
    }
}

/// What an fsync of the active segment needs, taken under the writer lock so that the fsync
/// itself can run without it: appends go on meanwhile, and `len` is what it covers for sure.
#[derive(Debug, Clone)]
pub struct SyncTarget {
    gate: Arc<SyncGate>,
    file: Arc<File>,
    id: u64,
    len: u64,
}

impl SyncTarget {
    /// fsyncs the segment: every record appended before the target was taken is durable when
    /// this returns.
    pub fn sync(&self) -> Result<()> {
        self.gate.sync(&self.file, self.id, self.len)
    }
}

/// Where a value lives in the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ValuePointer {
    /// Segment id.
    pub segment: u64,
    /// Byte offset of the value in the segment file.
    pub offset: u64,
    /// Value length.
    pub len: u32,
    /// CRC32C of the value, checked on every read.
    pub crc: u32,
}

impl ValuePointer {
    /// Encoded size.
    pub const BYTES: usize = 24;

    /// The stored form (what RocksDB holds for a Raft log key).
    pub fn encode(&self) -> [u8; Self::BYTES] {
        let mut out = [0; Self::BYTES];
        out[..8].copy_from_slice(&self.segment.to_le_bytes());
        out[8..16].copy_from_slice(&self.offset.to_le_bytes());
        out[16..20].copy_from_slice(&self.len.to_le_bytes());
        out[20..].copy_from_slice(&self.crc.to_le_bytes());
        out
    }

    /// Parses [`ValuePointer::encode`]'s output.
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        let b: &[u8; Self::BYTES] = bytes.try_into().map_err(|_| {
            Error::Corruption(format!("value pointer of {} bytes, expected {}", bytes.len(), Self::BYTES))
        })?;
        let u64_at =
            |i: usize| u64::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3], b[i + 4], b[i + 5], b[i + 6], b[i + 7]]);
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        Ok(Self { segment: u64_at(0), offset: u64_at(8), len: u32_at(16), crc: u32_at(20) })
    }
}

/// A position in the log: a segment and a byte offset in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct LogPosition {
    /// Segment id.
    pub segment: u64,
    /// Byte offset in the segment file.
    pub offset: u64,
}

impl LogPosition {
    /// The stored form.
    pub fn encode(&self) -> [u8; 16] {
        let mut out = [0; 16];
        out[..8].copy_from_slice(&self.segment.to_be_bytes());
        out[8..].copy_from_slice(&self.offset.to_be_bytes());
        out
    }

    /// Parses [`LogPosition::encode`]'s output.
    pub fn decode(bytes: &[u8]) -> Result<Self> {
        let b: &[u8; 16] =
            bytes.try_into().map_err(|_| Error::Corruption(format!("log position of {} bytes", bytes.len())))?;
        let mut seg = [0; 8];
        let mut off = [0; 8];
        seg.copy_from_slice(&b[..8]);
        off.copy_from_slice(&b[8..]);
        Ok(Self { segment: u64::from_be_bytes(seg), offset: u64::from_be_bytes(off) })
    }
}

/// The segment files of a log, shared by the writer and every reader.
pub type SegmentFiles = Arc<RwLock<BTreeMap<u64, Arc<File>>>>;

/// The file of the segment `ptr` points into. Look it up while still holding the guard under
/// which the pointer was read: a segment is removed only when no pointer into it is left, and
/// an open file stays readable after its removal.
pub fn segment_of(files: &BTreeMap<u64, Arc<File>>, ptr: ValuePointer) -> Result<Arc<File>> {
    files
        .get(&ptr.segment)
        .cloned()
        .ok_or_else(|| Error::Corruption(format!("value log segment {} is missing", ptr.segment)))
}

/// Reads the value `ptr` addresses in its segment `file` and checks its checksum.
pub fn read_value(file: &File, ptr: ValuePointer) -> Result<Bytes> {
    let mut buf = vec![0; ptr.len as usize];
    file.read_exact_at(&mut buf, ptr.offset)
        .map_err(|e| io_err(format_args!("reading value log segment {} at {}", ptr.segment, ptr.offset), e))?;
    if crc32c::crc32c(&buf) != ptr.crc {
        return Err(Error::Corruption(format!(
            "value of {} bytes at value log segment {} offset {} fails its checksum",
            ptr.len, ptr.segment, ptr.offset
        )));
    }
    Ok(Bytes::from(buf))
}

/// The length of segment `id`'s file.
pub fn file_len(file: &File, id: u64) -> Result<u64> {
    file.metadata().map(|m| m.len()).map_err(|e| io_err(format_args!("reading value log segment {id}"), e))
}

/// Buffer of a segment walk: large enough that a walk reads in big sequential chunks, small
/// enough to keep its memory flat. Values shorter than this are read through (a skip lands in
/// the buffer) and longer ones skipped. Skipping shorter ones with small reads would save
/// little: the kernel's readahead (128 KiB by default) reads them from the disk anyway.
const WALK_BUFFER_BYTES: usize = 256 << 10;

/// Reads a segment front to back through a bounded buffer, with positioned reads (the file is
/// shared with readers and the writer, and no one moves its cursor).
pub struct SegmentCursor {
    file: Arc<File>,
    id: u64,
    len: u64,
    pos: u64,
    buf: Vec<u8>,
    /// File position of `buf[0]`.
    buf_at: u64,
    read_bytes: u64,
}

impl SegmentCursor {
    fn new(file: Arc<File>, id: u64) -> Result<Self> {
        let len = file_len(&file, id)?;
        let mut cursor = Self { file, id, len, pos: 0, buf: Vec::new(), buf_at: 0, read_bytes: 0 };
        let mut magic = [0; MAGIC_BYTES as usize];
        record::OpSource::read_exact(&mut cursor, &mut magic)?;
        let Some(format) = SegmentFormat::of(&magic) else {
            return Err(Error::Corruption(format!("value log segment {id} does not start with {SEGMENT_MAGIC:?}")));
        };
        if len < format.data_start() {
            return Err(Error::Corruption(format!("value log segment {id} is shorter than its header ({len} bytes)")));
        }
        cursor.pos = format.data_start();
        Ok(cursor)
    }

    fn read_at(&mut self, out: &mut [u8], at: u64) -> Result<()> {
        self.read_bytes += out.len() as u64;
        self.file.read_exact_at(out, at).map_err(|e| io_err(format_args!("reading value log segment {}", self.id), e))
    }
}

impl record::OpSource for SegmentCursor {
    fn read_exact(&mut self, out: &mut [u8]) -> Result<()> {
        let end = self.pos + out.len() as u64;
        if end > self.len {
            return Err(Error::Corruption(format!(
                "value log segment {} ends inside a record (at byte {})",
                self.id, self.len
            )));
        }
        let buf_end = self.buf_at + self.buf.len() as u64;
        if self.pos < self.buf_at || end > buf_end {
            if out.len() >= WALK_BUFFER_BYTES {
                self.read_at(out, self.pos)?;
                self.pos = end;
                return Ok(());
            }
            let n = (self.len - self.pos).min(WALK_BUFFER_BYTES as u64) as usize;
            let mut buf = std::mem::take(&mut self.buf);
            buf.resize(n, 0);
            self.read_at(&mut buf, self.pos)?;
            self.buf = buf;
            self.buf_at = self.pos;
        }
        let from = (self.pos - self.buf_at) as usize;
        out.copy_from_slice(&self.buf[from..from + out.len()]);
        self.pos = end;
        Ok(())
    }

    fn skip(&mut self, n: u64) {
        self.pos = self.pos.saturating_add(n);
    }

    fn position(&self) -> u64 {
        self.pos
    }
}

/// A Raft log put found walking a segment: its key and where its value is (a
/// [`ValuePointer`] without the checksum, which only reading the value gives).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundPut {
    /// The key.
    pub key: Vec<u8>,
    /// Byte offset of the value in the segment file.
    pub offset: u64,
    /// Value length.
    pub len: u32,
}

/// Walks the records of a closed segment in order, yielding its Raft log puts without reading
/// their values: memory is one buffer and one key, whatever the records' sizes.
///
/// Only a segment no one appends to may be walked (its length is read once). Record checksums
/// are not checked (that needs whole bodies); the structure is, and a caller reading a value
/// checks it against the pointer's own checksum.
pub struct SegmentWalk {
    cursor: SegmentCursor,
    body_end: u64,
    ops_left: u32,
}

impl SegmentWalk {
    /// Starts a walk of segment `id`, whose file is `file`.
    pub fn new(file: Arc<File>, id: u64) -> Result<Self> {
        let cursor = SegmentCursor::new(file, id)?;
        Ok(Self { body_end: cursor.pos, cursor, ops_left: 0 })
    }

    /// The next Raft log put, in log order; `None` at the end of the segment.
    pub fn next_log_put(&mut self) -> Result<Option<FoundPut>> {
        use record::OpSource;
        loop {
            if self.ops_left == 0 {
                let at = self.cursor.position();
                if at != self.body_end {
                    return Err(Error::Corruption(format!(
                        "value log segment {} has a record whose ops end at byte {at}, not at its end {}",
                        self.cursor.id, self.body_end
                    )));
                }
                if at >= self.cursor.len {
                    return Ok(None);
                }
                let mut header = [0; record::HEADER_BYTES as usize];
                self.cursor.read_exact(&mut header)?;
                let (body_len, _) = record::parse_header(&header);
                self.body_end = at + record::HEADER_BYTES + u64::from(body_len);
                if u64::from(body_len) < record::MIN_BODY_BYTES || self.body_end > self.cursor.len {
                    return Err(Error::Corruption(format!(
                        "value log segment {} has a record of {body_len} bytes at byte {at} that does not fit",
                        self.cursor.id
                    )));
                }
                self.ops_left = record::read_op_count(&mut self.cursor)?;
                continue;
            }
            self.ops_left -= 1;
            if let record::StreamedOp::Put { keyspace: Keyspace::RaftLog, key, value_at, value_len } =
                record::read_op(&mut self.cursor, self.body_end)?
            {
                return Ok(Some(FoundPut { key, offset: value_at, len: value_len }));
            }
        }
    }

    /// Bytes read from the file so far.
    pub fn read_bytes(&self) -> u64 {
        self.cursor.read_bytes
    }
}

/// What [`ValueLog::open`] found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ReplayStats {
    /// Records handed to the caller.
    pub records: u64,
    /// Bytes cut off a torn tail.
    pub torn_bytes: u64,
}

struct Active {
    id: u64,
    file: Arc<File>,
    len: u64,
}

/// The writer's side of the log.
pub struct ValueLog {
    dir: PathBuf,
    segment_bytes: u64,
    files: SegmentFiles,
    active: Active,
    gate: Arc<SyncGate>,
}

impl std::fmt::Debug for ValueLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ValueLog").field("dir", &self.dir).field("active", &self.active.id).finish()
    }
}

fn segment_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("{id:020}.vlog"))
}

fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(|e| io_err(format_args!("syncing {}", dir.display()), e))
}

fn list_segments(dir: &Path) -> Result<Vec<u64>> {
    let mut ids = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|e| io_err(format_args!("listing {}", dir.display()), e))?;
    for entry in entries {
        let entry = entry.map_err(|e| io_err(format_args!("listing {}", dir.display()), e))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if let Some(id) = name.strip_suffix(".vlog").and_then(|stem| stem.parse::<u64>().ok()) {
            ids.push(id);
        }
    }
    ids.sort_unstable();
    Ok(ids)
}

/// How a segment's replay ended.
enum SegmentEnd {
    /// Every byte was an intact record.
    Clean,
    /// The bytes from this offset on are a torn tail (past the synced length of the newest
    /// segment), to be cut off; 0: the segment's creation was cut short.
    TornAt(u64),
}

/// The format of segment file `file` (at `path`, `len` bytes long), if it has a whole header.
fn format_of(file: &File, len: u64) -> Option<SegmentFormat> {
    let mut magic = [0; MAGIC_BYTES as usize];
    if len < MAGIC_BYTES || file.read_exact_at(&mut magic, 0).is_err() {
        return None;
    }
    SegmentFormat::of(&magic).filter(|f| len >= f.data_start())
}

/// The synced length a segment's header records (`None` for a version 1 segment); refuses a
/// segment shorter than it.
fn synced_len(file: &File, path: &Path, len: u64, format: SegmentFormat) -> Result<Option<u64>> {
    if format == SegmentFormat::V1 {
        return Ok(None);
    }
    let synced = match read_slots(file).map_err(|e| io_err(format_args!("reading {}", path.display()), e))? {
        [None, None] => {
            return Err(Error::Corruption(format!(
                "{}: both synced-length slots (byte offsets {} and {}) are damaged",
                path.display(),
                SLOT_OFFSETS[0],
                SLOT_OFFSETS[1]
            )))
        }
        [a, b] => a.max(b).unwrap_or(SEGMENT_HEADER_BYTES),
    };
    if len < synced {
        return Err(Error::Corruption(format!(
            "{}: the file is {len} bytes long but its first {synced} bytes were synced: the bytes from offset {len} \
             on are missing",
            path.display()
        )));
    }
    Ok(Some(synced))
}

/// Checks the header of a segment that is not replayed: a known format, and at least as long
/// as its synced length.
fn check_segment_header(dir: &Path, id: u64) -> Result<()> {
    let path = segment_path(dir, id);
    let file = File::open(&path).map_err(|e| io_err(format_args!("opening {}", path.display()), e))?;
    let len = file_len(&file, id)?;
    let Some(format) = format_of(&file, len) else {
        return Err(Error::Corruption(format!("{}: no segment header at byte offset 0", path.display())));
    };
    synced_len(&file, &path, len, format).map(|_| ())
}

/// Hands every intact record of segment `id` at or after byte `from` to `apply`, in order,
/// after checking every record before it too. Damage is corruption (an error naming the file
/// and byte offset) below the segment's synced length or below `from`, and anywhere in a
/// segment that is not the `newest`; past them it is a torn tail.
fn replay_segment(
    dir: &Path,
    id: u64,
    from: u64,
    newest: bool,
    apply: &mut impl FnMut(LogPosition, Bytes) -> Result<()>,
    stats: &mut ReplayStats,
) -> Result<SegmentEnd> {
    let path = segment_path(dir, id);
    let corrupt = |at: u64, what: &str, why: String| {
        Err(Error::Corruption(format!("{}: {what} at byte offset {at}, {why}", path.display())))
    };
    // Where damage stops being a torn tail (the durable part, and what the index covers).
    let classify = |at: u64, what: &str, protected: u64| {
        if at < protected {
            corrupt(
                at,
                what,
                format!(
                    "inside the first {protected} bytes, which are known durable; refusing to open rather than \
                     cut acknowledged writes"
                ),
            )
        } else if !newest {
            corrupt(at, what, "in a segment that is not the newest".into())
        } else {
            Ok(SegmentEnd::TornAt(at))
        }
    };
    let mut file = File::open(&path).map_err(|e| io_err(format_args!("opening {}", path.display()), e))?;
    let len = file.metadata().map_err(|e| io_err(format_args!("reading {}", path.display()), e))?.len();
    let Some(format) = format_of(&file, len) else {
        // A segment's header is written and fsynced before any record: a file no longer than
        // a header without a whole one is a creation cut short.
        if len <= SEGMENT_HEADER_BYTES {
            return classify(0, "no complete segment header", from);
        }
        return corrupt(0, "no segment header", format!("in a file of {len} bytes"));
    };
    let synced = synced_len(&file, &path, len, format)?;
    let from = from.max(format.data_start());
    if from > len {
        return Err(Error::Corruption(format!(
            "{}: the file has {len} bytes but the engine's state covers it up to byte offset {from}",
            path.display()
        )));
    }
    let protected = synced.unwrap_or(0).max(from);
    let mut at = format.data_start();
    use std::io::Seek;
    file.seek(std::io::SeekFrom::Start(at)).map_err(|e| io_err(format_args!("reading {}", path.display()), e))?;
    let mut reader = BufReader::with_capacity(1 << 20, file);
    while at < len {
        let mut header = [0; record::HEADER_BYTES as usize];
        if len - at < record::HEADER_BYTES || reader.read_exact(&mut header).is_err() {
            return classify(at, "a record header cut short", protected);
        }
        let (body_len, crc) = record::parse_header(&header);
        // The encoder never writes a body shorter than its op count; a zeroed tail (a file
        // extended but not written before a power failure) would otherwise pass the checksum,
        // since the CRC32C of nothing is zero.
        if u64::from(body_len) < record::MIN_BODY_BYTES {
            return classify(at, "zeros, or a record length below the minimum,", protected);
        }
        if len - at - record::HEADER_BYTES < u64::from(body_len) {
            return classify(at, "a record longer than the rest of the file", protected);
        }
        let mut body = vec![0; body_len as usize];
        match reader.read_exact(&mut body) {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::UnexpectedEof => {
                return classify(at, "a record cut short", protected);
            }
            Err(e) => return Err(io_err(format_args!("reading {}", path.display()), e)),
        }
        if !record::body_is_intact(&body, crc) {
            return classify(at, "a record failing its checksum", protected);
        }
        let next = at + record::HEADER_BYTES + u64::from(body_len);
        if at >= from {
            apply(LogPosition { segment: id, offset: at }, Bytes::from(body))?;
            stats.records += 1;
        } else if next > from {
            return corrupt(at, "a record", format!("which the engine's state says ends at byte offset {from}"));
        }
        at = next;
    }
    Ok(SegmentEnd::Clean)
}

impl ValueLog {
    /// Opens the log in `dir` (creating it if needed), replays it and starts a new active
    /// segment.
    ///
    /// Every intact record at or after `from` (`None`: from the beginning) is handed to `apply`
    /// with its position, in log order; the records before it in its segment are checked, not
    /// handed over. Past the synced length of the newest segment, a torn tail is cut off (it
    /// holds writes no fsync covered); any other damage is an error naming the file and offset
    /// (see the module docs). Every segment from `from`'s on is sealed before this returns.
    pub fn open(
        dir: &Path,
        segment_bytes: u64,
        from: Option<LogPosition>,
        mut apply: impl FnMut(LogPosition, Bytes) -> Result<()>,
    ) -> Result<(Self, ReplayStats)> {
        std::fs::create_dir_all(dir).map_err(|e| io_err(format_args!("creating {}", dir.display()), e))?;
        if let Some(parent) = dir.parent() {
            sync_dir(parent)?;
        }
        let ids = list_segments(dir)?;
        let mut stats = ReplayStats::default();
        if let Some(from) = from {
            if !ids.contains(&from.segment) {
                return Err(Error::Corruption(format!(
                    "value log segment {} in {}, where replay starts, is missing",
                    from.segment,
                    dir.display()
                )));
            }
        }
        let mut kept = Vec::with_capacity(ids.len());
        for (i, &id) in ids.iter().enumerate() {
            let newest = i + 1 == ids.len();
            let start = match from {
                Some(f) if id < f.segment => {
                    check_segment_header(dir, id)?;
                    kept.push(id);
                    continue;
                }
                Some(f) if id == f.segment => f.offset,
                _ => 0,
            };
            match replay_segment(dir, id, start, newest, &mut apply, &mut stats)? {
                SegmentEnd::Clean => kept.push(id),
                SegmentEnd::TornAt(at) => {
                    let path = segment_path(dir, id);
                    let len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(at);
                    stats.torn_bytes = len.saturating_sub(at);
                    tracing::warn!(
                        file = %path.display(),
                        at,
                        bytes = stats.torn_bytes,
                        "cutting a torn tail (past the synced length) off the value log"
                    );
                    if at == 0 {
                        std::fs::remove_file(&path)
                            .map_err(|e| io_err(format_args!("removing {}", path.display()), e))?;
                        sync_dir(dir)?;
                    } else {
                        let f = OpenOptions::new()
                            .write(true)
                            .open(&path)
                            .and_then(|f| f.set_len(at).and_then(|()| f.sync_all()));
                        f.map_err(|e| io_err(format_args!("truncating {}", path.display()), e))?;
                        kept.push(id);
                    }
                }
            }
        }
        let gate = Arc::new(SyncGate::default());
        let mut files = BTreeMap::new();
        for id in kept {
            let path = segment_path(dir, id);
            // What was replayed may have survived a process crash only in the page cache; it is
            // about to be treated as stored (and flushed into the index), and writes will go to
            // a new segment, so it must be durable first, and its header must say so.
            let f = if from.is_none_or(|f| id >= f.segment) {
                let f = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(&path)
                    .map_err(|e| io_err(format_args!("opening {}", path.display()), e))?;
                let len = file_len(&f, id)?;
                let format = format_of(&f, len).ok_or_else(|| {
                    Error::Corruption(format!("{}: no segment header at byte offset 0", path.display()))
                })?;
                gate.seal(&f, id, len, format)?;
                f
            } else {
                File::open(&path).map_err(|e| io_err(format_args!("opening {}", path.display()), e))?
            };
            files.insert(id, Arc::new(f));
        }
        let next = ids.last().map_or(1, |last| last + 1);
        let active = Self::create_segment(dir, next)?;
        files.insert(next, active.file.clone());
        let log = Self { dir: dir.to_path_buf(), segment_bytes, files: Arc::new(RwLock::new(files)), active, gate };
        Ok((log, stats))
    }

    /// Creates segment `id` with its header (recording the header itself as synced), durably.
    fn create_segment(dir: &Path, id: u64) -> Result<Active> {
        let path = segment_path(dir, id);
        let mut header = vec![0; SEGMENT_HEADER_BYTES as usize];
        header[..MAGIC_BYTES as usize].copy_from_slice(SEGMENT_MAGIC);
        let slot = SLOT_OFFSETS[0] as usize;
        header[slot..slot + SLOT_BYTES].copy_from_slice(&encode_slot(SEGMENT_HEADER_BYTES));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .and_then(|f| f.write_all_at(&header, 0).map(|()| f))
            .and_then(|f| f.sync_all().map(|()| f))
            .map_err(|e| io_err(format_args!("creating {}", path.display()), e))?;
        sync_dir(dir)?;
        Ok(Active { id, file: Arc::new(file), len: SEGMENT_HEADER_BYTES })
    }

    /// The segment files, for readers.
    pub fn files(&self) -> SegmentFiles {
        self.files.clone()
    }

    /// Locks the segment map for reading.
    pub fn read_files(files: &SegmentFiles) -> Result<RwLockReadGuard<'_, BTreeMap<u64, Arc<File>>>> {
        files.read().map_err(|_| Error::Unavailable("value log segment map poisoned".into()))
    }

    /// The id of the segment being written.
    pub fn active_segment(&self) -> u64 {
        self.active.id
    }

    /// The position right after the last record.
    pub fn end(&self) -> LogPosition {
        LogPosition { segment: self.active.id, offset: self.active.len }
    }

    /// Appends one encoded record (see [`record::encode`]) and returns where it starts. Starts a
    /// new segment first when this one is full (fsyncing the old one).
    pub fn append(&mut self, record: &[u8]) -> Result<LogPosition> {
        // `segment_bytes` counts records, not the header.
        let records = self.active.len - SEGMENT_HEADER_BYTES;
        if records > 0 && records + record.len() as u64 > self.segment_bytes {
            self.rotate()?;
        }
        let at = LogPosition { segment: self.active.id, offset: self.active.len };
        self.active
            .file
            .write_all_at(record, at.offset)
            .map_err(|e| io_err(format_args!("appending to value log segment {}", at.segment), e))?;
        self.active.len += record.len() as u64;
        Ok(at)
    }

    fn rotate(&mut self) -> Result<()> {
        self.seal()?;
        let next = Self::create_segment(&self.dir, self.active.id + 1)?;
        let mut files = self.files.write().map_err(|_| Error::Unavailable("value log segment map poisoned".into()))?;
        files.insert(next.id, next.file.clone());
        drop(files);
        self.active = next;
        Ok(())
    }

    /// What an fsync of every record appended so far needs, to run it without holding the
    /// writer.
    pub fn sync_target(&self) -> SyncTarget {
        SyncTarget { gate: self.gate.clone(), file: self.active.file.clone(), id: self.active.id, len: self.active.len }
    }

    /// The gate every fsync of this log goes through.
    pub fn gate(&self) -> Arc<SyncGate> {
        self.gate.clone()
    }

    /// Makes every appended record durable (the header records the previous fsync's length).
    pub fn sync(&self) -> Result<()> {
        self.sync_target().sync()
    }

    /// Makes every appended record durable and has the active segment's header say so: two
    /// fsyncs, for a rotation or a clean close.
    pub fn seal(&self) -> Result<()> {
        self.gate.seal(&self.active.file, self.active.id, self.active.len, SegmentFormat::V2)
    }

    /// Deletes segments `ids` (none of them active).
    pub fn remove(&mut self, ids: &[u64]) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let mut files = self.files.write().map_err(|_| Error::Unavailable("value log segment map poisoned".into()))?;
        for id in ids.iter().filter(|id| **id != self.active.id) {
            files.remove(id);
            let path = segment_path(&self.dir, *id);
            std::fs::remove_file(&path).map_err(|e| io_err(format_args!("removing {}", path.display()), e))?;
        }
        drop(files);
        sync_dir(&self.dir)
    }

    /// Ids of every segment, oldest first.
    pub fn segment_ids(&self) -> Result<Vec<u64>> {
        Ok(Self::read_files(&self.files)?.keys().copied().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rill_storage::WriteBatch;

    fn batch(i: u8) -> Vec<u8> {
        let mut b = WriteBatch::new();
        b.put(Keyspace::RaftLog, vec![i], vec![i; 100]);
        record::encode(&b).unwrap().record
    }

    fn open(dir: &Path, from: Option<LogPosition>) -> (ValueLog, Vec<LogPosition>, ReplayStats) {
        let mut seen = Vec::new();
        let (log, stats) = ValueLog::open(dir, 1000, from, |at, _| {
            seen.push(at);
            Ok(())
        })
        .unwrap();
        (log, seen, stats)
    }

    #[test]
    fn records_replay_in_order_across_segments_from_a_position() {
        let dir = tempfile::tempdir().unwrap();
        let (mut log, seen, _) = open(dir.path(), None);
        assert!(seen.is_empty());
        let at: Vec<LogPosition> = (0..20).map(|i| log.append(&batch(i)).unwrap()).collect();
        assert!(at.last().unwrap().segment > at[0].segment, "1,000-byte segments must have rotated");
        log.sync().unwrap();
        drop(log);
        let (_, seen, stats) = open(dir.path(), None);
        assert_eq!(seen, at);
        assert_eq!(stats, ReplayStats { records: 20, torn_bytes: 0 });
        let (_, seen, _) = open(dir.path(), Some(at[7]));
        assert_eq!(seen, at[7..]);
    }

    #[test]
    fn a_torn_tail_is_cut_and_damage_elsewhere_refuses_the_open() {
        let dir = tempfile::tempdir().unwrap();
        let (mut log, _, _) = open(dir.path(), None);
        let first = log.append(&batch(1)).unwrap();
        let second = log.append(&batch(2)).unwrap();
        drop(log);
        let path = segment_path(dir.path(), second.segment);
        let full = std::fs::metadata(&path).unwrap().len();
        OpenOptions::new().write(true).open(&path).unwrap().set_len(full - 3).unwrap();
        let (log, seen, stats) = open(dir.path(), None);
        assert_eq!(seen, vec![first]);
        assert_eq!(stats.torn_bytes, full - 3 - second.offset);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), second.offset);
        drop(log);

        // Flip a body byte of the first record: it is no longer at the tail of the newest segment.
        let f = OpenOptions::new().read(true).write(true).open(&path).unwrap();
        f.write_all_at(&[0xff], first.offset + record::HEADER_BYTES + 2).unwrap();
        let err = ValueLog::open(dir.path(), 1000, None, |_, _| Ok(())).unwrap_err();
        assert!(matches!(err, Error::Corruption(_)), "{err}");
    }

    #[test]
    fn a_zeroed_tail_is_torn_not_a_record() {
        let dir = tempfile::tempdir().unwrap();
        let (mut log, _, _) = open(dir.path(), None);
        let first = log.append(&batch(1)).unwrap();
        let end = log.end();
        log.active.file.write_all_at(&[0; 64], end.offset).unwrap();
        drop(log);
        let (_, seen, stats) = open(dir.path(), None);
        assert_eq!(seen, vec![first]);
        assert_eq!(stats.torn_bytes, 64);
    }

    fn flip_byte(path: &Path, at: u64) {
        let f = OpenOptions::new().read(true).write(true).open(path).unwrap();
        let mut b = [0];
        f.read_exact_at(&mut b, at).unwrap();
        f.write_all_at(&[!b[0]], at).unwrap();
    }

    fn open_err(dir: &Path) -> String {
        match ValueLog::open(dir, 1000, None, |_, _| Ok(())) {
            Ok(_) => panic!("the open succeeded"),
            Err(Error::Corruption(m)) => m,
            Err(e) => panic!("not a corruption error: {e}"),
        }
    }

    /// Three records, the first two synced by one fsync and the third by a second one: the
    /// header records the first fsync's length (what a second fsync cut short by a power
    /// failure leaves durable for sure).
    fn three_records_two_syncs(dir: &Path) -> (Vec<LogPosition>, PathBuf) {
        let (mut log, _, _) = open(dir, None);
        let r1 = log.append(&batch(1)).unwrap();
        let r2 = log.append(&batch(2)).unwrap();
        log.sync().unwrap();
        let r3 = log.append(&batch(3)).unwrap();
        log.sync().unwrap();
        let path = segment_path(dir, r1.segment);
        let f = File::open(&path).unwrap();
        assert_eq!(read_slots(&f).unwrap().into_iter().flatten().max(), Some(r3.offset), "the first sync's length");
        (vec![r1, r2, r3], path)
    }

    /// Damage inside the synced part (a flipped byte, zeros, a length that runs past the
    /// file, a file cut below its synced length) refuses the open, naming the file and offset.
    #[test]
    fn damage_inside_the_synced_part_refuses_the_open_naming_file_and_offset() {
        let dir = tempfile::tempdir().unwrap();
        let (at, path) = three_records_two_syncs(dir.path());
        let pristine = std::fs::read(&path).unwrap();
        let restore = || std::fs::write(&path, &pristine).unwrap();

        flip_byte(&path, at[1].offset + record::HEADER_BYTES + 2);
        let m = open_err(dir.path());
        assert!(m.contains(&path.display().to_string()), "{m}");
        assert!(m.contains(&format!("checksum at byte offset {}", at[1].offset)), "{m}");
        assert!(m.contains("known durable"), "{m}");
        restore();

        let f = OpenOptions::new().write(true).open(&path).unwrap();
        f.write_all_at(&[0; 8], at[0].offset).unwrap();
        let m = open_err(dir.path());
        assert!(m.contains(&format!("zeros, or a record length below the minimum, at byte offset {}", at[0].offset)));
        restore();

        f.write_all_at(&u32::MAX.to_le_bytes(), at[1].offset).unwrap();
        let m = open_err(dir.path());
        assert!(m.contains(&format!("longer than the rest of the file at byte offset {}", at[1].offset)), "{m}");
        restore();

        f.set_len(at[1].offset + 5).unwrap();
        let m = open_err(dir.path());
        assert!(m.contains(&format!("bytes from offset {} on are missing", at[1].offset + 5)), "{m}");
        restore();

        // Both slots damaged: the synced length is unknown, and that is corruption too.
        for slot in SLOT_OFFSETS {
            flip_byte(&path, slot + 5);
        }
        let m = open_err(dir.path());
        assert!(m.contains("both synced-length slots"), "{m}");
        restore();
        // One damaged slot is a torn slot write: the other one is used.
        flip_byte(&path, SLOT_OFFSETS[1] + 5);
        let (_, seen, _) = open(dir.path(), None);
        assert_eq!(seen, at);
    }

    /// Past the synced length of the newest segment, damage is a torn tail and is cut off; the
    /// open then seals what it kept, so the same damage later would be corruption.
    #[test]
    fn damage_past_the_synced_length_is_cut_as_torn() {
        let dir = tempfile::tempdir().unwrap();
        let (at, path) = three_records_two_syncs(dir.path());
        let full = std::fs::metadata(&path).unwrap().len();
        flip_byte(&path, at[2].offset + record::HEADER_BYTES + 2);
        let (log, seen, stats) = open(dir.path(), None);
        assert_eq!(seen, at[..2]);
        assert_eq!(stats.torn_bytes, full - at[2].offset);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), at[2].offset);
        drop(log);
        let f = File::open(&path).unwrap();
        assert_eq!(read_slots(&f).unwrap().into_iter().flatten().max(), Some(at[2].offset), "sealed at open");
        flip_byte(&path, at[1].offset + record::HEADER_BYTES + 2);
        assert!(open_err(dir.path()).contains(&format!("byte offset {}", at[1].offset)));
    }

    /// A rotation seals the segment it closes: its header covers the whole file.
    #[test]
    fn a_rotation_seals_the_closed_segment() {
        let dir = tempfile::tempdir().unwrap();
        let (mut log, _, _) = open(dir.path(), None);
        let first = log.append(&batch(1)).unwrap();
        while log.append(&batch(2)).unwrap().segment == first.segment {}
        let path = segment_path(dir.path(), first.segment);
        let f = File::open(&path).unwrap();
        let len = f.metadata().unwrap().len();
        assert_eq!(read_slots(&f).unwrap().into_iter().flatten().max(), Some(len));
    }

    /// A data directory of version 1 segments (no synced length) opens as before: a torn tail
    /// of the newest is cut, its records replay, and new segments are version 2.
    #[test]
    fn version_1_segments_without_a_synced_length_still_open() {
        let dir = tempfile::tempdir().unwrap();
        let mut old = SEGMENT_MAGIC_V1.to_vec();
        let mut at = Vec::new();
        for i in 0..3 {
            at.push(LogPosition { segment: 7, offset: old.len() as u64 });
            old.extend_from_slice(&batch(i));
        }
        std::fs::write(segment_path(dir.path(), 6), [&SEGMENT_MAGIC_V1[..], &batch(9)].concat()).unwrap();
        let intact = old.len() as u64;
        old.extend_from_slice(&batch(3)[..20]);
        std::fs::write(segment_path(dir.path(), 7), &old).unwrap();
        let (mut log, seen, stats) = open(dir.path(), None);
        assert_eq!(seen.len(), 4);
        assert_eq!(seen[1..], at);
        assert_eq!(stats.torn_bytes, 20);
        assert_eq!(std::fs::metadata(segment_path(dir.path(), 7)).unwrap().len(), intact);
        assert_eq!(log.active_segment(), 8);
        let next = log.append(&batch(4)).unwrap();
        assert_eq!(next, LogPosition { segment: 8, offset: SEGMENT_HEADER_BYTES });
        log.sync().unwrap();
        drop(log);
        let (_, seen, _) = open(dir.path(), Some(at[1]));
        assert_eq!(seen, [&at[1..], &[next]].concat());
        // A version 1 segment that is not the newest keeps today's rule: damage is corruption.
        flip_byte(&segment_path(dir.path(), 7), at[2].offset + record::HEADER_BYTES + 1);
        let m = open_err(dir.path());
        assert!(m.contains("not the newest") && m.contains(&format!("byte offset {}", at[2].offset)), "{m}");
    }

    /// A walk yields exactly the Raft log puts, in order, with the offsets their values have;
    /// other ops and keyspaces are skipped, and a segment cut inside a record is corruption.
    #[test]
    fn a_segment_walk_finds_every_log_put_where_its_value_is() {
        let dir = tempfile::tempdir().unwrap();
        let (mut log, _, _) = open(dir.path(), None);
        let mut expected = Vec::new();
        for i in 0..5u8 {
            let mut b = WriteBatch::new();
            b.put(Keyspace::State, vec![i], vec![i; 10]);
            b.put(Keyspace::RaftLog, vec![1, i], vec![i; 50 + usize::from(i)]);
            b.delete_range(Keyspace::RaftLog, vec![0], vec![0, i]);
            b.delete(Keyspace::RaftLog, vec![2, i]);
            b.put(Keyspace::RaftLog, vec![3, i], Vec::new());
            let enc = record::encode(&b).unwrap();
            let at = log.append(&enc.record).unwrap();
            assert_eq!(at.segment, log.active_segment(), "one segment in this test");
            for (op, offset) in b.ops().iter().zip(&enc.value_offsets) {
                if let rill_storage::WriteOp::Put { keyspace: Keyspace::RaftLog, key, value } = op {
                    let offset = at.offset + offset.unwrap();
                    expected.push(FoundPut { key: key.clone(), offset, len: value.len() as u32 });
                }
            }
        }
        let id = log.active_segment();
        let file =
            segment_of(&log.files().read().unwrap(), ValuePointer { segment: id, offset: 0, len: 0, crc: 0 }).unwrap();
        let mut walk = SegmentWalk::new(file.clone(), id).unwrap();
        let mut found = Vec::new();
        while let Some(put) = walk.next_log_put().unwrap() {
            found.push(put);
        }
        assert_eq!(found, expected);
        assert_eq!(walk.read_bytes(), log.end().offset);
        let seg = std::fs::read(segment_path(dir.path(), id)).unwrap();
        // Two log puts per record: the third record's first.
        assert_eq!(&seg[found[4].offset as usize..][..found[4].len as usize], &[2; 52]);

        file.set_len(log.end().offset - 3).unwrap();
        let mut walk = SegmentWalk::new(file, id).unwrap();
        let err = loop {
            match walk.next_log_put() {
                Ok(Some(_)) => {}
                Ok(None) => panic!("a cut segment walked to its end"),
                Err(e) => break e,
            }
        };
        assert!(matches!(err, Error::Corruption(_)), "{err}");
    }

    #[test]
    fn values_are_checksummed_on_read() {
        let dir = tempfile::tempdir().unwrap();
        let (mut log, _, _) = open(dir.path(), None);
        let rec = batch(9);
        let at = log.append(&rec).unwrap();
        let body = Bytes::from(rec[record::HEADER_BYTES as usize..].to_vec());
        let offset = record::decode(&body).unwrap().value_offsets[0].unwrap();
        let ptr =
            ValuePointer { segment: at.segment, offset: at.offset + offset, len: 100, crc: crc32c::crc32c(&[9; 100]) };
        assert_eq!(ValuePointer::decode(&ptr.encode()).unwrap(), ptr);
        let file = segment_of(&log.files().read().unwrap(), ptr).unwrap();
        assert_eq!(read_value(&file, ptr).unwrap().as_ref(), &[9; 100]);
        let bad = ValuePointer { crc: ptr.crc ^ 1, ..ptr };
        assert!(matches!(read_value(&file, bad), Err(Error::Corruption(_))));
        let elsewhere = ValuePointer { segment: 99, ..ptr };
        assert!(matches!(segment_of(&log.files().read().unwrap(), elsewhere), Err(Error::Corruption(_))));
    }
}
