"""A kafka-python consumer reading a partition across a change of its leader, through Rill's
Kafka listener: its truncation check (KIP-320) runs, and passes.

kafka-python (3.x; `kafka/consumer/fetcher.py`, `subscription_state.py`) keeps the leader epoch
of the last record it returned with its position. When the cluster's metadata shows the
partition under a newer leader epoch than that, it stops fetching the partition and asks the
leader with OffsetForLeaderEpoch (the position's epoch, and the metadata's as the current one)
where the position's epoch ended; an end before the position, or an undefined one, means the log
it read was truncated. With `auto_offset_reset='none'` that is `LogTruncationError` from `poll`
(with a reset policy it would quietly seek back to where the logs diverge, or reset); a position
beyond the log is `OffsetOutOfRangeError`.
A partition's leader epoch is its Raft term in Rill (docs/kafka.md, "Metadata",
"OffsetForLeaderEpoch"), and Raft never truncates a committed record, so the check must pass.

The test: RECORDS numbered records are written (acks=all, idempotent) to partition 0, whose
value is their offset; the consumer (`auto_offset_reset='none'`, no group) reads the first
READ_BEFORE; the partition's leader (`rill topic describe`) is stopped — the node is a child
process of `rill dev` — and another node leads it in a later epoch; RECORDS more are written; the
consumer reads on to the end. It must read every offset once, in order, without an error; it
must have sent OffsetForLeaderEpoch for its position's epoch (seen in kafka-python's debug log
of its requests and responses), and Rill must have answered where that epoch's records end, as
Kafka would: the first offset written under the new leader.

    leader_change.py TOPIC --bootstrap KAFKA_HOST:PORT[,...] --rill RILL_CLI \
        --rill-bootstrap GRPC_HOST:PORT[,...] --rill-dev-pid PID [--signal TERM|KILL]

The topic must exist, empty, with one partition replicated on the nodes of that `rill dev`
(create it with `--config replica.lag.time.max.ms=2000`: after a SIGKILL, acks=all writes wait
that long for the dead node to leave the in-sync replicas). The stopped node stays stopped.
"""

import argparse
import json
import logging
import subprocess
import sys
import time

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
import kafka.errors

RECORDS = 100
READ_BEFORE = 60
DEADLINE_S = 60


class Exchanges(logging.Handler):
    """kafka-python's debug log of the requests it sends and the responses it gets
    (`kafka.net.connection`), kept for its OffsetForLeaderEpoch exchanges; and any truncation
    its consumer reports (`kafka.consumer`)."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.asked, self.answered, self.truncations, self.failures = [], [], [], []

    def emit(self, record):
        # An exception here would be raised where kafka-python logs: keep it for later instead.
        try:
            if record.name.startswith("kafka.consumer") and "runcation" in str(record.msg):
                self.truncations.append(record.getMessage())
            if record.name != "kafka.net.connection" or not isinstance(record.args, tuple):
                return
            for arg in record.args:
                kind = type(arg).__name__
                if kind == "OffsetForLeaderEpochRequest":
                    self.asked += [(t, p.partition, p.leader_epoch) for t, p in partitions(arg)]
                elif kind == "OffsetForLeaderEpochResponse":
                    self.answered += [(t, p.partition, p.error_code, p.leader_epoch, p.end_offset) for t, p in partitions(arg)]
        except Exception as e:  # noqa: BLE001 (reported by the test)
            self.failures.append(repr(e))


def partitions(message):
    """(topic, partition entry) of an OffsetForLeaderEpoch request or response, whose topics
    kafka-python holds as objects or as (name, partitions) pairs."""
    for topic in message.topics:
        name, entries = topic if isinstance(topic, tuple) else (topic.topic, topic.partitions)
        for entry in entries:
            yield name, entry


def produce(args, first):
    producer = KafkaProducer(bootstrap_servers=args.bootstrap, acks="all", enable_idempotence=True, linger_ms=5)
    sent = [producer.send(args.topic, value=str(first + i).encode(), partition=0) for i in range(RECORDS)]
    producer.flush(DEADLINE_S)
    offsets = [f.get(timeout=DEADLINE_S).offset for f in sent]
    producer.close()
    if offsets != list(range(first, first + RECORDS)):
        sys.exit(f"records {first}..{first + RECORDS - 1} were written at offsets {offsets}")


def describe(args):
    """Partition 0 as Rill describes it (`rill topic describe`)."""
    out = subprocess.run(
        [args.rill, "--bootstrap", args.rill_bootstrap, "topic", "describe", args.topic, "--output", "json"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if out.returncode != 0:
        return None
    return json.loads(out.stdout)["partitions"][0]


def preferred_leader(partition):
    """The partition's leader and replicas, when its leader is its preferred replica."""
    if partition and partition["replicas"] and partition["leader"] == partition["replicas"][0]:
        return {"leader": partition["leader"], "replicas": partition["replicas"]}
    return None


def node_process(dev_pid, node):
    """The pid of `rill dev`'s rill-server child that runs `node`."""
    ps = subprocess.run(["ps", "-A", "-o", "pid=,ppid=,args="], capture_output=True, text=True, check=True)
    for line in ps.stdout.splitlines():
        pid, ppid, command = line.split(None, 2)
        words = command.split()
        if int(ppid) == dev_pid and "--node-id" in words and words[words.index("--node-id") + 1] == str(node):
            return int(pid)
    sys.exit(f"rill dev (pid {dev_pid}) runs no process for node {node}")


def exited(pid):
    """True once `pid` has exited (a zombie until `rill dev` reaps it, or gone)."""
    ps = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True)
    return ps.stdout.strip() in ("", "Z") or ps.stdout.strip().startswith("Z")


