#!/usr/bin/env python3
"""How soon a rejected record lands in its share group's dead-letter topic.

    scripts/share-dlq-landing.py [--rill PATH] [--bootstrap HOST:PORT] [--rounds N]

Against a running cluster (`rill dev`): a fresh topic and dead-letter topic (one partition each,
RF 3) and a share group naming the second. Each round writes one record; a worker (`rill consume
--share-group --reject`) prints it and rejects it; the copy is then read from the dead-letter
topic. Prints, per round, the copy's timestamp (when the partition leader's writer made it) minus
the moment the worker printed the record: the reject's round trip and share entry, the writer
waking, and the copy built. The copy's append (one acks=all write) and its "done" entry follow.
Round 1 also pins the group's writer (a producer id from the metadata group and one share entry).
The worker and the nodes run on this machine, so their wall clocks agree.
"""
import argparse
import json
import os
import statistics
import subprocess
import time


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rill", default=os.path.join(os.environ.get("CARGO_TARGET_DIR", "/var/tmp/rill-target"), "debug", "rill"))
    ap.add_argument("--bootstrap", default=os.environ.get("RILL_BOOTSTRAP", "127.0.0.1:7001"))
    ap.add_argument("--rounds", type=int, default=8)
    args = ap.parse_args()
    rill = [args.rill, "--bootstrap", args.bootstrap]
    tag = f"landing-{os.getpid()}"
    topic, dlq, group = tag, f"{tag}.dlq", tag
    for t in (topic, dlq):
        subprocess.run(rill + ["topic", "create", t, "--partitions", "1", "--replication-factor", "3"], check=True, capture_output=True)
    subprocess.run(
        rill + ["share", "config", group, "--config", "share.auto.offset.reset=earliest",
                "--config", f"errors.deadletterqueue.topic.name={dlq}"],
        check=True, capture_output=True,
    )
    landings = []
    for r in range(args.rounds):
        value = f"poison-{r}"
        subprocess.run(rill + ["produce", topic], input=f"{value}\n".encode(), check=True, capture_output=True)
        worker = subprocess.Popen(
            rill + ["consume", topic, "--share-group", group, "--reject", "poison", "--max-messages", "1", "--format", "%v"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        )
        line = worker.stdout.readline().strip()
        printed = time.time()
        worker.wait(timeout=60)
        if line != value:
            raise SystemExit(f"round {r}: the worker printed {line!r}, not {value!r}")
        copy = None
        deadline = time.time() + 30
        while copy is None and time.time() < deadline:
            out = subprocess.run(
                rill + ["consume", dlq, "--from-beginning", "--timeout-ms", "1000", "--output", "json"],
                check=True, capture_output=True, text=True,
            ).stdout
            copy = next((json.loads(l) for l in out.splitlines() if json.loads(l)["value"] == value), None)
        if copy is None:
            raise SystemExit(f"round {r}: no copy of {value} in {dlq} within 30 s")
        landing = copy["timestamp_ms"] - printed * 1000
        landings.append(landing)
        print(f"round {r}: copy made {landing:.0f} ms after the worker printed the record"
              f" (cause {copy['headers'].get('rill.dlq.cause')}, deliveries {copy['headers'].get('rill.dlq.delivery.count')})")
    later = landings[1:] or landings
    print(f"first (writer pinned): {landings[0]:.0f} ms; later: median {statistics.median(later):.0f} ms, max {max(later):.0f} ms")


if __name__ == "__main__":
    main()
