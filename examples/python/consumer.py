#!/usr/bin/env python3
"""Read records from Rill over gRPC, without the Rust client.

    consumer.py TOPIC [--partition N] [--offset O] [--max-messages N] [--timeout-s S] [--bootstrap ...]

Prints `offset key value` per record, starting at --offset (default 0), until --max-messages
records were read or nothing new arrives for --timeout-s seconds.
"""
import argparse
import os
import time

from rill_api import Cluster, batch_end, common_pb2, decode_batch, records_pb2

RETRIABLE = {common_pb2.NOT_LEADER_OR_FOLLOWER, common_pb2.LEADER_NOT_AVAILABLE}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("topic")
    ap.add_argument("--partition", type=int, default=0)
    ap.add_argument("--offset", type=int, default=0)
    ap.add_argument("--max-messages", type=int)
    ap.add_argument("--timeout-s", type=float, default=3.0)
    ap.add_argument("--bootstrap", default=os.environ.get("RILL_BOOTSTRAP", "127.0.0.1:7001"))
    args = ap.parse_args()

    cluster = Cluster(args.bootstrap)
    cluster.partitions(args.topic)
    offset, read, last = args.offset, 0, time.time()
    while time.time() - last < args.timeout_s:
        request = records_pb2.FetchRequest(
            max_wait_ms=500,
            topics=[records_pb2.FetchTopic(topic=args.topic, partitions=[records_pb2.FetchPartition(partition=args.partition, fetch_offset=offset)])],
        )
        p = cluster.records_stub(args.topic, args.partition).Fetch(request, timeout=10).topics[0].partitions[0]
        if p.error_code in RETRIABLE:
            cluster.follow_hint(args.topic, args.partition, p.leader if p.HasField("leader") else None)
            continue
        if p.error_code != common_pb2.NONE:
            raise SystemExit(f"{common_pb2.ErrorCode.Name(p.error_code)}: {p.error_message}")
        for batch in p.batches:
            for o, key, value in decode_batch(batch):
                if o < offset:
                    continue  # a batch may start before the requested offset
                text = value.decode(errors="replace") if value is not None else "<null>"
                print(f"{o} {key.decode() if key is not None else '-'} {text}", flush=True)
                offset, read, last = o + 1, read + 1, time.time()
                if args.max_messages is not None and read >= args.max_messages:
                    return
            # Past the whole batch: a compacted one may end in offsets that hold no record.
            offset = max(offset, batch_end(batch))
        # Past what the server looked at but left out (READ_COMMITTED, the default, leaves out
        # aborted transactions and their markers), even when no batch came back.
        offset = max(offset, p.next_offset)


if __name__ == "__main__":
    main()
