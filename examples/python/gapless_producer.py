"""An idempotent producer through Rill's Kafka listener with confluent-kafka (librdkafka): acks=all,
five requests in flight, and librdkafka's `enable.gapless.guarantee`, which makes any record it
could not write a fatal error instead of a silent gap.

Writes RECORDS records numbered 0, 1, 2, … to the topic's partitions in turn (record i to
partition i mod P), a few hundred a second and at most OUTSTANDING unacknowledged, so that a
test can SIGKILL partition leaders while it runs, printing `acknowledged N` to stderr as deliveries come back. Fails on any delivery error or
fatal error. A reader then checks that each partition holds its numbers in order, once each, with
no gap (`--check`, reading through Kafka; the integration test also reads through gRPC).

    gapless_producer.py TOPIC --bootstrap HOST:PORT[,...] [--records N]
    gapless_producer.py TOPIC --bootstrap HOST:PORT[,...] --check [--records N]
"""

import argparse
import sys
import time

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
import librdkafka_exit

RATE = 400  # records a second
OUTSTANDING = 500  # records sent and not yet acknowledged, at most
DEADLINE_S = 300


def produce(args, partitions):
    producer = Producer(
        {
            "bootstrap.servers": args.bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "enable.gapless.guarantee": True,
            "max.in.flight.requests.per.connection": 5,
            "linger.ms": 5,
            "message.timeout.ms": 240000,
        }
    )
    acknowledged = 0
    failures = []

    def delivered(err, msg):
        nonlocal acknowledged
        if err is not None:
            failures.append(str(err))
            return
        acknowledged += 1
        if acknowledged % 250 == 0:
            print(f"acknowledged {acknowledged}", file=sys.stderr, flush=True)

    started = time.monotonic()
    for i in range(args.records):
        while True:
            try:
                producer.produce(args.topic, value=str(i), partition=i % partitions, on_delivery=delivered)
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
        if failures:
            sys.exit(f"delivery failed: {failures[0]}")
        # Paced, and never more than OUTSTANDING unacknowledged, so the run outlasts the faults
        # a test injects: while a leader is down the producer waits instead of racing ahead.
        while i + 1 - acknowledged > OUTSTANDING:
            producer.poll(0.05)
            if time.monotonic() - started > DEADLINE_S:
                sys.exit(f"{i + 1 - acknowledged} records unacknowledged after {DEADLINE_S} s")
        ahead = (i + 1) / RATE - (time.monotonic() - started)
        if ahead > 0:
            time.sleep(ahead)
    if producer.flush(DEADLINE_S) != 0:
        sys.exit(f"records left unacknowledged after {DEADLINE_S} s")
    if failures:
        sys.exit(f"delivery failed: {failures[0]}")
    print(f"acknowledged {acknowledged}", file=sys.stderr, flush=True)
    print(f"every one of the {args.records} records acknowledged, no delivery or fatal error")


def check(args, partitions):
    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": "gapless-check",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(args.topic, p, 0) for p in range(partitions)])
    read = {p: [] for p in range(partitions)}
    at_end = set()
    deadline = time.monotonic() + 60
    while len(at_end) < partitions or sum(map(len, read.values())) < args.records:
        if time.monotonic() > deadline:
            sys.exit(f"read {sum(map(len, read.values()))} of {args.records} records in 60 s")
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                at_end.add(msg.partition())
                continue
            sys.exit(f"reading: {msg.error()}")
        at_end.discard(msg.partition())
        read[msg.partition()].append(int(msg.value()))
    consumer.close()
    for p in range(partitions):
        expected = list(range(p, args.records, partitions))
        if read[p] != expected:
            got = read[p]
            first = next((k for k, (a, b) in enumerate(zip(got, expected)) if a != b), min(len(got), len(expected)))
            sys.exit(f"partition {p}: {len(got)} records, first difference at position {first}: {got[first:first + 5]} vs {expected[first:first + 5]}")
    print(f"each partition holds its numbers in order, once each, with no gap ({args.records} records)")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("topic")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    probe = Consumer({"bootstrap.servers": args.bootstrap, "group.id": "gapless-probe"})
    partitions = len(probe.list_topics(args.topic, timeout=10).topics[args.topic].partitions)
    probe.close()
    if args.check:
        check(args, partitions)
    else:
        produce(args, partitions)


if __name__ == "__main__":
    librdkafka_exit.run(main)
