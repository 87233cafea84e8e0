#!/usr/bin/env python3
"""Produce records to Rill over gRPC, without the Rust client.

    producer.py TOPIC VALUE [VALUE...] [--partition N] [--key KEY] [--compression CODEC]
                [--bootstrap host:port,...]

Sends the values as one batch (Kafka's record batch format, built by kafka-python; CODEC is
none, gzip, snappy, lz4 or zstd) with acks=all and prints where they landed.
"""
import argparse
import os

from rill_api import CODECS, Cluster, build_batch, common_pb2, records_pb2

RETRIABLE = {common_pb2.NOT_LEADER_OR_FOLLOWER, common_pb2.LEADER_NOT_AVAILABLE, common_pb2.NOT_ENOUGH_REPLICAS}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("topic")
    ap.add_argument("values", nargs="+")
    ap.add_argument("--partition", type=int, default=0)
    ap.add_argument("--key")
    ap.add_argument("--compression", choices=sorted(CODECS), default="none")
    ap.add_argument("--bootstrap", default=os.environ.get("RILL_BOOTSTRAP", "127.0.0.1:7001"))
    args = ap.parse_args()

    cluster = Cluster(args.bootstrap)
    if args.partition >= cluster.partitions(args.topic):
        raise SystemExit(f"partition {args.partition} does not exist in {args.topic}")
    key = args.key.encode() if args.key is not None else None
    batch = build_batch([(key, v.encode()) for v in args.values], args.compression)
    request = records_pb2.ProduceRequest(
        acks=records_pb2.ACKS_ALL,
        timeout_ms=10_000,
        topics=[records_pb2.TopicProduce(topic=args.topic, partitions=[records_pb2.PartitionProduce(partition=args.partition, batch=batch)])],
    )
    for _ in range(20):
        answer = cluster.records_stub(args.topic, args.partition).Produce(request, timeout=30)
        p = answer.topics[0].partitions[0]
        if p.error_code == common_pb2.NONE:
            for i, v in enumerate(args.values):
                print(f"{args.topic}/{args.partition}@{p.base_offset + i} {v}")
            return
        if p.error_code not in RETRIABLE:
            raise SystemExit(f"{common_pb2.ErrorCode.Name(p.error_code)}: {p.error_message}")
        cluster.follow_hint(args.topic, args.partition, p.leader if p.HasField("leader") else None)
    raise SystemExit("gave up after 20 attempts")


if __name__ == "__main__":
    main()
