"""A consumer group on Kafka's consumer group protocol (KIP-848, `group.protocol=consumer`)
through Rill's Kafka listener, with confluent-kafka (librdkafka): the coordinator assigns the
partitions (Rill's server-side `uniform` assignor), the members only heartbeat.

Writes RECORDS keyed records; a first member reads alone, a second joins and the coordinator
moves partitions to it (revoked from the first, then assigned); both read, committing after
every record, until every record is read. The admin client describes the group as the members
hold it. Every record is read once, the group's commits are the partitions' ends. Then the first member leaves and the second is given every partition.

    kip848_group.py TOPIC --bootstrap HOST:PORT[,...] --group GROUP

The topic must exist, empty, with at least two partitions.
"""

import argparse
import sys
import time

from confluent_kafka import Consumer, ConsumerGroupType, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
import librdkafka_exit

RECORDS = 200
DEADLINE_S = 120


def member(args):
    return Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": args.group,
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("topic")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--group", required=True)
    args = parser.parse_args()

    producer = Producer({"bootstrap.servers": args.bootstrap, "acks": "all", "enable.idempotence": True})
    placed = {}

    def delivered(err, msg):
        if err is not None:
            sys.exit(f"delivery failed: {err}")
        placed[msg.key().decode()] = (msg.partition(), msg.offset())

    for i in range(RECORDS):
        producer.produce(args.topic, key=f"key-{i}", value=f"value-{i}", on_delivery=delivered)
    if producer.flush(30) != 0:
        sys.exit("records left unacknowledged after 30 s")
    partitions = len({p for p, _ in placed.values()})

    first, second = member(args), member(args)
    first.subscribe([args.topic])
    read = []
    # A commit racing a reassignment is refused (the member's epoch moved on); its record may be
    # read again by the partition's next owner.
    refused = []
    deadline = time.monotonic() + DEADLINE_S

    def poll(consumer):
        msg = consumer.poll(0.1)
        if msg is None:
            return
        if msg.error():
            sys.exit(f"consumer error: {msg.error()}")
        read.append((msg.key().decode(), msg.partition(), msg.offset()))
        try:
            consumer.commit(message=msg, asynchronous=False)
        except KafkaException as e:
            if e.args[0].code() not in (KafkaError.STALE_MEMBER_EPOCH, KafkaError.UNKNOWN_MEMBER_ID):
                raise
            refused.append(msg.key().decode())

    while len(read) < RECORDS // 4:
        if time.monotonic() > deadline:
            sys.exit(f"the first member read {len(read)} records in {DEADLINE_S} s")
        poll(first)
    second.subscribe([args.topic])
    while {k for k, _, _ in read} != set(placed) or not second.assignment():
        if time.monotonic() > deadline:
            sys.exit(f"{len(set(placed) - {k for k, _, _ in read})} records unread; the second member owns {second.assignment()}")
        poll(first)
        poll(second)
    owned = (len(first.assignment()), len(second.assignment()))
    if 0 in owned or sum(owned) != partitions:
        sys.exit(f"the members do not share the {partitions} partitions: {owned}")
    print("the coordinator moved partitions to a second member; both kept reading")

    # The admin client's view (ConsumerGroupDescribe): a consumer group of two members whose
    # assignments are the ones the members hold.
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    described = admin.describe_consumer_groups([args.group])[args.group].result(30)
    held = sorted(sorted(tp.partition for tp in m.assignment()) for m in (first, second))
    shown = sorted(sorted(tp.partition for tp in m.assignment.topic_partitions) for m in described.members)
    if described.type != ConsumerGroupType.CONSUMER or shown != held:
        sys.exit(f"described as {described.type} with assignments {shown}; the members hold {held}")
    print("the admin client describes a consumer group whose members' assignments are what they hold")

    keys = [k for k, _, _ in read]
    if len(keys) != len(set(keys)) and not refused:
        sys.exit("records were read twice though every commit held")
    for key, partition, offset in read:
        if placed[key] != (partition, offset):
            sys.exit(f"{key} read at {partition}/{offset}, acknowledged at {placed[key]}")
    ends = {}
    for partition, offset in placed.values():
        ends[partition] = max(ends.get(partition, 0), offset + 1)
    committed = second.committed([TopicPartition(args.topic, p) for p in range(partitions)], timeout=10)
    got = {tp.partition: tp.offset for tp in committed}
    if got != ends:
        sys.exit(f"committed {got}, the partitions end at {ends}")
    print(f"every one of the {RECORDS} records read at its offset, twice only after a refused commit; the commits are the partitions' ends")

    first.close()
    while len(second.assignment()) != partitions:
        if time.monotonic() > deadline:
            sys.exit(f"after the first member left, the second owns {second.assignment()}")
        second.poll(0.1)
    print(f"the first member left; the second was given all {partitions} partitions")
    second.close()


if __name__ == "__main__":
    librdkafka_exit.run(main)
