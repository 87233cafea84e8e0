#!/usr/bin/env python3
"""A classic consumer group over gRPC (Groups.JoinGroup / SyncGroup / GroupHeartbeat / LeaveGroup:
Kafka's classic protocol), without the Rust client, the group's leader assigning partitions with
kafka-python's own RangePartitionAssignor over kafka-python's consumer protocol encoding — an
assignor and an encoding no one at Rill wrote.

    classic.py TOPIC --group G [--bootstrap ...]

Prints what happens, one line each: the first member is given its member id
(MEMBER_ID_REQUIRED) and joins generation 1 as its leader, owning every partition; when a second
member joins, the first one's heartbeat says REBALANCE_IN_PROGRESS; both rejoin, the leader
assigns, and they share the partitions (`generation 2 shared 1+1`); a commit under the current
generation is NONE, one under the old generation ILLEGAL_GENERATION; both leave.
"""
import argparse
import os
import threading
import time

from kafka.coordinator.assignors.range import RangePartitionAssignor
from kafka.protocol.consumer.metadata import ConsumerProtocolAssignment, ConsumerProtocolSubscription

from rill_api import Cluster, common_pb2
import groups_pb2  # noqa: E402

RETRY = {common_pb2.NOT_COORDINATOR, common_pb2.COORDINATOR_LOAD_IN_PROGRESS, common_pb2.COORDINATOR_NOT_AVAILABLE}
NAME = lambda code: common_pb2.ErrorCode.Name(code)  # noqa: E731


class Topics:
    """What kafka-python's assignor asks of the cluster: a topic's partitions."""

    def __init__(self, topic, partitions):
        self.topic, self.partitions = topic, partitions

    def partitions_for_topic(self, topic):
        return set(range(self.partitions)) if topic == self.topic else None


class Joined:
    """A member as kafka-python's assignor takes it (its JoinGroup member, metadata decoded)."""

    def __init__(self, member):
        self.member_id, self.group_instance_id = member.member_id, None
        self.metadata = ConsumerProtocolSubscription.decode(member.metadata)


class Member:
    """One classic member: its id, generation and assignment."""

    def __init__(self, stub, group, topic, partitions):
        self.stub, self.group, self.topic, self.partitions = stub, group, topic, partitions
        self.member_id, self.generation, self.owned = "", -1, []

    def call(self, method, req, timeout=30):
        """Calls `method` until the coordinator answers something other than its own codes."""
        for _ in range(100):
            resp = method(req, timeout=timeout)
            if resp.error_code not in RETRY:
                return resp
            time.sleep(0.2)
        raise SystemExit(f"{method}: the coordinator did not answer")

    def join(self):
        """Joins the next generation; the leader assigns with kafka-python's range assignor.
        Returns the JoinGroup answer's code."""
        metadata = RangePartitionAssignor.metadata([self.topic]).encode()
        req = groups_pb2.JoinGroupRequest(
            group_id=self.group,
            member_id=self.member_id,
            protocol_type="consumer",
            protocols=[groups_pb2.GroupProtocol(name="range", metadata=metadata)],
            session_timeout_ms=10000,
            rebalance_timeout_ms=5000,
            client_id="python-classic",
        )
        resp = self.call(self.stub.JoinGroup, req)
        if resp.error_code == common_pb2.MEMBER_ID_REQUIRED:
            self.member_id = resp.member_id
            return resp.error_code
        if resp.error_code != common_pb2.NONE:
            raise SystemExit(f"join: {NAME(resp.error_code)}: {resp.error_message}")
        self.member_id, self.generation = resp.member_id, resp.generation_id
        assignments = []
        if resp.leader == self.member_id:
            members = [Joined(m) for m in resp.members]
            assigned = RangePartitionAssignor.assign(Topics(self.topic, self.partitions), members)
            assignments = [
                groups_pb2.MemberAssignment(member_id=m, assignment=a.encode()) for m, a in assigned.items()
            ]
        sync = groups_pb2.SyncGroupRequest(
            group_id=self.group,
            member_id=self.member_id,
            generation_id=self.generation,
            protocol_type="consumer",
            protocol_name="range",
            assignments=assignments,
        )
        synced = self.call(self.stub.SyncGroup, sync)
        if synced.error_code != common_pb2.NONE:
            raise SystemExit(f"sync: {NAME(synced.error_code)}: {synced.error_message}")
        assignment = ConsumerProtocolAssignment.decode(synced.assignment)
        self.owned = sorted(tp.partition for tp in assignment.partitions() if tp.topic == self.topic)
        return resp.error_code

    def heartbeat(self):
        req = groups_pb2.GroupHeartbeatRequest(
            group_id=self.group, member_id=self.member_id, generation_id=self.generation
        )
        return self.call(self.stub.GroupHeartbeat, req, timeout=10).error_code

    def commit(self, generation):
        req = groups_pb2.CommitOffsetsRequest(
            group_id=self.group,
            member_id=self.member_id,
            generation_id=generation,
            topics=[
                groups_pb2.CommitTopic(
                    topic=self.topic, partitions=[groups_pb2.CommitPartition(partition=self.owned[0], offset=0)]
                )
            ],
        )
        resp = self.call(self.stub.CommitOffsets, req, timeout=10)
        if resp.error_code != common_pb2.NONE:
            return resp.error_code
        return resp.topics[0].partitions[0].error_code

    def leave(self):
        req = groups_pb2.LeaveGroupRequest(
            group_id=self.group, members=[groups_pb2.LeavingMember(member_id=self.member_id)]
        )
        resp = self.call(self.stub.LeaveGroup, req, timeout=10)
        codes = [resp.error_code] + [m.error_code for m in resp.members]
        if any(c != common_pb2.NONE for c in codes):
            raise SystemExit(f"leave: {[NAME(c) for c in codes]}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("topic")
    parser.add_argument("--group", required=True)
    parser.add_argument("--bootstrap", default=os.environ.get("RILL_BOOTSTRAP", "127.0.0.1:7001"))
    args = parser.parse_args()
    cluster = Cluster(args.bootstrap)
    partitions = cluster.partitions(args.topic)
    stub = cluster.groups_stub(args.group)
    first, second = Member(stub, args.group, args.topic, partitions), Member(stub, args.group, args.topic, partitions)

    print(f"first join: {NAME(first.join())}")
    code = first.join()
    print(f"joined generation {first.generation} as leader owning {len(first.owned)} of {partitions}: {NAME(code)}")
    # The second member's join parks until the first rejoins: it runs beside.
    joining = threading.Thread(target=lambda: (second.join(), second.join()))
    joining.start()
    for _ in range(50):
        code = first.heartbeat()
        if code == common_pb2.REBALANCE_IN_PROGRESS:
            break
        time.sleep(0.2)
    print(f"heartbeat after a second member joined: {NAME(code)}")
    old = first.generation
    first.join()
    joining.join()
    shared = f"{len(first.owned)}+{len(second.owned)}"
    together = sorted(first.owned + second.owned) == list(range(partitions))
    print(f"generation {first.generation} shared {shared}{'' if together else ' (not every partition once!)'}")
    print(f"commit under the current generation: {NAME(first.commit(first.generation))}")
    print(f"commit under the old generation: {NAME(first.commit(old))}")
    first.leave()
    second.leave()
    print("left")


if __name__ == "__main__":
    main()
