#!/usr/bin/env bash
# CI check for the Python example: starts `rill dev` on spare ports, produces with producer.py,
# reads back with consumer.py and with the rill CLI, and compares. Then, for every codec, batches
# kafka-python encodes are read by the rill CLI, and batches the rill CLI encodes are read by
# kafka-python: Rill's record batch codec against an implementation no one at Rill wrote. Also
# deletes records with Admin.DeleteRecords from Python and reads around the new log start.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
bin="${CARGO_TARGET_DIR:-/var/tmp/rill-target}/debug"
"$here/setup.sh" >/dev/null
py="$here/.venv/bin/python"
# RILL_DEV_BASE_PORT picks the ports (`rill dev --base-port`) where a random choice could collide.
base=${RILL_DEV_BASE_PORT:-$((20000 + RANDOM % 20000))}
data=$(mktemp -d)
"$bin/rill" dev --nodes 3 --base-port "$base" --data-dir "$data" >"$data/dev.out" 2>&1 &
dev=$!
trap 'kill -TERM $dev 2>/dev/null; wait $dev 2>/dev/null; rm -rf "$data"' EXIT
for _ in $(seq 1 600); do grep -q '^cluster ready' "$data/dev.out" && break; sleep 0.1; done
grep -q '^cluster ready' "$data/dev.out" || { cat "$data/dev.out"; echo "rill dev did not start" >&2; exit 1; }
export RILL_BOOTSTRAP="127.0.0.1:$base"
"$bin/rill" topic create py --partitions 2 --replication-factor 3 >/dev/null
"$py" "$here/producer.py" py one two three --partition 1 --key k >"$data/produced"
"$py" "$here/consumer.py" py --partition 1 --max-messages 3 >"$data/consumed"
"$bin/rill" consume py --partition 1 --from-beginning --max-messages 3 --timeout-ms 10000 --format '%o %k %v' >"$data/cli"
diff <(printf 'py/1@0 one\npy/1@1 two\npy/1@2 three\n') "$data/produced"
diff <(printf '0 k one\n1 k two\n2 k three\n') "$data/consumed"
diff "$data/consumed" "$data/cli"
# DeleteRecords over grpcio: the log start moves, a fetch below it is refused, above it served.
diff <(echo "py/1 low watermark 2") <("$py" "$here/trim.py" py --partition 1 --before 2)
if "$py" "$here/consumer.py" py --partition 1 --offset 0 --max-messages 1 >"$data/below" 2>&1; then
  cat "$data/below"; echo "a fetch below the log start was served" >&2; exit 1
fi
grep -q '^OFFSET_OUT_OF_RANGE' "$data/below" || { cat "$data/below"; exit 1; }
diff <(printf '2 k three\n') <("$py" "$here/consumer.py" py --partition 1 --offset 2 --max-messages 1)
# A consumer group over grpcio: held heartbeats (wait_ms) are answered at the end of their hold
# when nothing changes and at once when a join needs the owner's partition; two members share
# the partitions, commit as members, leave.
"$bin/rill" topic create py-group --partitions 2 --replication-factor 3 >/dev/null
diff <(printf 'held heartbeat of a stable member: answered at the end of its hold\nheld heartbeat of an owner: answered early with a revocation when a second member joined\nshared 1+1\ncommit own partition: NONE\ncommit other'"'"'s partition: STALE_MEMBER_EPOCH\nleft\n') \
  <("$py" "$here/group.py" py-group --group py-members)
# A share group (a queue) over grpcio: settings, two members acquiring different records, an
# acknowledgement of another member's record refused, a released record back at its second
# delivery, a rejected one never; the group described from every node and listed.
"$bin/rill" topic create py-share --partitions 2 --replication-factor 3 >/dev/null
seq 0 19 | sed 's/^/job-/' | "$bin/rill" produce py-share >/dev/null
diff <(printf 'the group'"'"'s settings set over gRPC; a bad value refused, naming its key\ntwo members acquired different records, each at its first delivery\nan acknowledgement of another member'"'"'s record: INVALID_RECORD_STATE\na released record came back at its second delivery; a rejected one never did; all 20 were delivered\ndescribed from every node: each partition read is done, nothing held; the group is listed\n') \
  <("$py" "$here/share_group.py" py-share --group py-share-workers)
