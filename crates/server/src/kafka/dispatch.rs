//! One request, from its frame to its answer's frame: the header parsed, the version checked,
//! the body decoded, one service call made through the API's handler, the answer encoded.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, AlterConfigsRequest, ApiKey, ApiVersionsRequest,
    ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest, CreatePartitionsRequest, CreateTopicsRequest,
    DeleteGroupsRequest, DeleteRecordsRequest, DeleteTopicsRequest, DescribeClusterRequest, DescribeConfigsRequest,
    DescribeGroupsRequest, DescribeTransactionsRequest, EndTxnRequest, FetchRequest, FindCoordinatorRequest,
    HeartbeatRequest, IncrementalAlterConfigsRequest, InitProducerIdRequest, JoinGroupRequest, LeaveGroupRequest,
    ListGroupsRequest, ListOffsetsRequest, ListTransactionsRequest, MetadataRequest, OffsetCommitRequest,
    OffsetDeleteRequest, OffsetFetchRequest, OffsetForLeaderEpochRequest, ProduceRequest, RequestHeader,
    ResponseHeader, SyncGroupRequest, TxnOffsetCommitRequest,
};
use kafka_protocol::protocol::{Decodable, Encodable};
use rill_broker::SubmitTurn;

use super::frame::{self, Close};
use super::{admin, cluster, consumer, groups, records, rules, transactions, versions};
use crate::service::{Principal, RequestContext, Service};

/// Who is on the other end of a connection: the same for each of its requests.
#[derive(Debug, Clone)]
pub struct Peer {
    /// Who the client authenticated as.
    pub principal: Principal,
    /// Its IP address, as the service layer records callers.
    pub host: String,
}

/// The table of APIs this listener serves: each line names an API (its `ApiKey` variant and
/// request type) and the expression that answers it — one service call through the API's
/// handler — as `Some(answer)`, or `None` for a request that gets no answer. From it come
/// [`Decoded`], the body decoder and the handler dispatch, so adding an API is one line here
/// (plus its versions in [`versions::SUPPORTED`] and its rule in [`rules::needs`]).
macro_rules! apis {
    (($service:ident, $ctx:ident, $version:ident, $turn:ident); $($api:ident($request:ident) => |$req:ident| $answer:expr;)*) => {
        /// A request decoded, for its handler.
        #[derive(Debug)]
        pub enum Decoded {
            $(
                #[doc = concat!("`", stringify!($api), "`.")]
                $api($request),
            )*
        }

        /// Decodes the body of an `api` request at `version`.
        fn decode_body(api: ApiKey, version: i16, body: &mut Bytes) -> Result<Decoded, Close> {
            Ok(match api {
                $(ApiKey::$api => Decoded::$api(decode(api, version, body)?),)*
                _ => return Err(Close::UnsupportedApi(api)),
            })
        }

        /// Runs a decoded request's handler; its answer's frame, if it gets one. `turn`: a
        /// produce request's place among its connection's (`None` for every other API).
        async fn handle(
            $service: &Service,
            $ctx: &RequestContext,
            decoded: Decoded,
            $version: i16,
            correlation_id: i32,
            $turn: Option<SubmitTurn>,
        ) -> Result<Option<BytesMut>, Close> {
            match decoded {
                $(Decoded::$api($req) => reply(ApiKey::$api, $version, correlation_id, $answer),)*
            }
        }
    };
}

