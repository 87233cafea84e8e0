#!/usr/bin/env python3
"""Delete a partition's records below an offset over gRPC (Admin.DeleteRecords), without the Rust client.

    trim.py TOPIC --before OFFSET [--partition N] [--bootstrap ...]

Prints `TOPIC/PARTITION low watermark N`: the partition's log start offset afterwards. Fetches
below it are refused OFFSET_OUT_OF_RANGE from then on.
"""
import argparse
import os

from rill_api import Cluster, admin_pb2, common_pb2

RETRIABLE = {common_pb2.NOT_LEADER_OR_FOLLOWER, common_pb2.LEADER_NOT_AVAILABLE}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("topic")
    ap.add_argument("--partition", type=int, default=0)
    ap.add_argument("--before", type=int, required=True, help="-1: the high watermark")
    ap.add_argument("--bootstrap", default=os.environ.get("RILL_BOOTSTRAP", "127.0.0.1:7001"))
    args = ap.parse_args()

    cluster = Cluster(args.bootstrap)
    cluster.partitions(args.topic)
    request = admin_pb2.DeleteRecordsRequest(
        topics=[
            admin_pb2.DeleteRecordsTopic(
                topic=args.topic,
                partitions=[admin_pb2.DeleteRecordsPartition(partition=args.partition, offset=args.before)],
            )
        ]
    )
    for _ in range(20):
        p = cluster.leader_admin_stub(args.topic, args.partition).DeleteRecords(request, timeout=30).topics[0].partitions[0]
        if p.error_code in RETRIABLE:
            cluster.follow_hint(args.topic, args.partition, p.leader if p.HasField("leader") else None)
            continue
        if p.error_code != common_pb2.NONE:
            raise SystemExit(f"{common_pb2.ErrorCode.Name(p.error_code)}: {p.error_message}")
        print(f"{args.topic}/{args.partition} low watermark {p.low_watermark}")
        return
    raise SystemExit(f"{args.topic}/{args.partition}: no leader answered")


if __name__ == "__main__":
    main()