# A classic group over grpcio, the leader assigning with kafka-python's range assignor over
# kafka-python's consumer protocol encoding: member ids, generations, a rebalance, commits fenced
# by generation.
"$bin/rill" topic create py-classic --partitions 2 --replication-factor 3 >/dev/null
diff <(printf 'first join: MEMBER_ID_REQUIRED\njoined generation 1 as leader owning 2 of 2: NONE\nheartbeat after a second member joined: REBALANCE_IN_PROGRESS\ngeneration 2 shared 1+1\ncommit under the current generation: NONE\ncommit under the old generation: ILLEGAL_GENERATION\nleft\n') \
  <("$py" "$here/classic.py" py-classic --group py-classic-members)
# kafka-python through the Kafka listener: an idempotent producer, then two members of one
# classic group, the second resuming after the first's commits.
kafka=$(sed -n 's/^kafka bootstrap: //p' "$data/dev.out")
[ -n "$kafka" ] || { cat "$data/dev.out"; echo "rill dev printed no Kafka bootstrap list" >&2; exit 1; }
grpc=$(sed -n 's/^bootstrap: //p' "$data/dev.out")
"$bin/rill" topic create py-kafka --partitions 2 --replication-factor 3 >/dev/null
diff <(printf 'produced 100 records idempotently\nfirst member read 60 and committed\nsecond member resumed after the commits and read 40\nevery record read once, keys, values and headers intact, at the acknowledged offsets\n') \
  <("$py" "$here/kafka_client.py" py-kafka --bootstrap "$kafka" --group py-kafka-members)
# confluent-kafka (librdkafka 2.x) through the Kafka listener: an idempotent producer with five
# requests in flight, then two cooperative-sticky members of one classic group sharing a topic.
"$bin/rill" topic create py-confluent --partitions 3 --replication-factor 3 >/dev/null
diff <(printf 'produced 200 records idempotently, each where murmur2 places its key\na second cooperative-sticky member joined and took partitions over; both kept reading\nevery one of the 200 records read, at the offset it was acknowledged at; twice only after a refused commit\nthe group'"'"'s commits are the partitions'"'"' ends\nadmin: created a topic with the cluster'"'"'s defaults (1 partition, 3 replicas), grew it, set and described a setting, described 3 brokers, deleted it\n') \
  <("$py" "$here/confluent_client.py" py-confluent --bootstrap "$kafka" --group py-confluent-members)
# confluent-kafka on Kafka's consumer group protocol (KIP-848): the coordinator assigns, a
# second member takes partitions over, the first leaves and the second gets them all.
"$bin/rill" topic create py-kip848 --partitions 4 --replication-factor 3 >/dev/null
diff <(printf 'the coordinator moved partitions to a second member; both kept reading\nthe admin client describes a consumer group whose members'"'"' assignments are what they hold\nevery one of the 200 records read at its offset, twice only after a refused commit; the commits are the partitions'"'"' ends\nthe first member left; the second was given all 4 partitions\n') \
  <("$py" "$here/kip848_group.py" py-kip848 --bootstrap "$kafka" --group py-kip848-members)
# confluent-kafka on the consumer protocol subscribing by regular expression: the coordinator
# assigns the topics whose whole names match, and one created after the member joined.
diff <(printf 'the coordinator assigned the topic the pattern matches as a whole, not py-pattern-other-x\na topic created later that matches was assigned at a following heartbeat, and read\nevery one of the 60 records of the matching topics read once, at its acknowledged offset\n') \
  <("$py" "$here/pattern_group.py" py-pattern --bootstrap "$kafka" --group py-pattern-members)
