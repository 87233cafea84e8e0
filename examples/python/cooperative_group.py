"""A classic consumer group of confluent-kafka (librdkafka) members with the cooperative-sticky
assignor, through Rill's Kafka listener: members crash, leave, join and restart while records
are produced, each member a process of its own.

A producer writes sequence-numbered records to every partition throughout. Three members share
the topic's partitions, two each. Then:

* one is SIGKILLed: its partitions move to the survivors once its session (6 s, Kafka's and
  Rill's shortest) has timed out, and the survivors revoke nothing (cooperative rebalancing
  revokes only what moves);
* a static member (`group.instance.id`) joins and takes partitions; the others revoke only the
  ones it takes;
* the static member is restarted (closed, which for a static member sends no LeaveGroup, then
  started again within its session timeout): it gets exactly its own partitions back without a
  rebalance (the group's generation, as `rill group describe` shows it, stays the same), and the
  other members see no assignment change;
* a member closes (LeaveGroup): its partitions move at once, long before its session would
  have timed out, and the others revoke nothing.

Members commit synchronously after every batch they read and when partitions are revoked. At
the end every record has been read at the offset it was acknowledged at, every new owner of a
partition started at the group's last commit (so only what the SIGKILLed member read after its
last commit is read twice), and the group's commits are the partitions' ends.

    cooperative_group.py TOPIC --bootstrap HOST:PORT[,...] --group GROUP \
        --rill RILL_CLI --rill-bootstrap GRPC_HOST:PORT[,...]

The topic must exist, empty, with 6 partitions. Each member is this script run as
`cooperative_group.py member ...`, which prints what happens to it, one line each:
`assigned P,P` / `revoked P` / `lost P` (`-` for none) for every rebalance callback,
`record P OFFSET SEQ` for every record it reads, `committed P OFFSET` or `refused P OFFSET
ERROR` for every partition of every commit, and `closed` when it has closed on SIGTERM.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
import librdkafka_exit

PARTITIONS = 6
# The SIGKILLed member's session: Kafka's (and Rill's) group.min.session.timeout.ms.
KILLED_SESSION_TIMEOUT_MS = 6_000
# Every other member's: far longer than a clean leave or a restart takes, so a move well within
# it cannot be a session expiry, and a restarted static member is back long before it ends.
SESSION_TIMEOUT_MS = 30_000
# Members hear of a rebalance with their next heartbeat: short, so rebalances are quick.
HEARTBEAT_INTERVAL_MS = 1_000
# A record every this many seconds, round-robin over the partitions.
PRODUCE_EVERY_S = 0.01
# How long each phase may take to show what it waits for (the machine may be slow and busy).
PHASE_S = 45


# ---- a member (a process of its own) ----


def member(args):
    def say(*lines):
        sys.stdout.write("".join(line + "\n" for line in lines))
        sys.stdout.flush()

    config = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "partition.assignment.strategy": "cooperative-sticky",
        "session.timeout.ms": args.session_timeout_ms,
        "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    }
    if args.instance_id:
        config["group.instance.id"] = args.instance_id
    consumer = Consumer(config)
    # The offset after the last record read, and the last offset committed, per partition.
    read_to, committed = {}, {}
    committing = [True]

    def commit(partitions):
        if not committing:
            return
        offsets = [TopicPartition(args.topic, p, read_to[p]) for p in sorted(partitions) if read_to.get(p, -1) > committed.get(p, -1)]
        if not offsets:
            return
        try:
            answered = consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as e:
            # Refused as a whole (e.g. the generation moved on in a rebalance): the next commit,
            # or the partition's next owner, starts from the last one that held.
            say(*(f"refused {tp.partition} {tp.offset} {e.args[0].name()}" for tp in offsets))
            return
        lines = []
        for tp in answered:
            if tp.error:
                lines.append(f"refused {tp.partition} {tp.offset} {tp.error.name()}")
            else:
                committed[tp.partition] = tp.offset
                lines.append(f"committed {tp.partition} {tp.offset}")
        say(*lines)

    def listed(partitions):
        return ",".join(str(tp.partition) for tp in sorted(partitions, key=lambda tp: tp.partition)) or "-"

    def on_assign(_, partitions):
        say(f"assigned {listed(partitions)}")

    def on_revoke(_, partitions):
        # Commit what was read before giving the partitions up: their next owner starts there.
        commit({tp.partition for tp in partitions})
        say(f"revoked {listed(partitions)}")

    def on_lost(_, partitions):
        say(f"lost {listed(partitions)}")

    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    # SIGUSR1: stop committing (the test then SIGKILLs this member, which has read records past
    # its last commit: their partitions' next owners must read them again).
    signal.signal(signal.SIGUSR1, lambda *_: committing.clear())
    told = False
    parent = os.getppid()
    consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    while not stop:
        if os.getppid() != parent:
            # The test is gone: leave without a word (no LeaveGroup, no waiting).
            os._exit(1)
        if not committing and not told:
            say("commits stopped")
            told = True
        batch = consumer.consume(200, 0.2)
        lines, partitions = [], set()
        for msg in batch:
            if msg.error():
                say(f"error {msg.error()}")
                os._exit(1)
            lines.append(f"record {msg.partition()} {msg.offset()} {msg.value().decode()}")
            read_to[msg.partition()] = msg.offset() + 1
            partitions.add(msg.partition())
        if lines:
            say(*lines)
            commit(partitions)
    # A dynamic member leaves the group (LeaveGroup); a static one does not (KIP-345).
    consumer.close()
    say("closed")


# ---- the test ----


class Member:
    """A member process and what it printed, each line with the time it was read."""

    def __init__(self, args, name, session_timeout_ms, instance_id=None):
        self.name = name
        command = [
            sys.executable,
            os.path.abspath(__file__),
            "member",
            args.topic,
            "--bootstrap",
            args.bootstrap,
            "--group",
            args.group,
            "--session-timeout-ms",
            str(session_timeout_ms),
        ]
        if instance_id:
            command += ["--instance-id", instance_id]
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        self.lines = []  # (time, words)
        self.changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.process.stdout:
            with self.changed:
                self.lines.append((time.monotonic(), line.split()))
                self.changed.notify_all()
        with self.changed:
            self.lines.append((time.monotonic(), ["exited"]))
            self.changed.notify_all()

    def snapshot(self):
        with self.changed:
            return list(self.lines)

    def assignment(self):
        owned = set()
        for _, words in self.snapshot():
            if words[0] in ("assigned", "revoked", "lost") and words[1] != "-":
                parts = {int(p) for p in words[1].split(",")}
                owned = owned | parts if words[0] == "assigned" else owned - parts
        return owned

    def callbacks_since(self, mark):
        """The rebalance callbacks among the lines printed after the first `mark`."""
        return [" ".join(w) for _, w in self.snapshot()[mark:] if w[0] in ("assigned", "revoked", "lost")]

    def revoked_since(self, mark):
        revoked = set()
        for _, w in self.snapshot()[mark:]:
            if w[0] in ("revoked", "lost") and w[1] != "-":
                revoked |= {int(p) for p in w[1].split(",")}
        return revoked

    def largest_seq_read(self):
        return max((int(w[3]) for _, w in self.snapshot() if w[0] == "record"), default=-1)

    def check_healthy(self):
        for _, words in self.snapshot():
            if words[0] in ("error", "exited"):
                sys.exit(f"member {self.name} failed: {' '.join(words)}")

    def wait_exited(self):
        with self.changed:
            if not self.changed.wait_for(lambda: self.lines and self.lines[-1][1] == ["exited"], PHASE_S):
                sys.exit(f"member {self.name} did not exit within {PHASE_S} s")
        return self.process.wait()

    def terminate(self):
        """SIGTERM: the member closes its consumer (see `member`) and exits."""
        self.process.send_signal(signal.SIGTERM)
        status = self.wait_exited()
        if status != 0 or ["closed"] not in [w for _, w in self.snapshot()]:
            sys.exit(f"member {self.name} did not close cleanly (exit status {status})")

    def kill_past_its_commits(self):
        """Stops its commits, waits until it has read records past its last commit, SIGKILLs it."""
        mark = len(self.snapshot())
        self.process.send_signal(signal.SIGUSR1)

        def read_uncommitted():
            lines = [w for _, w in self.snapshot()[mark:]]
            stopped = ["commits", "stopped"] in lines
            return stopped and any(w[0] == "record" for w in lines[lines.index(["commits", "stopped"]):])

        wait_for(f"{self.name} reading past its last commit", read_uncommitted, [self])
        self.process.kill()
        self.wait_exited()


def describe_group(args):
    """The group as Rill describes it (`rill group describe --output json`)."""
    out = subprocess.run(
        [args.rill, "--bootstrap", args.rill_bootstrap, "group", "describe", args.group, "--output", "json"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return json.loads(out.stdout)


def described_assignments(args):
    """Each classic member's partitions as `rill group describe` decodes them from the
    assignment the group's leader (librdkafka's cooperative-sticky assignor) encoded."""
    classic = describe_group(args).get("classic") or {}
    shown = []
    for m in classic.get("members", []):
        if m.get("assignment") is None:
            sys.exit(f"rill group describe could not decode {m['member_id']}'s assignment: {m}")
        if any(tp["topic"] != args.topic for tp in m["assignment"]):
            sys.exit(f"rill group describe shows {m['member_id']} owning another topic: {m}")
        shown.append(sorted(tp["partition"] for tp in m["assignment"]))
    return sorted(shown)


def group_generation(args):
    """The group's generation as Rill describes it (`rill group describe`), while it is stable."""
    described = describe_group(args)
    if described["protocol"] != "classic" or described["state"] != "Stable":
        sys.exit(f"the group is described as {described['protocol']} {described['state']}, not classic Stable")
    return described["group_epoch"]


