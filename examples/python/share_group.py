#!/usr/bin/env python3
"""A share group (a queue on the log) over gRPC with grpcio, without the Rust client.

    share_group.py TOPIC --group GROUP [--bootstrap ...]

Sets the group's settings (Share.AlterShareGroupConfig) and has two members take the topic's 20
records (written before) with Share.ShareFetch: each record is acquired by one member at a time; a member's
acknowledgement of a record it does not hold is refused (INVALID_RECORD_STATE); a released record
comes back with its delivery count raised; a rejected one never comes back; acknowledgements ride
the next fetch; then Share.DescribeShareGroup (asked of every node, merged) shows every partition
done and Share.ListShareGroups names the group. Prints one line per check.
"""
import argparse
import os

from rill_api import Cluster, decode_batch, common_pb2
import share_pb2
import share_pb2_grpc

RETRIABLE = {common_pb2.NOT_LEADER_OR_FOLLOWER, common_pb2.LEADER_NOT_AVAILABLE}


class Member:
    """One member: fetches every partition of the topic from its leaders, acknowledging."""

    def __init__(self, cluster, topic, group, member):
        self.cluster, self.topic, self.group, self.member = cluster, topic, group, member
        self.acks = {}  # partition -> [Acknowledgement]
        self.refused = []

    def ack(self, partition, offset, kind, delay_ms=0, reason=""):
        self.acks.setdefault(partition, []).append(
            share_pb2.Acknowledgement(first_offset=offset, last_offset=offset, type=kind, delay_ms=delay_ms, reason=reason)
        )

    def fetch(self, max_records, max_wait_ms=0):
        """{(partition, offset): (value, delivery count)} acquired now, across every partition."""
        got = {}
        for partition in range(self.cluster.partitions(self.topic)):
            for _ in range(20):
                stub = share_pb2_grpc.ShareStub(self.cluster.channel(self.cluster.leader_address(self.topic, partition)))
                request = share_pb2.ShareFetchRequest(
                    group_id=self.group,
                    member_id=self.member,
                    max_wait_ms=max_wait_ms,
                    max_records=max_records,
                    topics=[
                        share_pb2.ShareFetchTopic(
                            topic=self.topic,
                            partitions=[
                                share_pb2.ShareFetchPartition(partition=partition, acknowledgements=self.acks.get(partition, []))
                            ],
                        )
                    ],
                )
                p = stub.ShareFetch(request, timeout=30).topics[0].partitions[0]
                if p.error_code in RETRIABLE:
                    self.cluster.follow_hint(self.topic, partition, p.leader if p.HasField("leader") else None)
                    continue
                if p.error_code != common_pb2.NONE:
                    raise SystemExit(f"{common_pb2.ErrorCode.Name(p.error_code)}: {p.error_message}")
                self.acks.pop(partition, None)
                self.refused.extend((partition, r.offset, r.error_code) for r in p.refused)
                counts = {}
                for a in p.acquired:
                    for o in range(a.first_offset, a.last_offset + 1):
                        counts[o] = a.delivery_count
                for batch in p.batches:
                    for offset, _key, value in decode_batch(batch):
                        if offset in counts:
                            got[(partition, offset)] = (value.decode(), counts[offset])
                break
        return got


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("topic")
    ap.add_argument("--group", required=True)
    ap.add_argument("--bootstrap", default=os.environ.get("RILL_BOOTSTRAP", "127.0.0.1:7001"))
    args = ap.parse_args()
    cluster = Cluster(args.bootstrap)

    settings = share_pb2_grpc.ShareStub(cluster.channel(cluster.bootstrap[0])).AlterShareGroupConfig(
        share_pb2.AlterShareGroupConfigRequest(
            group_id=args.group,
            set=[
                share_pb2.ShareGroupSetting(key="share.auto.offset.reset", value="earliest"),
                share_pb2.ShareGroupSetting(key="share.delivery.count.limit", value="3"),
            ],
        ),
        timeout=30,
    )
    assert settings.error_code == common_pb2.NONE, settings.error_message
    limit = [s for s in settings.settings if s.key == "share.delivery.count.limit"]
    assert limit and limit[0].value == "3" and not limit[0].default, settings
    bad = share_pb2_grpc.ShareStub(cluster.channel(cluster.bootstrap[0])).AlterShareGroupConfig(
        share_pb2.AlterShareGroupConfigRequest(
            group_id=args.group, set=[share_pb2.ShareGroupSetting(key="share.delivery.count.limit", value="zero")]
        ),
        timeout=30,
    )
    assert bad.error_code == common_pb2.INVALID_CONFIG and "share.delivery.count.limit" in bad.error_message, bad
    print("the group's settings set over gRPC; a bad value refused, naming its key")

    a = Member(cluster, args.topic, args.group, "member-a")
    b = Member(cluster, args.topic, args.group, "member-b")
    got_a = a.fetch(max_records=5)
    got_b = b.fetch(max_records=5)
    assert got_a and got_b and not set(got_a) & set(got_b), (got_a, got_b)
    assert all(count == 1 for _, count in list(got_a.values()) + list(got_b.values()))
    print("two members acquired different records, each at its first delivery")

    # b acknowledges one of a's records: refused, and a still holds it.
    stolen = sorted(got_a)[0]
    b.ack(stolen[0], stolen[1], share_pb2.ACCEPT)
    got_b.update(b.fetch(max_records=1))
    assert (stolen[0], stolen[1], common_pb2.INVALID_RECORD_STATE) in b.refused, b.refused
    print("an acknowledgement of another member's record: INVALID_RECORD_STATE")

    # a releases one record and rejects another, accepts the rest, with its next fetch.
    held = sorted(got_a)
    released, rejected = held[0], held[1]
    a.ack(released[0], released[1], share_pb2.RELEASE)
    a.ack(rejected[0], rejected[1], share_pb2.REJECT, reason="malformed")
    for key in held[2:]:
        a.ack(key[0], key[1], share_pb2.ACCEPT)
    for key in got_b:
        b.ack(key[0], key[1], share_pb2.ACCEPT)
    seen = {}
    for _ in range(30):
        fetched = 0
        for member in (a, b):
            for key, (_value, count) in member.fetch(max_records=5).items():
                seen.setdefault(key, []).append(count)
                member.ack(key[0], key[1], share_pb2.ACCEPT)
                fetched += 1
        if fetched == 0 and len(set(got_a) | set(got_b) | set(seen)) == 20:
            break
    assert seen.get(released) == [2], f"the released record came back at its second delivery: {seen.get(released)}"
    assert rejected not in seen, "the rejected record never comes back"
    everything = set(got_a) | set(got_b) | set(seen)
    assert len(everything) == 20, sorted(everything)
    print("a released record came back at its second delivery; a rejected one never did; all 20 were delivered")

    # Where the group stands: each node answers for the partitions it leads; merged, every
    # partition read is done (start offset at the high watermark) with nothing held.
    nodes = sorted(set(cluster.addresses.values())) or cluster.bootstrap
    described = {}
    for addr in nodes:
        answer = share_pb2_grpc.ShareStub(cluster.channel(addr)).DescribeShareGroup(
            share_pb2.DescribeShareGroupRequest(group_id=args.group, max_records=10), timeout=30
        )
        assert answer.error_code == common_pb2.NONE, answer.error_message
        for p in answer.partitions:
            key = (p.topic, p.partition)
            if key not in described or described[key].leader_epoch < p.leader_epoch:
                described[key] = p
    # The members fetched every partition, so the group has read each (some may hold nothing).
    assert {k[1] for k in described if k[0] == args.topic} == set(range(cluster.partitions(args.topic))), described
    for p in described.values():
        assert p.start_offset == p.high_watermark and p.acquired == 0 and not p.held, p
        assert p.oldest_pending_append_ms == 0, p
    listed = set()
    for addr in nodes:
        answer = share_pb2_grpc.ShareStub(cluster.channel(addr)).ListShareGroups(share_pb2.ListShareGroupsRequest(), timeout=30)
        listed |= {g.group_id for g in answer.groups}
    assert args.group in listed, listed
    print("described from every node: each partition read is done, nothing held; the group is listed")


if __name__ == "__main__":
    main()