# confluent-kafka (librdkafka's classic protocol, cooperative-sticky) members, each a process of
# its own, while records are produced: three share a topic; one SIGKILLed loses its partitions
# once its session times out; a static member joins, is restarted within its session timeout and
# gets its partitions back without a rebalance (the generation `rill group describe` shows stays);
# one closes and its partitions move at once. No survivor ever gives up a partition that does not
# move; every record is read, the commits end at the partitions' ends.
"$bin/rill" topic create py-coop --partitions 6 --replication-factor 3 >/dev/null
diff <(printf 'three cooperative-sticky members share the 6 partitions, 2 each\na member was SIGKILLed: its partitions moved to the survivors once its 6 s session had timed out; the survivors revoked nothing\na static member joined and took partitions over; the others revoked only those\nrill group describe shows the 3 classic members, each with the partitions it holds\nthe static member, closed and restarted within its session timeout, got back exactly its 2 partitions without a rebalance (the generation stayed); the others saw no assignment change\na member closed (LeaveGroup): its partitions moved at once, not after its 30 s session timeout; the others revoked nothing\nevery record produced throughout was read at its acknowledged offset; each new owner of a partition began at the group'"'"'s last commit, so only what the SIGKILLed member had read past its last commit was read again\nthe group'"'"'s commits are the partitions'"'"' ends\n') \
  <("$py" "$here/cooperative_group.py" py-coop --bootstrap "$kafka" --group py-coop-members --rill "$bin/rill" --rill-bootstrap "$grpc")
# confluent-kafka's exactly-once job through the Kafka listener: consume-transform-produce in
# transactions, every third aborted and redone; its read_committed output, read through Kafka and
# through the rill CLI (gRPC), holds every input exactly once.
"$bin/rill" topic create py-eos-in --partitions 3 --replication-factor 3 >/dev/null
"$bin/rill" topic create py-eos-out --partitions 3 --replication-factor 3 >/dev/null
diff <(printf 'the job committed transactions and aborted every third one, whose inputs it did again\nread_committed: each of the 300 inputs is in the output exactly once\nread_uncommitted: the aborted transactions'"'"' records are there too\nthe group'"'"'s offsets, committed in the transactions, are the input'"'"'s ends\n') \
  <("$py" "$here/eos_job.py" all py-eos-in py-eos-out --bootstrap "$kafka" --group py-eos --dump "$data/eos-kafka")
"$bin/rill" consume py-eos-out --from-beginning --isolation-level read_committed --max-messages 300 --timeout-ms 10000 | LC_ALL=C sort >"$data/eos-cli"
diff "$data/eos-kafka" "$data/eos-cli"
# Records found by their own timestamps (kafka-python's and confluent-kafka's offsets_for_times,
# confluent-kafka's max_timestamp), and both clients' legacy alter_configs replacing settings.
"$bin/rill" topic create py-seek --partitions 1 --replication-factor 3 >/dev/null
diff <(printf 'produced 7 records with timestamps out of order\nkafka-python: each time'"'"'s first record at or after it, with its timestamp; none after the largest\nconfluent-kafka: the same offsets; the largest timestamp is the first record holding it\nthe legacy alter_configs replaced the settings (kafka-python'"'"'s, then confluent-kafka'"'"'s): the one left out is back to its default\n') \
  <("$py" "$here/seek_by_time.py" py-seek --bootstrap "$kafka")