def wait_for(what, ready, members, deadline_s=PHASE_S):
    """Waits until `ready()` holds, the members' output being what changes."""
    deadline = time.monotonic() + deadline_s
    while not ready():
        for m in members:
            m.check_healthy()
        if time.monotonic() > deadline:
            shown = "; ".join(f"{m.name} owns {sorted(m.assignment())}" for m in members)
            sys.exit(f"{what}: not within {deadline_s} s ({shown})")
        time.sleep(0.1)
    return time.monotonic()


def shared_evenly(members):
    """True when the members own every partition, each once, and as evenly as can be."""
    owned = [m.assignment() for m in members]
    everything = set().union(*owned)
    counts = sorted(len(o) for o in owned)
    return everything == set(range(PARTITIONS)) and sum(counts) == PARTITIONS and counts[-1] - counts[0] <= 1


class Production:
    """Sequence-numbered records, round-robin over the partitions, until stopped."""

    def __init__(self, args):
        self.producer = Producer({"bootstrap.servers": args.bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5})
        self.topic = args.topic
        self.placed = {}  # seq -> (partition, offset)
        self.failures = []
        self.sent = 0
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _delivered(self, err, msg):
        if err is not None:
            self.failures.append(str(err))
        else:
            self.placed[int(msg.value().decode())] = (msg.partition(), msg.offset())

    def _run(self):
        while not self.stopping.is_set():
            self.producer.produce(self.topic, value=str(self.sent), partition=self.sent % PARTITIONS, on_delivery=self._delivered)
            self.sent += 1
            self.producer.poll(0)
            self.stopping.wait(PRODUCE_EVERY_S)

    def stop(self):
        self.stopping.set()
        self.thread.join()
        if self.producer.flush(30) != 0:
            sys.exit("records left unacknowledged 30 s after the producer stopped")
        if self.failures:
            sys.exit(f"{len(self.failures)} records were not delivered: {self.failures[0]}")


