#!/usr/bin/env python3
"""Two members of one consumer group over gRPC (Groups.ConsumerGroupHeartbeat, KIP-848), without
the Rust client: the first joins alone and takes every partition; its heartbeats are long polls
(`wait_ms`); the second joins while one is held; they share the topic's partitions cooperatively,
commit as members, and leave.

    group.py TOPIC --group G [--bootstrap ...]

Prints, once the first member is stable, that its held heartbeat was answered at the end of its
hold (nothing changed), then that an owner's held heartbeat was answered early, with a
revocation, when the second member joined. Then, once the group is stable, how the partitions
were shared (`shared 1+1`), the codes of a commit of a partition the member owns (NONE) and of
one it does not (STALE_MEMBER_EPOCH), and `left`.
"""
import argparse
import os
import time

from rill_api import Cluster, common_pb2
import groups_pb2  # noqa: E402

RETRY = {common_pb2.NOT_COORDINATOR, common_pb2.COORDINATOR_LOAD_IN_PROGRESS, common_pb2.COORDINATOR_NOT_AVAILABLE}


class Member:
    """One member: its id, epoch and what it owns; it acts on every assignment at once."""

    def __init__(self, stub, group, topic, name):
        self.stub, self.group, self.topic, self.name = stub, group, topic, name
        self.member_id, self.epoch, self.owned = "", 0, set()

    def heartbeat(self, wait_ms=0):
        """One heartbeat; with `wait_ms` the coordinator may hold it that long if nothing changes."""
        self.answer(self.send(wait_ms).result())

    def send(self, wait_ms=0):
        """Sends a heartbeat without waiting for its answer (a grpc future)."""
        joining = self.epoch == 0
        req = groups_pb2.ConsumerGroupHeartbeatRequest(
            group_id=self.group,
            member_id=self.member_id,
            member_epoch=self.epoch,
            client_id=f"python-{self.name}",
            owned=groups_pb2.OwnedPartitions(
                topics=[groups_pb2.TopicPartitions(topic=self.topic, partitions=sorted(self.owned))]
            ),
        )
        if joining:
            req.rebalance_timeout_ms = 30000
            req.subscribed_topics.topics.append(self.topic)
        if wait_ms:
            req.wait_ms = wait_ms
        # The deadline allows for the hold.
        return self.stub.ConsumerGroupHeartbeat.future(req, timeout=10 + wait_ms / 1000)

    def answer(self, resp):
        """Takes a heartbeat's answer: the member's id, epoch and assignment."""
        if resp.error_code in RETRY:
            time.sleep(0.2)
            return
        if resp.error_code != common_pb2.NONE:
            raise SystemExit(f"{self.name}: {common_pb2.ErrorCode.Name(resp.error_code)}: {resp.error_message}")
        self.member_id, self.epoch = resp.member_id, resp.member_epoch
        if resp.HasField("assignment"):
            # Revoking is leaving a partition out of the next heartbeat's owned partitions.
            self.owned = {p for t in resp.assignment.topics for p in t.partitions}

    def commit(self, partition):
        req = groups_pb2.CommitOffsetsRequest(
            group_id=self.group,
            member_id=self.member_id,
            generation_id=self.epoch,
            topics=[
                groups_pb2.CommitTopic(
                    topic=self.topic, partitions=[groups_pb2.CommitPartition(partition=partition, offset=0)]
                )
            ],
        )
        resp = self.stub.CommitOffsets(req, timeout=10)
        code = resp.error_code or resp.topics[0].partitions[0].error_code
        return common_pb2.ErrorCode.Name(code)

    def leave(self):
        req = groups_pb2.ConsumerGroupHeartbeatRequest(group_id=self.group, member_id=self.member_id, member_epoch=-1)
        resp = self.stub.ConsumerGroupHeartbeat(req, timeout=10)
        if resp.error_code != common_pb2.NONE or resp.member_epoch != -1:
            raise SystemExit(f"{self.name}: leaving failed: {resp}")


HOLD_MS = 1000
# Longer than the coordinator's largest hold (5 s), so the coordinator's cap decides.
LONG_HOLD_MS = 10000
# An owner woken by a join hears well within half of that cap.
EARLY_S = 2.5


def settle(done, *members):
    """Heartbeats (unheld) until `done()` holds and no member's epoch or assignment changed."""
    for _ in range(100):
        before = [(m.epoch, set(m.owned)) for m in members]
        for m in members:
            m.heartbeat()
        if done() and before == [(m.epoch, m.owned) for m in members]:
            return
        time.sleep(0.1)
    raise SystemExit(f"the group did not settle: {[(m.name, m.owned) for m in members]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("topic")
    ap.add_argument("--group", required=True)
    ap.add_argument("--bootstrap", default=os.environ.get("RILL_BOOTSTRAP", "127.0.0.1:7001"))
    args = ap.parse_args()

    cluster = Cluster(args.bootstrap)
    partitions = cluster.partitions(args.topic)
    stub = cluster.groups_stub(args.group)

    a, b = Member(stub, args.group, args.topic, "a"), Member(stub, args.group, args.topic, "b")
    # The first member joins alone and heartbeats until it owns every partition at a steady epoch.
    settle(lambda: len(a.owned) == partitions, a)

    # Nothing changes, so a held heartbeat is answered at the end of its hold, not at once.
    epoch, started = a.epoch, time.monotonic()
    a.heartbeat(wait_ms=HOLD_MS)
    held = time.monotonic() - started
    if held < HOLD_MS / 1000 * 0.9 or a.epoch != epoch or len(a.owned) != partitions:
        raise SystemExit(f"a stable member's held heartbeat came back after {held:.2f} s: epoch {a.epoch}, {a.owned}")
    print("held heartbeat of a stable member: answered at the end of its hold")

    # The owner holds a heartbeat for as long as the coordinator allows; the second member joins
    # meanwhile. The held heartbeat is answered as soon as the owner must give a partition up.
    started = time.monotonic()
    pending = a.send(wait_ms=LONG_HOLD_MS)
    b.heartbeat()
    a.answer(pending.result())
    waited = time.monotonic() - started
    if len(a.owned) >= partitions or waited >= EARLY_S:
        raise SystemExit(f"the owner's held heartbeat came back after {waited:.2f} s owning {a.owned}")
    print("held heartbeat of an owner: answered early with a revocation when a second member joined")

    # Both heartbeat until their assignments cover the topic once and neither changes.
    settle(lambda: not (a.owned & b.owned) and len(a.owned | b.owned) == partitions, a, b)
    print(f"shared {len(a.owned)}+{len(b.owned)}")
    print(f"commit own partition: {a.commit(min(a.owned))}")
    print(f"commit other's partition: {a.commit(min(b.owned))}")
    a.leave()
    b.leave()
    print("left")


if __name__ == "__main__":
    main()
