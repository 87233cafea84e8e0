"""A small helper over Rill's generated gRPC stubs: metadata, leader routing, record batches.

Everything here follows docs/api.md: a RecordBatch carries a protobuf-encoded RecordList and a
CRC-32C over record_count (u32 LE) + compression (u32 LE) + producer_id (i64 LE) +
producer_epoch (i32 LE) + base_sequence (i32 LE) + the records bytes.
"""
import os
import struct
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "gen"))

import grpc  # noqa: E402
import admin_pb2  # noqa: E402
import admin_pb2_grpc  # noqa: E402
import common_pb2  # noqa: E402
import records_pb2  # noqa: E402
import records_pb2_grpc  # noqa: E402

_CRC32C_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _CRC32C_TABLE.append(_c)


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), the checksum Rill's record batches carry."""
    crc = 0xFFFFFFFF
    for b in data:
        crc = _CRC32C_TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def build_batch(records):
    """A RecordBatch of (key or None, value) pairs, uncompressed."""
    now = int(time.time() * 1000)
    rl = common_pb2.RecordList(
        records=[common_pb2.Record(timestamp_ms=now, value=v, **({"key": k} if k is not None else {})) for k, v in records]
    )
    payload = rl.SerializeToString()
    count = len(records)
    compression = common_pb2.COMPRESSION_NONE
    crc = crc32c(_checked_header(count, compression, 0, 0, 0) + payload)
    return common_pb2.RecordBatch(record_count=count, compression=compression, crc32c=crc, records=payload)


def _checked_header(count, compression, producer_id, producer_epoch, base_sequence):
    return struct.pack("<IiqiI", count, compression, producer_id, producer_epoch, base_sequence & 0xFFFFFFFF)


def decode_batch(batch):
    """(offset, key, value) for every record, after checking the checksum."""
    header = _checked_header(batch.record_count, batch.compression, batch.producer_id, batch.producer_epoch, batch.base_sequence)
    expected = crc32c(header + batch.records)
    if expected != batch.crc32c:
        raise ValueError(f"batch at offset {batch.base_offset} fails its checksum")
    if batch.compression != common_pb2.COMPRESSION_NONE:
        raise ValueError("this example reads uncompressed batches only")
    rl = common_pb2.RecordList.FromString(batch.records)
    return [(batch.base_offset + i, r.key if r.HasField("key") else None, r.value) for i, r in enumerate(rl.records)]


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

    def records_stub(self, topic, partition):
        """The Records stub of the partition's leader, waiting for an election if needed."""
        for _ in range(50):
            leader = self.leaders.get(topic, [None] * (partition + 1))[partition]
            if leader is not None and leader in self.addresses:
                return records_pb2_grpc.RecordsStub(self.channel(self.addresses[leader]))
            time.sleep(0.2)
            self.refresh(topic)
        raise SystemExit(f"no leader for {topic}/{partition}")

    def follow_hint(self, topic, partition, hint):
        """After NOT_LEADER_OR_FOLLOWER: use the hinted leader, or refresh metadata."""
        if hint is not None and hint.address:
            self.addresses[hint.node_id] = hint.address
            self.leaders[topic][partition] = hint.node_id
        else:
            time.sleep(0.2)
            self.refresh(topic)
