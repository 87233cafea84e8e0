"""An exactly-once job through Rill's Kafka listener with confluent-kafka (librdkafka), a Kafka
client no one at Rill wrote: consume-transform-produce in transactions.

An idempotent producer writes RECORDS numbered records to the input topic. The job is a
consumer (`read_committed`, no auto-commit) and a transactional producer: for each batch it
polls, it begins a transaction, writes each record's transformation to the output topic,
commits the consumer's positions in the same transaction (`send_offsets_to_transaction`), and
commits the transaction. Every third transaction is aborted instead, and the consumer rewinds
to its committed offsets, so those inputs are transformed again in a later transaction.

Then the output is read back at `read_committed`: every input appears exactly once. At
`read_uncommitted` the aborted transactions' records are there too (the aborts did write), and
the group's committed offsets are the input partitions' ends.

    eos_job.py all INPUT OUTPUT --bootstrap HOST:PORT[,...] --group GROUP --dump FILE

Both topics must exist, empty. `verify` writes the output's committed values, one per line,
sorted, to --dump (for a reader through another protocol to compare). The steps run on their
own too (`fill`, `run`, `verify`), so a test can kill nodes, or the job itself, while `run`
runs and start it again: a new job with the same transactional id fences the old one's
producer and resumes from the group's committed offsets. Errors a moving leader or coordinator
causes are retried, or abort the transaction, which is then done again; a fatal one fails.
"""

import argparse
import sys
import time

from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
import librdkafka_exit

BATCH = 25


def transform(value):
    return f"processed-{value}"


