//! One request, from its frame to its answer's frame: the header parsed, the version checked,
//! the body decoded, one service call made through the API's handler, the answer encoded.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, CreatePartitionsRequest, CreateTopicsRequest, DeleteTopicsRequest,
    DescribeClusterRequest, DescribeConfigsRequest, DescribeGroupsRequest, FetchRequest, FindCoordinatorRequest,
    HeartbeatRequest, IncrementalAlterConfigsRequest, InitProducerIdRequest, JoinGroupRequest, LeaveGroupRequest,
    ListGroupsRequest, ListOffsetsRequest, MetadataRequest, OffsetCommitRequest, OffsetFetchRequest, ProduceRequest,
    RequestHeader, ResponseHeader, SyncGroupRequest,
};
use kafka_protocol::protocol::{Decodable, Encodable};

use super::frame::{self, Close};
use super::{admin, cluster, groups, records, rules, versions};
use crate::service::{Principal, Service};

/// Who is on the other end of a connection: the same for each of its requests.
#[derive(Debug, Clone)]
pub struct Peer {
    /// Who the client authenticated as.
    pub principal: Principal,
    /// Its IP address, as the service layer records callers.
    pub host: String,
}

/// A request decoded, for its handler.
#[derive(Debug)]
pub enum Decoded {
    /// `ApiVersions`.
    ApiVersions(ApiVersionsRequest),
    /// `Metadata`.
    Metadata(MetadataRequest),
    /// `Produce`.
    Produce(ProduceRequest),
    /// `Fetch`.
    Fetch(FetchRequest),
    /// `ListOffsets`.
    ListOffsets(ListOffsetsRequest),
    /// `InitProducerId`.
    InitProducerId(InitProducerIdRequest),
    /// `FindCoordinator`.
    FindCoordinator(FindCoordinatorRequest),
    /// `JoinGroup`.
    JoinGroup(JoinGroupRequest),
    /// `SyncGroup`.
    SyncGroup(SyncGroupRequest),
    /// `Heartbeat`.
    Heartbeat(HeartbeatRequest),
    /// `LeaveGroup`.
    LeaveGroup(LeaveGroupRequest),
    /// `OffsetCommit`.
    OffsetCommit(OffsetCommitRequest),
    /// `OffsetFetch`.
    OffsetFetch(OffsetFetchRequest),
    /// `ListGroups`.
    ListGroups(ListGroupsRequest),
    /// `DescribeGroups`.
    DescribeGroups(DescribeGroupsRequest),
    /// `CreateTopics`.
    CreateTopics(CreateTopicsRequest),
    /// `DeleteTopics`.
    DeleteTopics(DeleteTopicsRequest),
    /// `CreatePartitions`.
    CreatePartitions(CreatePartitionsRequest),
    /// `DescribeCluster`.
    DescribeCluster(DescribeClusterRequest),
    /// `DescribeConfigs`.
    DescribeConfigs(DescribeConfigsRequest),
    /// `IncrementalAlterConfigs`.
    IncrementalAlterConfigs(IncrementalAlterConfigsRequest),
}

/// What a frame is, before any handler runs. Not boxed: a connection holds one at a time.
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum Parsed {
    /// A request to hand to its API's handler.
    Request {
        /// Its header.
        header: RequestHeader,
        /// Its API's version.
        version: i16,
        /// Its body.
        decoded: Decoded,
    },
    /// A request answered without a handler (KIP-511's answer to an `ApiVersions` request
    /// newer than the listener): the answer's frame.
    Answered(BytesMut),
}

