"""Rill through its Kafka listener with confluent-kafka (librdkafka 2.16), a Kafka client no one
at Rill wrote.

An idempotent producer (acks=all, five requests in flight, zstd, Java's murmur2 partitioner)
writes keyed records; every key lands where murmur2 places it. Then two members of one classic
group with the cooperative-sticky assignor share the topic: the first reads alone, the second
joins (an incremental rebalance moves partitions to it), and both read until every record is
read, committing synchronously after each record. Every record is read exactly once, and the
group's commits end at the partitions' ends. Last, the admin client creates a topic with the cluster's
defaults, grows it, sets and describes one of its settings, describes the cluster and deletes
the topic.

    confluent_client.py TOPIC --bootstrap HOST:PORT[,...] --group GROUP

The topic must exist, empty, with at least two partitions.
"""

import argparse
import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewPartitions, NewTopic
from kafka.partitioner.default import murmur2
import librdkafka_exit

RECORDS = 200
DEADLINE_S = 120


def produce(args, partitions):
    producer = Producer(
        {
            "bootstrap.servers": args.bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "max.in.flight.requests.per.connection": 5,
            "compression.type": "zstd",
            "partitioner": "murmur2_random",
            "linger.ms": 5,
        }
    )
    placed = {}

    def delivered(err, msg):
        if err is not None:
            sys.exit(f"delivery failed: {err}")
        placed[msg.key().decode()] = (msg.partition(), msg.offset())

    for i in range(RECORDS):
        producer.produce(args.topic, key=f"key-{i}", value=f"value-{i}", on_delivery=delivered)
    if producer.flush(30) != 0:
        sys.exit("records left unacknowledged after 30 s")
    for key, (partition, _) in placed.items():
        if partition != (murmur2(key.encode()) & 0x7FFFFFFF) % partitions:
            sys.exit(f"{key} is in partition {partition}, not where murmur2 puts it")
    return placed


def member(args):
    return Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": args.group,
            "partition.assignment.strategy": "cooperative-sticky",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 10000,
        }
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("topic")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--group", required=True)
    args = parser.parse_args()

    probe = Consumer({"bootstrap.servers": args.bootstrap, "group.id": args.group + "-probe"})
    partitions = len(probe.list_topics(args.topic, timeout=10).topics[args.topic].partitions)
    probe.close()
    placed = produce(args, partitions)
    print(f"produced {len(placed)} records idempotently, each where murmur2 places its key")

    first, second = member(args), member(args)
    first.subscribe([args.topic])
    read = {first: [], second: []}
    deadline = time.monotonic() + DEADLINE_S

    failed_commits = []
    # What a commit racing a rebalance is refused with; the records are read again.
    rebalancing = (KafkaError.ILLEGAL_GENERATION, KafkaError.REBALANCE_IN_PROGRESS, KafkaError.UNKNOWN_MEMBER_ID)

    def poll(consumer):
        msg = consumer.poll(0.2)
        if msg is None:
            return
        if msg.error():
            sys.exit(f"consumer error: {msg.error()}")
        read[consumer].append((msg.key().decode(), msg.partition(), msg.offset()))
        try:
            consumer.commit(message=msg, asynchronous=False)
        except KafkaException as e:
            if e.args[0].code() not in rebalancing:
                raise
            failed_commits.append(msg.key().decode())

    # The first member alone until it has read a quarter.
    while len(read[first]) < RECORDS // 4:
        if time.monotonic() > deadline:
            sys.exit(f"the first member read {len(read[first])} records in {DEADLINE_S} s")
        poll(first)
    second.subscribe([args.topic])
    def unread():
        return set(placed) - {k for r in read.values() for k, _, _ in r}

    while unread() or not second.assignment():
        if time.monotonic() > deadline:
            sys.exit(f"{len(unread())} of {RECORDS} records unread; the second member owns {second.assignment()}")
        poll(first)
        poll(second)
    if not first.assignment() or not second.assignment():
        sys.exit(f"the members do not share the topic: {first.assignment()} / {second.assignment()}")
    print("a second cooperative-sticky member joined and took partitions over; both kept reading")

    everything = read[first] + read[second]
    keys = [k for k, _, _ in everything]
    if set(keys) != set(placed):
        sys.exit(f"records never read: {sorted(set(placed) - set(keys))}")
    if len(keys) != len(set(keys)) and not failed_commits:
        sys.exit("records were read twice though every commit held")
    for key, partition, offset in everything:
        if placed[key] != (partition, offset):
            sys.exit(f"{key} read at {partition}/{offset}, acknowledged at {placed[key]}")
    print(f"every one of the {RECORDS} records read, at the offset it was acknowledged at; twice only after a refused commit")

    ends = {}
    for _, (partition, offset) in placed.items():
        ends[partition] = max(ends.get(partition, 0), offset + 1)
    committed = first.committed([TopicPartition(args.topic, p) for p in range(partitions)], timeout=10)
    got = {tp.partition: tp.offset for tp in committed if tp.offset >= 0}
    if got != ends:
        sys.exit(f"committed {got}, the partitions end at {ends}")
    print("the group's commits are the partitions' ends")
    first.close()
    second.close()
    administer(args)


def administer(args):
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    name = args.topic + "-admin"
    admin.create_topics([NewTopic(name, num_partitions=-1, replication_factor=-1)])[name].result(30)
    described = admin.list_topics(name, timeout=10).topics[name]
    replicas = {len(p.replicas) for p in described.partitions.values()}
    if (len(described.partitions), replicas) != (1, {3}):
        sys.exit(f"created with {len(described.partitions)} partition(s) of {replicas} replicas, not the defaults 1 and 3")
    admin.create_partitions([NewPartitions(name, 2)])[name].result(30)
    deadline = time.monotonic() + 30
    while len(admin.list_topics(name, timeout=10).topics[name].partitions) != 2:
        if time.monotonic() > deadline:
            sys.exit("the topic did not grow to 2 partitions")
        time.sleep(0.2)
    resource = ConfigResource(ConfigResource.Type.TOPIC, name)
    change = ConfigEntry("retention.ms", "3600000", incremental_operation=AlterConfigOpType.SET)
    admin.incremental_alter_configs([ConfigResource(ConfigResource.Type.TOPIC, name, incremental_configs=[change])])[
        resource
    ].result(30)
    described = admin.describe_configs([resource])[resource].result(30)
    if described["retention.ms"].value != "3600000" or described["retention.ms"].is_default:
        sys.exit(f"retention.ms described as {described['retention.ms']}")
    cluster = admin.describe_cluster().result(30)
    if len(cluster.nodes) != 3 or cluster.controller is None:
        sys.exit(f"described {len(cluster.nodes)} brokers, controller {cluster.controller}")
    admin.delete_topics([name])[name].result(30)
    print("admin: created a topic with the cluster's defaults (1 partition, 3 replicas), grew it, set and described a setting, described 3 brokers, deleted it")


if __name__ == "__main__":
    librdkafka_exit.run(main)