def wait_for(what, ready, deadline_s=DEADLINE_S):
    deadline = time.monotonic() + deadline_s
    while True:
        got = ready()
        if got:
            return got
        if time.monotonic() > deadline:
            sys.exit(f"{what}: not within {deadline_s} s")
        time.sleep(0.2)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("topic")
    parser.add_argument("--bootstrap", required=True, help="Kafka listeners")
    parser.add_argument("--rill", required=True, help="the rill CLI")
    parser.add_argument("--rill-bootstrap", required=True, help="gRPC listeners, for the rill CLI")
    parser.add_argument("--rill-dev-pid", type=int, required=True, help="the `rill dev` whose node is stopped")
    parser.add_argument("--signal", choices=["TERM", "KILL"], default="TERM", help="how the leader is stopped")
    parser.add_argument("--log", help="write kafka-python's debug log here")
    args = parser.parse_args()
    if args.log:
        handler = logging.FileHandler(args.log, mode="w")
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
        logging.getLogger("kafka").addHandler(handler)
        logging.getLogger("kafka").setLevel(logging.DEBUG)

    exchanges = Exchanges()
    for name in ("kafka.net.connection", "kafka.consumer"):
        logging.getLogger(name).setLevel(logging.DEBUG)
        logging.getLogger(name).addHandler(exchanges)

    tp = TopicPartition(args.topic, 0)
    # Led by its preferred replica (the first), as a new partition settles: then preferred-leader
    # balancing moves nothing, and the leader changes only when this test stops it.
    settled = wait_for("the partition led by its preferred replica", lambda: preferred_leader(describe(args)))
    produce(args, 0)
    consumer = KafkaConsumer(
        bootstrap_servers=args.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        # No reset policy: a truncation raises LogTruncationError, a position past the log
        # OffsetOutOfRangeError, instead of a quiet seek.
        auto_offset_reset="none",
        retry_backoff_ms=100,
    )
    consumer.assign([tp])
    consumer.seek(tp, 0)
    read = []

    def read_until(count):
        deadline = time.monotonic() + DEADLINE_S
        while len(read) < count:
            if time.monotonic() > deadline:
                sys.exit(f"the consumer read {len(read)} records in {DEADLINE_S} s, not {count}")
            # Raises LogTruncationError, OffsetOutOfRangeError, or any other error kafka-python
            # does not retry itself.
            polled = consumer.poll(timeout_ms=200, max_records=min(10, count - len(read)))
            read.extend(polled.get(tp, []))

    read_until(READ_BEFORE)
    old_epoch = {r.leader_epoch for r in read}
    if len(old_epoch) != 1 or min(old_epoch) < 0:
        sys.exit(f"the first records carry leader epochs {old_epoch}")
    (old_epoch,) = old_epoch
    print(f"a kafka-python consumer with no offset reset policy read {READ_BEFORE} of {RECORDS} records, all written in one leader epoch")

    leader = settled["leader"]
    if preferred_leader(describe(args)) != settled:
        sys.exit(f"the partition's leader moved on its own: {describe(args)}")
    pid = node_process(args.rill_dev_pid, leader)
    subprocess.run(["kill", f"-{args.signal}", str(pid)], check=True)
    wait_for(f"node {leader} exiting", lambda: exited(pid))
    wait_for("another leader", lambda: (describe(args) or {}).get("leader") not in (None, 0, leader))
    print(f"the partition's leader was stopped (SIG{args.signal}) and another node leads it")

    produce(args, RECORDS)
    read_until(2 * RECORDS)
    if consumer.poll(timeout_ms=500).get(tp):
        sys.exit("the consumer read more records than were written")
    offsets = [r.offset for r in read]
    values = [int(r.value) for r in read]
    if offsets != list(range(2 * RECORDS)) or values != offsets:
        sys.exit(f"the consumer read offsets {offsets} (values {values}), not each of 0..{2 * RECORDS - 1} once in order")
    new_epochs = {r.leader_epoch for r in read[RECORDS:]}
    if {r.leader_epoch for r in read[:RECORDS]} != {old_epoch} or len(new_epochs) != 1 or min(new_epochs) <= old_epoch:
        sys.exit(f"records before the change carry epochs {sorted({r.leader_epoch for r in read[:RECORDS]})}, after it {sorted(new_epochs)}")
    print(f"{RECORDS} more records were written under the new leader, in a later leader epoch")

    # The truncation check ran: OffsetForLeaderEpoch for the position's epoch, answered with the
    # first offset written under the new leader (at or past the position: no truncation).
    if exchanges.failures:
        sys.exit(f"kafka-python's log could not be read: {exchanges.failures[0]}")
    asked, answers = exchanges.asked, exchanges.answered
    if (args.topic, 0, old_epoch) not in asked:
        sys.exit(f"the consumer never asked OffsetForLeaderEpoch about epoch {old_epoch}: it asked {asked}")
    answered = [(e, end) for topic, part, error, e, end in answers if (topic, part, error) == (args.topic, 0, 0)]
    if not answered or any(a != (old_epoch, RECORDS) for a in answered):
        sys.exit(f"OffsetForLeaderEpoch for epoch {old_epoch} answered {answers}; Kafka answers epoch {old_epoch}, end offset {RECORDS}")
    if exchanges.truncations:
        sys.exit(f"kafka-python reported truncation: {exchanges.truncations}")
    print(f"the consumer checked its position with OffsetForLeaderEpoch for its last record's epoch; Rill answered that the epoch ends at offset {RECORDS}, where the new leader's records begin, as Kafka does")
    print("the consumer read on to the end with no truncation or out-of-range error: every offset once, in order")
    consumer.close()


if __name__ == "__main__":
    try:
        main()
    except kafka.errors.KafkaError as e:
        sys.exit(f"kafka-python: {e!r}")
