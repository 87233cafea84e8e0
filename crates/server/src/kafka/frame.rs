//! Kafka's framing: every request and answer is a 32-bit big-endian length and that many bytes.
//!
//! A frame's length is checked against `[kafka] max-request-bytes` before anything is
//! allocated, and its bytes are taken from the node's request bytes budget (the one the gRPC
//! listener uses, `[limits] max-request-bytes-in-flight`) before they are read; they are held
//! until the request is answered. A frame that claims more than the limit, or arrives slower
//! than the budget allows a message to take, closes its connection: its bytes cannot be skipped
//! without reading them, and a client that sends them is not speaking Kafka's protocol.

use bytes::{Buf, Bytes};
use kafka_protocol::messages::{ApiKey, RequestHeader};
use kafka_protocol::protocol::Decodable;
use tokio::sync::OwnedSemaphorePermit;

/// Smallest request frame: API key, API version and correlation id (the client id follows).
const MIN_REQUEST_BYTES: usize = 8;

/// Why a connection closes instead of reading or answering its next request.
#[derive(Debug, thiserror::Error)]
pub enum Close {
    /// The client closed the connection between requests.
    #[error("the client closed the connection")]
    Eof,
    /// Reading failed, or the connection closed inside a frame.
    #[error("reading a request failed: {0}")]
    Io(#[from] std::io::Error),
    /// A frame longer than the listener takes, or with a negative length.
    #[error("a request frame of {declared} bytes is over the limit of {max} ([kafka] max-request-bytes)")]
    TooLarge {
        /// The length the frame declared.
        declared: i64,
        /// `[kafka] max-request-bytes`.
        max: u32,
    },
    /// A frame's bytes did not arrive in the time the budget allows.
    #[error("a request frame of {0} bytes did not arrive in time")]
    TooSlow(u32),
    /// A frame whose header cannot be read, or whose body does not decode as its API.
    #[error("malformed request: {0}")]
    Malformed(String),
    /// An API key this listener does not know.
    #[error("unknown API key {0}")]
    UnknownApi(i16),
    /// An API Kafka defines that this listener does not answer (it is not advertised).
    #[error("{0:?} is not supported by this listener")]
    UnsupportedApi(ApiKey),
    /// A version of a known API this listener does not answer (other than `ApiVersions`,
    /// which is answered per KIP-511).
    #[error("{api:?} version {version} is not supported (supported: {min}..={max})")]
    UnsupportedVersion {
        /// The API.
        api: ApiKey,
        /// The version asked for.
        version: i16,
        /// The lowest version this listener answers.
        min: i16,
        /// The highest.
        max: i16,
    },
    /// An answer could not be written.
    #[error("writing an answer failed: {0}")]
    Write(std::io::Error),
    /// An answer could not be encoded (a bug: every answer is built for the version asked).
    #[error("encoding an answer failed: {0}")]
    Encode(String),
}

/// One request frame's bytes, held against the node's budget until dropped.
#[derive(Debug)]
pub struct Frame {
    /// The frame without its length.
    pub bytes: Bytes,
    _held: Option<OwnedSemaphorePermit>,
}

impl Frame {
    /// A frame that holds nothing of a budget (tests, fuzzing).
    pub fn unbudgeted(bytes: Bytes) -> Self {
        Self { bytes, _held: None }
    }
}

/// Reads the next request frame from `reader`: `Err(Close::Eof)` when the client closed the
/// connection between frames.
#[cfg(not(madsim))]
pub async fn read_frame<R: tokio::io::AsyncRead + Unpin>(
    reader: &mut R,
    max_request_bytes: u32,
    budget: &std::sync::Arc<crate::api::inflight::Budget>,
) -> Result<Frame, Close> {
    use tokio::io::AsyncReadExt;
    let mut length = [0u8; 4];
    // A clean close is one before the first byte of a frame.
    let first = reader.read(&mut length[..1]).await?;
    if first == 0 {
        return Err(Close::Eof);
    }
    reader.read_exact(&mut length[1..]).await?;
    let declared = i32::from_be_bytes(length);
    let len = match u32::try_from(declared) {
        Ok(len) if len <= max_request_bytes => len,
        _ => return Err(Close::TooLarge { declared: i64::from(declared), max: max_request_bytes }),
    };
    let held = budget.take(len).await;
    let mut bytes = bytes::BytesMut::zeroed(len as usize);
    rill_rt::timeout(budget.receive_deadline(len), reader.read_exact(&mut bytes))
        .await
        .map_err(|_| Close::TooSlow(len))??;
    Ok(Frame { bytes: bytes.freeze(), _held: held })
}

/// A request's header, and its body still encoded.
#[derive(Debug)]
pub struct Request {
    /// The API.
    pub api: ApiKey,
    /// Its version.
    pub version: i16,
    /// The header, as the client sent it.
    pub header: RequestHeader,
    /// The body, not decoded yet.
    pub body: Bytes,
}

/// The API key and version a frame starts with, before anything else is decoded: the answer to
/// a request whose header cannot be decoded still needs them (KIP-511).
pub fn peek_api(frame: &Bytes) -> Result<(i16, i16), Close> {
    if frame.len() < MIN_REQUEST_BYTES {
        return Err(Close::Malformed(format!(
            "a request frame of {} bytes is shorter than a request header",
            frame.len()
        )));
    }
    let mut head = &frame[..4];
    Ok((head.get_i16(), head.get_i16()))
}

/// Parses a frame's header: the API must be one Kafka defines, the header must decode at the
/// version the API and its version call for.
pub fn parse(frame: Bytes) -> Result<Request, Close> {
    let (raw_api, version) = peek_api(&frame)?;
    let api = ApiKey::try_from(raw_api).map_err(|()| Close::UnknownApi(raw_api))?;
    let mut body = frame;
    let header = RequestHeader::decode(&mut body, api.request_header_version(version))
        .map_err(|e| Close::Malformed(format!("{api:?} v{version} request header: {e}")))?;
    Ok(Request { api, version, header, body })
}
