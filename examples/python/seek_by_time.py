"""Finding records by their timestamps, and replacing a topic's settings, through Rill's Kafka
listener with two clients no one at Rill wrote.

kafka-python produces records whose timestamps are out of order (as producers' clocks allow),
then both kafka-python's `offsets_for_times` and confluent-kafka's (librdkafka's) find, for
each time, the first record at or after it — by the records' own timestamps, in offset order —
and confluent-kafka's admin client finds the record with the largest timestamp. Both clients'
admin clients then replace the topic's settings with the legacy AlterConfigs: the settings
named are set, one left out returns to its default.

    seek_by_time.py TOPIC --bootstrap HOST:PORT[,...]

The topic must exist with one partition.
"""

import argparse
import sys
import warnings

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec
from confluent_kafka.admin import ConfigResource as ConfluentConfigResource
from kafka import KafkaConsumer, KafkaProducer
from kafka import TopicPartition as KafkaTopicPartition
from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient

# The records' timestamps, in offset order: a clock that jumps back, twice.
STAMPS = [1_000, 5_000, 2_000, 3_000, 5_000, 4_000, 4_500]
# Each searched time, and the (offset, timestamp) of the first record at or after it.
SEARCHES = {0: (0, 1_000), 1_500: (1, 5_000), 4_200: (1, 5_000), 5_001: (None, None)}


def produce(args):
    producer = KafkaProducer(bootstrap_servers=args.bootstrap, acks="all", linger_ms=0)
    for i, stamp in enumerate(STAMPS):
        # One batch each: the search reads batch headers first, then the records of the batches
        # that may hold the answer.
        producer.send(args.topic, value=f"v{i}".encode(), partition=0, timestamp_ms=stamp).get(timeout=30)
    producer.close()


def kafka_python_search(args):
    consumer = KafkaConsumer(bootstrap_servers=args.bootstrap)
    tp = KafkaTopicPartition(args.topic, 0)
    found = {}
    for time in SEARCHES:
        answer = consumer.offsets_for_times({tp: time})[tp]
        found[time] = (answer.offset, answer.timestamp) if answer is not None else (None, None)
    consumer.close()
    return found


def confluent_search(args):
    consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": "seek-by-time"})
    found = {}
    for time in SEARCHES:
        (answer,) = consumer.offsets_for_times([TopicPartition(args.topic, 0, time)], timeout=30)
        if answer.error is not None:
            sys.exit(f"confluent-kafka offsets_for_times({time}): {answer.error}")
        # librdkafka answers -1 (OFFSET_END) when no record is at or after the time.
        found[time] = (answer.offset, None) if answer.offset >= 0 else (None, None)
    consumer.close()
    admin = AdminClient({"bootstrap.servers": args.bootstrap})
    tp = TopicPartition(args.topic, 0)
    largest = admin.list_offsets({tp: OffsetSpec.max_timestamp()})[tp].result(timeout=30)
    return found, (largest.offset, largest.timestamp)


def replace_settings(args):
    """Both clients' legacy AlterConfigs: kafka-python's sets two settings (it re-sends the
    topic's other modified settings with them, knowing the request replaces them all);
    confluent-kafka's sends only the one it names, and the other returns to its default."""
    kafka_admin = KafkaAdminClient(bootstrap_servers=args.bootstrap)
    admin = AdminClient({"bootstrap.servers": args.bootstrap})

    def settings():
        resource = ConfluentConfigResource("topic", args.topic)
        described = admin.describe_configs([resource])[resource].result(timeout=30)
        return {key: entry.value for key, entry in described.items()}

    default_retention = settings()["retention.ms"]
    both = {"retention.ms": "3600000", "max.message.bytes": "4096"}
    # incremental=False: the legacy AlterConfigs.
    kafka_admin.alter_configs(
        [ConfigResource(ConfigResourceType.TOPIC, args.topic, configs=both)], incremental=False
    )
    kafka_admin.close()
    after_both = settings()
    resource = ConfluentConfigResource("topic", args.topic, set_config={"max.message.bytes": "8192"})
    # The legacy API is what this checks; confluent-kafka warns that it is deprecated.
    warnings.filterwarnings("ignore", message="alter_configs has been deprecated", category=DeprecationWarning)
    admin.alter_configs([resource])[resource].result(timeout=30)
    after_one = settings()
    if (after_both["retention.ms"], after_both["max.message.bytes"]) != ("3600000", "4096"):
        sys.exit(f"kafka-python's alter_configs left {after_both}")
    if (after_one["retention.ms"], after_one["max.message.bytes"]) != (default_retention, "8192"):
        sys.exit(f"confluent-kafka's alter_configs left {after_one}; retention.ms should be back to {default_retention}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("topic")
    parser.add_argument("--bootstrap", required=True)
    args = parser.parse_args()

    produce(args)
    print(f"produced {len(STAMPS)} records with timestamps out of order")
    by_kafka_python = kafka_python_search(args)
    if by_kafka_python != SEARCHES:
        sys.exit(f"kafka-python found {by_kafka_python}, expected {SEARCHES}")
    print("kafka-python: each time's first record at or after it, with its timestamp; none after the largest")
    by_confluent, largest = confluent_search(args)
    expected = {time: (offset, None) for time, (offset, _) in SEARCHES.items()}
    if by_confluent != expected:
        sys.exit(f"confluent-kafka found {by_confluent}, expected {expected}")
    if largest != (1, 5_000):
        sys.exit(f"confluent-kafka's max_timestamp found {largest}, expected (1, 5000)")
    print("confluent-kafka: the same offsets; the largest timestamp is the first record holding it")
    replace_settings(args)
    print("the legacy alter_configs replaced the settings (kafka-python's, then confluent-kafka's): the one left out is back to its default")


if __name__ == "__main__":
    main()