apis! {
    (service, ctx, version, turn);
    ApiVersions(ApiVersionsRequest) => |req| Some(versions::api_versions(&req, version, i64::try_from(service.metadata_version()).unwrap_or(i64::MAX)));
    Metadata(MetadataRequest) => |req| Some(cluster::metadata(service, ctx, req, version).await);
    // acks=0: written, never answered.
    Produce(ProduceRequest) => |req| records::produce(service, ctx, req, version, turn).await;
    Fetch(FetchRequest) => |req| Some(records::fetch(service, ctx, req, version).await);
    ListOffsets(ListOffsetsRequest) => |req| Some(records::list_offsets(service, ctx, req, version).await);
    OffsetForLeaderEpoch(OffsetForLeaderEpochRequest) => |req| Some(records::offset_for_leader_epoch(service, ctx, req));
    InitProducerId(InitProducerIdRequest) => |req| Some(records::init_producer_id(service, ctx, req).await);
    FindCoordinator(FindCoordinatorRequest) => |req| Some(groups::find_coordinator(service, ctx, req, version));
    JoinGroup(JoinGroupRequest) => |req| Some(groups::join_group(service, ctx, req, version).await);
    SyncGroup(SyncGroupRequest) => |req| Some(groups::sync_group(service, ctx, req).await);
    Heartbeat(HeartbeatRequest) => |req| Some(groups::heartbeat(service, ctx, req));
    LeaveGroup(LeaveGroupRequest) => |req| Some(groups::leave_group(service, ctx, req, version));
    OffsetCommit(OffsetCommitRequest) => |req| Some(groups::offset_commit(service, ctx, req).await);
    OffsetFetch(OffsetFetchRequest) => |req| Some(groups::offset_fetch(service, ctx, req, version).await);
    ListGroups(ListGroupsRequest) => |req| Some(groups::list_groups(service, ctx, req));
    DescribeGroups(DescribeGroupsRequest) => |req| Some(groups::describe_groups(service, ctx, req, version));
    CreateTopics(CreateTopicsRequest) => |req| Some(admin::create_topics(service, ctx, req, version).await);
    DeleteTopics(DeleteTopicsRequest) => |req| Some(admin::delete_topics(service, ctx, req, version).await);
    CreatePartitions(CreatePartitionsRequest) => |req| Some(admin::create_partitions(service, ctx, req).await);
    DescribeCluster(DescribeClusterRequest) => |req| Some(admin::describe_cluster(service, ctx, req).await);
    DescribeConfigs(DescribeConfigsRequest) => |req| Some(admin::describe_configs(service, ctx, req, version));
    AlterConfigs(AlterConfigsRequest) => |req| Some(admin::alter_configs(service, ctx, req).await);
    IncrementalAlterConfigs(IncrementalAlterConfigsRequest) => |req| Some(admin::incremental_alter_configs(service, ctx, req).await);
    ConsumerGroupHeartbeat(ConsumerGroupHeartbeatRequest) => |req| Some(consumer::consumer_group_heartbeat(service, ctx, req).await);
    ConsumerGroupDescribe(ConsumerGroupDescribeRequest) => |req| Some(consumer::consumer_group_describe(service, ctx, req));
    DeleteRecords(DeleteRecordsRequest) => |req| Some(records::delete_records(service, ctx, req).await);
    DeleteGroups(DeleteGroupsRequest) => |req| Some(groups::delete_groups(service, ctx, req).await);
    OffsetDelete(OffsetDeleteRequest) => |req| Some(groups::offset_delete(service, ctx, req).await);
    AddPartitionsToTxn(AddPartitionsToTxnRequest) => |req| Some(transactions::add_partitions_to_txn(service, ctx, req).await);
    AddOffsetsToTxn(AddOffsetsToTxnRequest) => |req| Some(transactions::add_offsets_to_txn(service, ctx, req).await);
    EndTxn(EndTxnRequest) => |req| Some(transactions::end_txn(service, ctx, req, version).await);
    TxnOffsetCommit(TxnOffsetCommitRequest) => |req| Some(transactions::txn_offset_commit(service, ctx, req, version).await);
    DescribeTransactions(DescribeTransactionsRequest) => |req| Some(transactions::describe_transactions(service, ctx, req).await);
    ListTransactions(ListTransactionsRequest) => |req| Some(transactions::list_transactions(service, ctx, req).await);
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
    let decoded = decode_body(api, version, &mut body)?;
    Ok(Parsed::Request { header: request.header, version, decoded })
}

/// Answers one request frame: `Ok(Some(frame))` to write back, `Ok(None)` for a request that
/// gets no answer, `Err` to close the connection (a frame this listener cannot answer).
/// `turn`: a produce request's place among its connection's pipelined ones.
pub async fn answer(
    service: &Service,
    peer: &Peer,
    frame: Bytes,
    turn: Option<SubmitTurn>,
) -> Result<Option<BytesMut>, Close> {
    let (header, version, decoded) = match parse(frame)? {
        Parsed::Answered(answer) => return Ok(Some(answer)),
        Parsed::Request { header, version, decoded } => (header, version, decoded),
    };
    let api = ApiKey::try_from(header.request_api_key).map_err(|()| Close::UnknownApi(header.request_api_key))?;
    let needs = rules::needs(api).ok_or(Close::UnsupportedApi(api))?;
    let ctx = rules::context(&peer.principal, &peer.host, header.client_id.as_deref(), needs);
    handle(service, &ctx, decoded, version, header.correlation_id, turn).await
}

/// Decodes `api`'s request body at `version`.
fn decode<T: Decodable>(api: ApiKey, version: i16, body: &mut Bytes) -> Result<T, Close> {
    T::decode(body, version).map_err(|e| Close::Malformed(format!("{api:?} v{version} request: {e}")))
}

/// The frame of `answer`, if the request gets one.
fn reply<M: Encodable>(
    api: ApiKey,
    version: i16,
    correlation_id: i32,
    answer: Option<M>,
) -> Result<Option<BytesMut>, Close> {
    answer.map(|body| encode(api, version, correlation_id, &body)).transpose()
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