/// Parses a request frame: its header, its version against the supported ranges, its body
/// decoded; `Err` for a frame that closes the connection. Touches no state (the fuzz target
/// `kafka_requests` runs every frame through it).
pub fn parse(frame: Bytes) -> Result<Parsed, Close> {
    let request = frame::parse(frame)?;
    let (api, version) = (request.api, request.version);
    let supported = versions::supported(api).ok_or(Close::UnsupportedApi(api))?;
    if !(supported.min..=supported.max).contains(&version) {
        if api == ApiKey::ApiVersions {
            // KIP-511: answered at v0 with the supported ranges, so the client can retry.
            let answer = versions::api_versions_answer(versions::UNSUPPORTED_VERSION);
            return encode(api, 0, request.header.correlation_id, &answer).map(Parsed::Answered);
        }
        return Err(Close::UnsupportedVersion { api, version, min: supported.min, max: supported.max });
    }
    if api == ApiKey::Produce && version < versions::PRODUCE_MIN_ANSWERED {
        // Advertised, not answered (versions::SUPPORTED says why).
        let min = versions::PRODUCE_MIN_ANSWERED;
        return Err(Close::UnsupportedVersion { api, version, min, max: supported.max });
    }
    let mut body = request.body;
    let decoded = match api {
        ApiKey::ApiVersions => Decoded::ApiVersions(decode(api, version, &mut body)?),
        ApiKey::Metadata => Decoded::Metadata(decode(api, version, &mut body)?),
        ApiKey::Produce => Decoded::Produce(decode(api, version, &mut body)?),
        ApiKey::Fetch => Decoded::Fetch(decode(api, version, &mut body)?),
        ApiKey::ListOffsets => Decoded::ListOffsets(decode(api, version, &mut body)?),
        ApiKey::InitProducerId => Decoded::InitProducerId(decode(api, version, &mut body)?),
        ApiKey::FindCoordinator => Decoded::FindCoordinator(decode(api, version, &mut body)?),
        ApiKey::JoinGroup => Decoded::JoinGroup(decode(api, version, &mut body)?),
        ApiKey::SyncGroup => Decoded::SyncGroup(decode(api, version, &mut body)?),
        ApiKey::Heartbeat => Decoded::Heartbeat(decode(api, version, &mut body)?),
        ApiKey::LeaveGroup => Decoded::LeaveGroup(decode(api, version, &mut body)?),
        ApiKey::OffsetCommit => Decoded::OffsetCommit(decode(api, version, &mut body)?),
        ApiKey::OffsetFetch => Decoded::OffsetFetch(decode(api, version, &mut body)?),
        ApiKey::ListGroups => Decoded::ListGroups(decode(api, version, &mut body)?),
        ApiKey::DescribeGroups => Decoded::DescribeGroups(decode(api, version, &mut body)?),
        ApiKey::CreateTopics => Decoded::CreateTopics(decode(api, version, &mut body)?),
        ApiKey::DeleteTopics => Decoded::DeleteTopics(decode(api, version, &mut body)?),
        ApiKey::CreatePartitions => Decoded::CreatePartitions(decode(api, version, &mut body)?),
        ApiKey::DescribeCluster => Decoded::DescribeCluster(decode(api, version, &mut body)?),
        ApiKey::DescribeConfigs => Decoded::DescribeConfigs(decode(api, version, &mut body)?),
        ApiKey::IncrementalAlterConfigs => Decoded::IncrementalAlterConfigs(decode(api, version, &mut body)?),
        _ => return Err(Close::UnsupportedApi(api)),
    };
    Ok(Parsed::Request { header: request.header, version, decoded })
}