def read_all(bootstrap, topic, isolation, expected, group):
    """Every record of `topic` at `isolation`, read until `expected` are in or the time is up."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "isolation.level": isolation,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    metadata = consumer.list_topics(topic, timeout=10).topics[topic]
    consumer.assign([TopicPartition(topic, p, 0) for p in metadata.partitions])
    values, at_end = [], set()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and (len(values) < expected or len(at_end) < len(metadata.partitions)):
        msg = consumer.poll(0.2)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == KafkaError._PARTITION_EOF:
                at_end.add(msg.partition())
                continue
            sys.exit(f"reading {topic}: {msg.error()}")
        at_end.discard(msg.partition())
        values.append(msg.value().decode())
    consumer.close()
    return values


def fill(args):
    source = Producer({"bootstrap.servers": args.bootstrap, "acks": "all", "enable.idempotence": True})
    for i in range(args.records):
        source.produce(args.input, key=f"k{i}", value=str(i))
    if source.flush(60) != 0:
        sys.exit("input records left unacknowledged after 60 s")


# Errors of a coordinator moving that librdkafka hands to the application without marking them
# retriable (`committed()` answers NOT_COORDINATOR while the group's coordinator changes); Kafka's
# Java client retries them itself.
COORDINATOR_MOVING = {
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
}


def retrying(what, call, deadline):
    """`call()`, again while it fails with a retriable error (a leader or coordinator moving)."""
    while True:
        try:
            return call()
        except KafkaException as e:
            error = e.args[0]
            retriable = error.retriable() or error.code() in COORDINATOR_MOVING
            if not retriable or time.monotonic() > deadline:
                raise
            print(f"{what}: {error}; retrying", file=sys.stderr)
            time.sleep(0.2)


def run(args):
    """The job: until the group's offsets, committed in its transactions, reach the input's ends."""
    consumer = Consumer(
        {
            "bootstrap.servers": args.bootstrap,
            "group.id": args.group,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 10000,
        }
    )
    producer = Producer(
        {
            "bootstrap.servers": args.bootstrap,
            "transactional.id": args.group + "-producer",
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 5,
            "transaction.timeout.ms": 30000,
        }
    )
    deadline = time.monotonic() + args.deadline
    retrying("init_transactions", lambda: producer.init_transactions(30), deadline)
    partitions = consumer.list_topics(args.input, timeout=10).topics[args.input].partitions
    ends = {p: consumer.get_watermark_offsets(TopicPartition(args.input, p), timeout=10)[1] for p in partitions}
    everything = [TopicPartition(args.input, p) for p in partitions]
    consumer.subscribe([args.input])
    transactions = aborted = 0

    def finished():
        committed = retrying("committed", lambda: consumer.committed(everything, timeout=10), deadline)
        return all(tp.offset >= ends[tp.partition] for tp in committed)

    def rewind():
        # Back to what the group committed: the aborted batch is read and done again.
        assignment = consumer.assignment()
        committed = retrying("committed", lambda: consumer.committed(assignment, timeout=10), deadline)
        for tp in committed:
            consumer.seek(TopicPartition(tp.topic, tp.partition, tp.offset if tp.offset >= 0 else 0))

    while not finished():
        if time.monotonic() > deadline:
            sys.exit(f"the job did not finish in {args.deadline} s")
        batch = consumer.consume(BATCH, 0.5)
        for msg in batch:
            if msg.error() and msg.error().fatal():
                sys.exit(f"consumer error: {msg.error()}")
        batch = [m for m in batch if not m.error()]
        if not batch:
            continue
        producer.begin_transaction()
        try:
            for msg in batch:
                producer.produce(args.output, key=msg.key(), value=transform(msg.value().decode()))
            transactions += 1
            if transactions % 3 == 0:
                # Written first (librdkafka would drop records still queued), then aborted: the
                # log holds them, and read_committed must not show them.
                if producer.flush(30) != 0:
                    sys.exit("an aborted transaction's records left unacknowledged after 30 s")
                producer.abort_transaction(30)
                aborted += 1
                rewind()
                continue
            positions = consumer.position(consumer.assignment())
            retrying(
                "send_offsets_to_transaction",
                lambda: producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30),
                deadline,
            )
            retrying("commit_transaction", lambda: producer.commit_transaction(30), deadline)
            print(f"committed a transaction of {len(batch)} records", file=sys.stderr, flush=True)
        except KafkaException as e:
            if not e.args[0].txn_requires_abort():
                raise
            # A partition leader or the group moved under the transaction: abort it, do it again.
            print(f"aborting: {e.args[0]}", file=sys.stderr)
            retrying("abort_transaction", lambda: producer.abort_transaction(30), deadline)
            aborted += 1
            rewind()
    consumer.close()
    return transactions, aborted


def verify(args):
    committed = read_all(args.bootstrap, args.output, "read_committed", args.records, args.group + "-check")
    expected = sorted(transform(i) for i in range(args.records))
    if sorted(committed) != expected:
        missing = sorted(set(expected) - set(committed))
        twice = sorted({v for v in committed if committed.count(v) > 1})
        sys.exit(f"read_committed output: {len(committed)} records, missing {missing[:10]}, twice {twice[:10]}")
    print(f"read_committed: each of the {args.records} inputs is in the output exactly once")
    uncommitted = read_all(args.bootstrap, args.output, "read_uncommitted", args.records + 1, args.group + "-check-all")
    if len(uncommitted) <= args.records:
        sys.exit(f"read_uncommitted output holds {len(uncommitted)} records: the aborted transactions wrote nothing")
    print("read_uncommitted: the aborted transactions' records are there too")

    consumer = Consumer({"bootstrap.servers": args.bootstrap, "group.id": args.group})
    partitions = consumer.list_topics(args.input, timeout=10).topics[args.input].partitions
    ends = {p: consumer.get_watermark_offsets(TopicPartition(args.input, p), timeout=10)[1] for p in partitions}
    offsets = consumer.committed([TopicPartition(args.input, p) for p in partitions], timeout=10)
    got = {tp.partition: tp.offset for tp in offsets}
    if got != ends:
        sys.exit(f"the group committed {got}; the input ends at {ends}")
    print("the group's offsets, committed in the transactions, are the input's ends")
    consumer.close()
    with open(args.dump, "w") as out:
        out.write("".join(v + "\n" for v in sorted(committed)))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=["all", "fill", "run", "verify"])
    parser.add_argument("input")
    parser.add_argument("output")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--records", type=int, default=300)
    parser.add_argument("--deadline", type=int, default=120, help="seconds the job may run")
    parser.add_argument("--dump", help="verify: where to write the committed output's values, sorted")
    args = parser.parse_args()
    if args.step in ("all", "fill"):
        fill(args)
    if args.step in ("all", "run"):
        transactions, aborted = run(args)
        if args.step == "all" and (aborted == 0 or transactions - aborted == 0):
            sys.exit(f"{transactions} transactions, {aborted} aborted: the job did not both commit and abort")
        print("the job committed transactions and aborted every third one, whose inputs it did again")
    if args.step in ("all", "verify"):
        if not args.dump:
            sys.exit("verify needs --dump")
        verify(args)


if __name__ == "__main__":
    librdkafka_exit.run(main)
