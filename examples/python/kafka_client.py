"""Rill through its Kafka listener with kafka-python, a Kafka client no one at Rill wrote.

An idempotent producer (acks=all, gzip) writes keyed records with headers; a member of a
consumer group (Kafka's classic protocol, kafka-python's range assignor) reads some of them and
commits; a second member of the same group resumes after the commits and reads the rest. Every
record is read exactly once, with its key, value and headers, at the partition Kafka's murmur2
partitioner chose.

    kafka_client.py TOPIC --bootstrap HOST:PORT[,...] --group GROUP

The topic must exist (the Kafka listener does not create topics on demand).
"""

import argparse
import sys

from kafka import KafkaConsumer, KafkaProducer
from kafka.partitioner.default import murmur2

RECORDS = 100
FIRST_MEMBER_READS = 60


def produce(args):
    producer = KafkaProducer(
        bootstrap_servers=args.bootstrap,
        acks="all",
        enable_idempotence=True,
        compression_type="gzip",
        linger_ms=5,
    )
    sent = [
        producer.send(args.topic, key=f"k{i}".encode(), value=f"v{i}".encode(), headers=[("n", str(i).encode())])
        for i in range(RECORDS)
    ]
    producer.flush()
    placed = {f"k{i}": f.get(timeout=30) for i, f in enumerate(sent)}
    partitions = len(producer.partitions_for(args.topic))
    producer.close()
    return placed, partitions


def consume(args, count):
    """A group member reading up to `count` records, committing what it read, then leaving."""
    consumer = KafkaConsumer(
        args.topic,
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=15000,
    )
    read = []
    for message in consumer:
        read.append(message)
        if len(read) == count:
            break
    consumer.commit()
    consumer.close()
    return read


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("topic")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--group", required=True)
    args = parser.parse_args()

    placed, partitions = produce(args)
    print(f"produced {len(placed)} records idempotently")
    first = consume(args, FIRST_MEMBER_READS)
    print(f"first member read {len(first)} and committed")
    second = consume(args, RECORDS)
    print(f"second member resumed after the commits and read {len(second)}")

    read = first + second
    keys = [m.key.decode() for m in read]
    if sorted(keys) != sorted(placed) or len(set(keys)) != len(keys):
        sys.exit(f"records read more than once or not at all: {sorted(keys)}")
    for m in read:
        i = m.key.decode()[1:]
        meta = placed[m.key.decode()]
        if (m.value, m.headers) != (f"v{i}".encode(), [("n", i.encode())]):
            sys.exit(f"record {i} changed: {m.value!r} {m.headers!r}")
        if (m.partition, m.offset) != (meta.partition, meta.offset):
            sys.exit(f"record {i} read at {m.partition}/{m.offset}, acknowledged at {meta.partition}/{meta.offset}")
        if m.partition != (murmur2(m.key) & 0x7FFFFFFF) % partitions:
            sys.exit(f"record {i} is not where murmur2 puts its key")
    print("every record read once, keys, values and headers intact, at the acknowledged offsets")


if __name__ == "__main__":
    main()