/// Answers one request frame: `Ok(Some(frame))` to write back, `Ok(None)` for a request that
/// gets no answer, `Err` to close the connection (a frame this listener cannot answer).
pub async fn answer(service: &Service, peer: &Peer, frame: Bytes) -> Result<Option<BytesMut>, Close> {
    let (header, version, decoded) = match parse(frame)? {
        Parsed::Answered(answer) => return Ok(Some(answer)),
        Parsed::Request { header, version, decoded } => (header, version, decoded),
    };
    let api = ApiKey::try_from(header.request_api_key).map_err(|()| Close::UnknownApi(header.request_api_key))?;
    let needs = rules::needs(api).ok_or(Close::UnsupportedApi(api))?;
    let ctx = rules::context(&peer.principal, &peer.host, header.client_id.as_deref(), needs);
    let correlation_id = header.correlation_id;
    match decoded {
        Decoded::ApiVersions(req) => {
            encode(api, version, correlation_id, &versions::api_versions(&req, version)).map(Some)
        }
        Decoded::Metadata(req) => {
            encode(api, version, correlation_id, &cluster::metadata(service, &ctx, req, version)).map(Some)
        }
        // acks=0: written, never answered.
        Decoded::Produce(req) => match records::produce(service, &ctx, req, version).await {
            Some(answer) => encode(api, version, correlation_id, &answer).map(Some),
            None => Ok(None),
        },
        Decoded::Fetch(req) => {
            encode(api, version, correlation_id, &records::fetch(service, &ctx, req, version).await).map(Some)
        }
        Decoded::ListOffsets(req) => {
            encode(api, version, correlation_id, &records::list_offsets(service, &ctx, req).await).map(Some)
        }
        Decoded::InitProducerId(req) => {
            encode(api, version, correlation_id, &records::init_producer_id(service, &ctx, req).await).map(Some)
        }
        Decoded::FindCoordinator(req) => {
            encode(api, version, correlation_id, &groups::find_coordinator(service, &ctx, req, version)).map(Some)
        }
        Decoded::JoinGroup(req) => {
            encode(api, version, correlation_id, &groups::join_group(service, &ctx, req, version).await).map(Some)
        }
        Decoded::SyncGroup(req) => {
            encode(api, version, correlation_id, &groups::sync_group(service, &ctx, req).await).map(Some)
        }
        Decoded::Heartbeat(req) => {
            encode(api, version, correlation_id, &groups::heartbeat(service, &ctx, req)).map(Some)
        }
        Decoded::LeaveGroup(req) => {
            encode(api, version, correlation_id, &groups::leave_group(service, &ctx, req, version)).map(Some)
        }
        Decoded::OffsetCommit(req) => {
            encode(api, version, correlation_id, &groups::offset_commit(service, &ctx, req).await).map(Some)
        }
        Decoded::OffsetFetch(req) => {
            encode(api, version, correlation_id, &groups::offset_fetch(service, &ctx, req, version).await).map(Some)
        }
        Decoded::ListGroups(req) => {
            encode(api, version, correlation_id, &groups::list_groups(service, &ctx, req)).map(Some)
        }
        Decoded::DescribeGroups(req) => {
            encode(api, version, correlation_id, &groups::describe_groups(service, &ctx, req, version)).map(Some)
        }
        Decoded::CreateTopics(req) => {
            encode(api, version, correlation_id, &admin::create_topics(service, &ctx, req, version).await).map(Some)
        }
        Decoded::DeleteTopics(req) => {
            encode(api, version, correlation_id, &admin::delete_topics(service, &ctx, req, version).await).map(Some)
        }
        Decoded::CreatePartitions(req) => {
            encode(api, version, correlation_id, &admin::create_partitions(service, &ctx, req).await).map(Some)
        }
        Decoded::DescribeCluster(req) => {
            encode(api, version, correlation_id, &admin::describe_cluster(service, &ctx, req).await).map(Some)
        }
        Decoded::DescribeConfigs(req) => {
            encode(api, version, correlation_id, &admin::describe_configs(service, &ctx, req, version)).map(Some)
        }
        Decoded::IncrementalAlterConfigs(req) => {
            encode(api, version, correlation_id, &admin::incremental_alter_configs(service, &ctx, req).await).map(Some)
        }
    }
}

/// Decodes `api`'s request body at `version`.
fn decode<T: Decodable>(api: ApiKey, version: i16, body: &mut Bytes) -> Result<T, Close> {
    T::decode(body, version).map_err(|e| Close::Malformed(format!("{api:?} v{version} request: {e}")))
}

/// An answer's frame: its length, the response header `api` and `version` call for (always v0
/// for `ApiVersions`), and the body.
pub fn encode<M: Encodable>(api: ApiKey, version: i16, correlation_id: i32, body: &M) -> Result<BytesMut, Close> {
    let failed = |e: anyhow::Error| Close::Encode(format!("{api:?} v{version} answer: {e}"));
    let header_version = api.response_header_version(version);
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    let size = header.compute_size(header_version).map_err(failed)? + body.compute_size(version).map_err(failed)?;
    let length = i32::try_from(size).map_err(|_| Close::Encode(format!("{api:?} answer of {size} bytes")))?;
    let mut out = BytesMut::with_capacity(4 + size);
    out.put_i32(length);
    header.encode(&mut out, header_version).map_err(failed)?;
    body.encode(&mut out, version).map_err(failed)?;
    Ok(out)
}