for codec in none gzip snappy lz4 zstd; do
  "$bin/rill" topic create "py-$codec" --partitions 1 --replication-factor 3 >/dev/null
  "$py" "$here/producer.py" "py-$codec" "a-$codec" "b-$codec" --compression "$codec" >/dev/null
  printf 'c-%s\nd-%s\n' "$codec" "$codec" | "$bin/rill" produce "py-$codec" --compression "$codec" >/dev/null
  "$py" "$here/consumer.py" "py-$codec" --max-messages 4 >"$data/py-$codec"
  "$bin/rill" consume "py-$codec" --from-beginning --max-messages 4 --timeout-ms 10000 --format '%o - %v' >"$data/cli-$codec"
  diff <(printf '0 - a-%s\n1 - b-%s\n2 - c-%s\n3 - d-%s\n' "$codec" "$codec" "$codec" "$codec") "$data/py-$codec"
  diff "$data/py-$codec" "$data/cli-$codec"
done
# A compacted topic: kafka-python reads the batches Rill rewrote (new CRC, fewer records, the
# first one emptied), at the offsets they were written at. Compaction runs within about a
# minute (the leader proposes a cleaning point at most every 30 s).
"$bin/rill" topic create py-compact --partitions 1 --replication-factor 3 --config cleanup.policy=compact >/dev/null
"$py" "$here/producer.py" py-compact one --key j >/dev/null
"$py" "$here/producer.py" py-compact two three --key k --compression zstd >/dev/null
"$py" "$here/producer.py" py-compact four --key j >/dev/null
compacted=""
for _ in $(seq 1 180); do
  "$py" "$here/consumer.py" py-compact --timeout-s 1 >"$data/compacted"
  if [ "$(cat "$data/compacted")" = "$(printf '2 k three\n3 j four')" ]; then compacted=yes; break; fi
  sleep 1
done
[ -n "$compacted" ] || { cat "$data/compacted"; echo "the compacted topic still serves superseded records" >&2; exit 1; }
# kafka-python's truncation check (KIP-320) across a leader change: the partition's leader is
# stopped mid-read and the consumer, validating its position with OffsetForLeaderEpoch, reads on
# without a truncation error, every offset once. This step stops one of `rill dev`'s nodes for good
# (`rill dev` has no way to restart one), so it comes last: every step before it has the whole
# cluster. The short replica.lag.time.max.ms lets acks=all writes go on soon after the stop.
"$bin/rill" topic create py-leader --partitions 1 --replication-factor 3 --config replica.lag.time.max.ms=2000 >/dev/null
diff <(printf 'a kafka-python consumer with no offset reset policy read 60 of 100 records, all written in one leader epoch\nthe partition'"'"'s leader was stopped (SIGTERM) and another node leads it\n100 more records were written under the new leader, in a later leader epoch\nthe consumer checked its position with OffsetForLeaderEpoch for its last record'"'"'s epoch; Rill answered that the epoch ends at offset 100, where the new leader'"'"'s records begin, as Kafka does\nthe consumer read on to the end with no truncation or out-of-range error: every offset once, in order\n') \
  <("$py" "$here/leader_change.py" py-leader --bootstrap "$kafka" --rill "$bin/rill" --rill-bootstrap "$grpc" --rill-dev-pid "$dev")
echo "python example: produced and consumed 3 records; the rill CLI reads the same; DeleteRecords from Python moved the log start; grpcio share group members took records one by one and acknowledged them, and the group was described from every node; grpcio group members' held heartbeats were answered at the end of the hold and early on a join, two members shared a topic and were fenced from each other's partitions; kafka-python and confluent-kafka produced idempotently and consumed as members of a classic group (confluent-kafka's cooperative-sticky) through the Kafka listener, and confluent-kafka's admin client created, grew, configured and deleted a topic, its KIP-848 members shared a topic as the coordinator assigned it and one subscribed by pattern was given matching topics created later, its cooperative-sticky members (one SIGKILLed, one closed, a static one restarted) kept what did not move and read every record, and its exactly-once job's output held every input once, through Kafka and through gRPC; kafka-python and confluent-kafka found records by their timestamps and replaced a topic's settings with the legacy alter_configs; kafka-python and Rill read each other's batches with every codec; kafka-python reads a compacted topic's rewritten batches, and its truncation check passes across a leader change"
