"""A KIP-848 consumer (confluent-kafka, `group.protocol=consumer`) subscribing by regular
expression through Rill's Kafka listener: librdkafka sends the pattern in its heartbeat and
Rill's group coordinator resolves it against whole topic names — including topics created after
the member joined — and assigns what matches.

Creates PREFIX-a (2 partitions) and PREFIX-other-x (1 partition, which `^PREFIX-[a-z]$` does
not match as a whole), writes keyed records to both, subscribes a member to `^PREFIX-[a-z]$`,
and reads; then creates PREFIX-b, writes to it, and reads on. The member must read every record
of PREFIX-a and PREFIX-b, each at the offset it was acknowledged at, and none of PREFIX-other-x.

    pattern_group.py PREFIX --bootstrap HOST:PORT[,...] --group GROUP

The PREFIX-* topics must not exist.
"""

import argparse
import re
import sys
import time

from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic
import librdkafka_exit

RECORDS_PER_TOPIC = 30
DEADLINE_S = 90


def create(admin, name, partitions):
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=3)])[name].result(30)


def produce(producer, topic, placed):
    def delivered(err, msg):
        if err is not None:
            sys.exit(f"delivery to {topic} failed: {err}")
        placed[(msg.topic(), msg.key().decode())] = (msg.partition(), msg.offset())

    for i in range(RECORDS_PER_TOPIC):
        producer.produce(topic, key=f"key-{i}", value=f"value-{i}", on_delivery=delivered)
    if producer.flush(30) != 0:
        sys.exit(f"records to {topic} left unacknowledged after 30 s")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("prefix")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--group", required=True)
    args = parser.parse_args()
    a, b, other = f"{args.prefix}-a", f"{args.prefix}-b", f"{args.prefix}-other-x"
    pattern = f"^{re.escape(args.prefix)}-[a-z]$"

    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    create(admin, a, 2)
    create(admin, other, 1)
    producer = Producer({"bootstrap.servers": args.bootstrap, "acks": "all", "enable.idempotence": True})
    placed = {}
    produce(producer, a, placed)
    produce(producer, other, placed)

    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": args.group,
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            # Metadata refreshes are not what finds the new topic: the coordinator does.
            "topic.metadata.refresh.interval.ms": 300000,
        }
    )
    consumer.subscribe([pattern])
    read = {}
    deadline = time.monotonic() + DEADLINE_S

    def read_until(done, what):
        while not done():
            if time.monotonic() > deadline:
                assigned = sorted((tp.topic, tp.partition) for tp in consumer.assignment())
                sys.exit(f"{what} not within {DEADLINE_S} s; assigned {assigned}; read {len(read)}")
            msg = consumer.poll(0.1)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    continue
                sys.exit(f"consumer error: {msg.error()}")
            key = (msg.topic(), msg.key().decode())
            if key in read:
                sys.exit(f"{key} read twice")
            read[key] = (msg.partition(), msg.offset())

    wanted_a = {k for k in placed if k[0] == a}
    read_until(lambda: wanted_a <= set(read), f"every record of {a}")
    assigned = sorted({tp.topic for tp in consumer.assignment()})
    if assigned != [a]:
        sys.exit(f"the pattern {pattern} was assigned {assigned}; it matches {a} only")
    print(f"the coordinator assigned the topic the pattern matches as a whole, not {args.prefix}-other-x")

    create(admin, b, 1)
    produce(producer, b, placed)
    wanted = {k for k in placed if k[0] in (a, b)}
    read_until(lambda: wanted <= set(read), f"every record of {b}, a topic created after the member joined")
    print("a topic created later that matches was assigned at a following heartbeat, and read")

    if any(k[0] == other for k in read):
        sys.exit(f"records of {other} were read")
    for key, at in read.items():
        if placed[key] != at:
            sys.exit(f"{key} read at {at}, acknowledged at {placed[key]}")
    print(f"every one of the {len(wanted)} records of the matching topics read once, at its acknowledged offset")
    consumer.close()


if __name__ == "__main__":
    librdkafka_exit.run(main)
