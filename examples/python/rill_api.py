"""A small helper over Rill's generated gRPC stubs: metadata, leader routing, record batches.

Record batches are Kafka's record batch format (magic 2), which Rill stores and serves as
produced (docs/api.md, "Record batches"); this example encodes and decodes them with
kafka-python's record codec, an implementation of that format no one at Rill wrote.
"""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "gen"))

import grpc  # noqa: E402
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder  # noqa: E402
import admin_pb2  # noqa: E402
import admin_pb2_grpc  # noqa: E402
import common_pb2  # noqa: E402
import groups_pb2_grpc  # noqa: E402
import records_pb2  # noqa: E402
import records_pb2_grpc  # noqa: E402

# Kafka's codec numbers (the low three bits of a batch's attributes).
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def build_batch(records, compression="none"):
    """One Kafka record batch of (key or None, value or None) pairs, without a producer id."""
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=CODECS[compression],
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=64 << 20,
    )
    now = int(time.time() * 1000)
    for i, (key, value) in enumerate(records):
        builder.append(i, timestamp=now, key=key, value=value, headers=[])
    return bytes(builder.build())


def decode_batch(batch):
    """(offset, key, value) of every record of a fetched RecordBatch, after checking its CRC.
    Control batches (transaction markers) take offsets but hold no records for readers."""
    decoded = DefaultRecordBatch(batch.data)
    if not decoded.validate_crc():
        raise ValueError(f"batch at offset {batch.base_offset} fails its checksum")
    if decoded.is_control_batch:
        return []
    # The batch's own base offset field holds what its producer sent; Rill gives the real one.
    return [(batch.base_offset + r.offset - decoded.base_offset, r.key, r.value) for r in decoded]


def batch_end(batch):
    """The offset after a fetched RecordBatch: its base offset plus its span. A batch of a
    compacted topic may hold fewer records than offsets, or none; a reader moves past the span
    (as every Kafka client does), never past its last record only."""
    return batch.base_offset + DefaultRecordBatch(batch.data).last_offset_delta + 1


class Cluster:
    """Finds partition leaders through Admin.Metadata and keeps one channel per node."""

    def __init__(self, bootstrap):
        self.bootstrap = [b.strip() for b in bootstrap.split(",") if b.strip()]
        self.channels = {}
        self.leaders = {}
        self.addresses = {}

    def channel(self, addr):
        if addr not in self.channels:
            self.channels[addr] = grpc.insecure_channel(addr)
        return self.channels[addr]

    def admin(self):
        last = None
        for addr in list(self.addresses.values()) + self.bootstrap:
            try:
                stub = admin_pb2_grpc.AdminStub(self.channel(addr))
                stub.ListTopics(admin_pb2.ListTopicsRequest(), timeout=5)
                return stub
            except grpc.RpcError as e:
                last = e
        raise SystemExit(f"cannot reach the cluster at {self.bootstrap}: {last}")

    def refresh(self, topic):
        md = self.admin().Metadata(admin_pb2.MetadataRequest(topics=[topic]), timeout=10)
        for n in md.nodes:
            self.addresses[n.node_id] = n.address
        for t in md.topics:
            if t.error_code != common_pb2.NONE:
                raise SystemExit(f"{common_pb2.ErrorCode.Name(t.error_code)}: {t.error_message}")
            self.leaders[t.name] = [p.leader if p.HasField("leader") else None for p in t.partitions]

    def partitions(self, topic):
        if topic not in self.leaders:
            self.refresh(topic)
        return len(self.leaders[topic])

    def leader_address(self, topic, partition):
        """The address of the partition's leader, waiting for an election if needed."""
        for _ in range(50):
            leader = self.leaders.get(topic, [None] * (partition + 1))[partition]
            if leader is not None and leader in self.addresses:
                return self.addresses[leader]
            time.sleep(0.2)
            self.refresh(topic)
        raise SystemExit(f"no leader for {topic}/{partition}")

    def groups_stub(self, group):
        """The Groups stub of `group`'s coordinator (Admin.FindCoordinator, waiting for one)."""
        for _ in range(50):
            found = self.admin().FindCoordinator(
                admin_pb2.FindCoordinatorRequest(kind=admin_pb2.GROUP, key=group), timeout=10
            )
            if found.error_code == common_pb2.NONE:
                return groups_pb2_grpc.GroupsStub(self.channel(found.coordinator.address))
            time.sleep(0.2)
        raise SystemExit(f"no coordinator for group {group}")

    def records_stub(self, topic, partition):
        """The Records stub of the partition's leader (Produce, Fetch, ListOffsets)."""
        return records_pb2_grpc.RecordsStub(self.channel(self.leader_address(topic, partition)))

    def leader_admin_stub(self, topic, partition):
        """The Admin stub of the partition's leader (DeleteRecords is answered there)."""
        return admin_pb2_grpc.AdminStub(self.channel(self.leader_address(topic, partition)))

    def follow_hint(self, topic, partition, hint):
        """After NOT_LEADER_OR_FOLLOWER: use the hinted leader, or refresh metadata."""
        if hint is not None and hint.address:
            self.addresses[hint.node_id] = hint.address
            self.leaders[topic][partition] = hint.node_id
        else:
            time.sleep(0.2)
            self.refresh(topic)