def check_records(processes, placed):
    """Every record read at its acknowledged offset; every stretch of ownership of a partition
    (a stint) reads on without gaps from where the group's last commit before it was."""
    ends = {}
    for partition, offset in placed.values():
        ends[partition] = max(ends.get(partition, 0), offset + 1)
    where = {(p, o): seq for seq, (p, o) in placed.items()}
    stints = []  # (start time, member, partition, [offsets read], [offsets committed])
    for m in processes:
        open_stints = {}
        for at, w in m.snapshot():
            if w[0] == "assigned" and w[1] != "-":
                for p in map(int, w[1].split(",")):
                    open_stints[p] = (at, m.name, p, [], [])
                    stints.append(open_stints[p])
            elif w[0] in ("revoked", "lost") and w[1] != "-":
                for p in map(int, w[1].split(",")):
                    open_stints.pop(p, None)
            elif w[0] == "record":
                p, offset, seq = int(w[1]), int(w[2]), int(w[3])
                if p not in open_stints:
                    sys.exit(f"{m.name} read {p}/{offset} without owning partition {p}")
                if where.get((p, offset)) != seq:
                    sys.exit(f"{m.name} read record {seq} at {p}/{offset}; it was acknowledged at {placed.get(seq)}")
                open_stints[p][3].append(offset)
            elif w[0] == "committed":
                p = int(w[1])
                if p not in open_stints:
                    sys.exit(f"{m.name} committed partition {p} without owning it")
                open_stints[p][4].append(int(w[2]))
    reread = {}  # name of the member that read a record first -> how many were read again
    for p in range(PARTITIONS):
        group_commit, first_reader = 0, {}
        for _, name, _, offsets, commits in sorted((s for s in stints if s[2] == p), key=lambda s: s[0]):
            if offsets:
                if offsets[0] != group_commit:
                    sys.exit(f"{name} began partition {p} at {offsets[0]}; the group's last commit was {group_commit}")
                if offsets != list(range(offsets[0], offsets[0] + len(offsets))):
                    sys.exit(f"{name} read partition {p} with a gap or a rewind: {offsets}")
                for offset in offsets:
                    if offset in first_reader:
                        reread[first_reader[offset]] = reread.get(first_reader[offset], 0) + 1
                    else:
                        first_reader[offset] = name
            if commits:
                group_commit = commits[-1]
        if set(first_reader) != set(range(ends.get(p, 0))):
            sys.exit(f"partition {p}: offsets {sorted(set(range(ends.get(p, 0))) - set(first_reader))[:10]} never read")
    return reread


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("role", nargs="?", choices=["test", "member"], default="test")
    parser.add_argument("topic")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--rill", help="the rill CLI (the test reads the group's generation with it)")
    parser.add_argument("--rill-bootstrap", help="gRPC listeners, for the rill CLI")
    parser.add_argument("--session-timeout-ms", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--instance-id", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.role == "member":
        return member(args)
    if not args.rill or not args.rill_bootstrap:
        parser.error("the test needs --rill and --rill-bootstrap")

    group = Consumer({"bootstrap.servers": args.bootstrap, "group.id": args.group})
    found = len(group.list_topics(args.topic, timeout=10).topics[args.topic].partitions)
    if found != PARTITIONS:
        sys.exit(f"{args.topic} has {found} partitions; this test needs {PARTITIONS}")
    production = Production(args)
    processes = []
    try:
        run(args, group, production, processes)
    except BaseException:
        # What each member went through (all but its records and commits), for the diagnosis.
        lines = sorted((t, m.name, " ".join(w)) for m in processes for t, w in m.snapshot())
        for t, name, line in lines:
            if line.split()[0] not in ("record", "committed"):
                print(f"{t - lines[0][0]:7.2f} s  {name:16} {line}", file=sys.stderr)
        raise
    finally:
        for m in processes:
            if m.process.poll() is None:
                m.process.kill()
    group.close()


def run(args, group, production, processes):
    def start(name, session_timeout_ms, instance_id=None):
        m = Member(args, name, session_timeout_ms, instance_id)
        processes.append(m)
        return m

    # (a) Three members share the partitions.
    doomed = start("doomed", KILLED_SESSION_TIMEOUT_MS)
    leaving = start("leaving", SESSION_TIMEOUT_MS)
    staying = start("staying", SESSION_TIMEOUT_MS)
    wait_for("three members sharing the partitions", lambda: shared_evenly([doomed, leaving, staying]), processes)
    print(f"three cooperative-sticky members share the {PARTITIONS} partitions, {PARTITIONS // 3} each")

    # (b) One is SIGKILLed: after its session times out, the survivors take its partitions over.
    survivors = [leaving, staying]
    kept = {m.name: m.assignment() for m in survivors}
    marks = {m.name: len(m.snapshot()) for m in survivors}
    doomed.kill_past_its_commits()
    killed_at = time.monotonic()
    moved_at = wait_for("the killed member's partitions reassigned", lambda: shared_evenly(survivors), survivors)
    # The coordinator last heard from it at most a heartbeat interval (and a heartbeat's round
    # trip) before the kill; its session ran from there.
    earliest_s = (KILLED_SESSION_TIMEOUT_MS - 2 * HEARTBEAT_INTERVAL_MS) / 1000
    if moved_at - killed_at < earliest_s:
        sys.exit(f"the killed member's partitions moved {moved_at - killed_at:.1f} s after the kill, before its session could time out")
    for m in survivors:
        if m.revoked_since(marks[m.name]) or not kept[m.name] <= m.assignment():
            sys.exit(f"{m.name} lost partitions when the killed member's moved: {m.callbacks_since(marks[m.name])}")
    print(f"a member was SIGKILLed: its partitions moved to the survivors once its {KILLED_SESSION_TIMEOUT_MS // 1000} s session had timed out; the survivors revoked nothing")

    # (d) A static member joins and takes partitions; the others revoke only those.
    before = {m.name: m.assignment() for m in survivors}
    marks = {m.name: len(m.snapshot()) for m in survivors}
    static = start("static", SESSION_TIMEOUT_MS, instance_id=args.group + "-static")
    members = survivors + [static]
    wait_for("a static member joining", lambda: shared_evenly(members) and static.assignment(), members)
    for m in survivors:
        gave = before[m.name] - m.assignment()
        if not m.assignment() <= before[m.name] or m.revoked_since(marks[m.name]) != gave:
            sys.exit(f"{m.name} owned {sorted(before[m.name])}, now {sorted(m.assignment())}, after {m.callbacks_since(marks[m.name])}")
    if static.assignment() != set().union(*(before[m.name] - m.assignment() for m in survivors)):
        sys.exit(f"the static member got {sorted(static.assignment())}, not what the others gave up")
    print("a static member joined and took partitions over; the others revoked only those")

    # (e) The static member restarts: closed without leaving, started again with its instance id
    # within its session timeout, it gets its partitions back and no one else notices. (It joined
    # last, so it is not the group's leader: a restarted static leader is answered differently
    # below JoinGroup v9, see docs/kafka.md.) No rebalance means no new generation, which Rill's
    # own description of the group shows; then no member can have seen an assignment change.
    held = static.assignment()
    others = {m.name: m.assignment() for m in survivors}
    marks = {m.name: len(m.snapshot()) for m in survivors}
    generation = group_generation(args)
    held_by_all = sorted(sorted(m.assignment()) for m in members)
    if described_assignments(args) != held_by_all:
        sys.exit(f"rill group describe shows {described_assignments(args)}; the members hold {held_by_all}")
    print(f"rill group describe shows the {len(members)} classic members, each with the partitions it holds")
    static.terminate()
    static = start("static-restarted", SESSION_TIMEOUT_MS, instance_id=args.group + "-static")
    members = survivors + [static]
    wait_for("the restarted static member's assignment", lambda: static.assignment(), members)
    if static.callbacks_since(0) != [f"assigned {','.join(map(str, sorted(held)))}"]:
        sys.exit(f"the static member owned {sorted(held)}; restarted, it saw {static.callbacks_since(0)}")
    # Each of the others reads on: records written after the restarted member was back.
    written = production.sent
    wait_for("the others reading on", lambda: all(m.largest_seq_read() > written for m in survivors), members)
    for m in survivors:
        if m.revoked_since(marks[m.name]) or m.assignment() != others[m.name]:
            sys.exit(f"{m.name} saw its assignment change when the static member restarted: {m.callbacks_since(marks[m.name])}")
    if group_generation(args) != generation:
        sys.exit(f"the group went from generation {generation} to {group_generation(args)} when the static member restarted: a rebalance")
    print(f"the static member, closed and restarted within its session timeout, got back exactly its {len(held)} partitions without a rebalance (the generation stayed); the others saw no assignment change")

    # (c) A member closes (LeaveGroup): its partitions move at once.
    remaining = [staying, static]
    if group_generation(args) != generation:
        sys.exit(f"the group went from generation {generation} to {group_generation(args)} after the static member's restart")
    marks = {m.name: len(m.snapshot()) for m in remaining}
    left_at = time.monotonic()
    leaving.terminate()
    moved_at = wait_for("the closed member's partitions reassigned", lambda: shared_evenly(remaining), remaining)
    if moved_at - left_at > SESSION_TIMEOUT_MS / 2000:
        sys.exit(f"the closed member's partitions moved {moved_at - left_at:.1f} s after it left: not at once")
    for m in remaining:
        if m.revoked_since(marks[m.name]):
            sys.exit(f"{m.name} revoked partitions when the closed member's moved: {m.callbacks_since(marks[m.name])}")
    print(f"a member closed (LeaveGroup): its partitions moved at once, not after its {SESSION_TIMEOUT_MS // 1000} s session timeout; the others revoked nothing")

    # Every record read, and the commits at the ends.
    production.stop()
    placed = production.placed
    if len(placed) != production.sent:
        sys.exit(f"{production.sent} records sent, {len(placed)} acknowledged")
    everything = [TopicPartition(args.topic, p) for p in range(PARTITIONS)]
    ends = {}
    for partition, offset in placed.values():
        ends[partition] = max(ends.get(partition, 0), offset + 1)

    def commits_at_ends():
        got = {tp.partition: tp.offset for tp in group.committed(everything, timeout=10)}
        return got == ends

    wait_for("the group's commits reaching the partitions' ends", commits_at_ends, remaining)
    for m in remaining:
        m.terminate()
    reread = check_records(processes, placed)
    if set(reread) != {"doomed"}:
        sys.exit(f"records read again, by whom read them first: {reread}; only the SIGKILLed member's uncommitted ones should be")
    print("every record produced throughout was read at its acknowledged offset; each new owner of a partition began at the group's last commit, so only what the SIGKILLed member had read past its last commit was read again")
    print("the group's commits are the partitions' ends")


if __name__ == "__main__":
    librdkafka_exit.run(main)
