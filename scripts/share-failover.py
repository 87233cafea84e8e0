#!/usr/bin/env python3
"""How long a share group's worker goes without records when its partition's leader is killed.

    scripts/share-failover.py --rill-dev-pid PID [--rill PATH] [--bootstrap HOST:PORT] [--backlog N]

Against a running `rill dev` (whose rill-server children this script may SIGKILL): a one-partition
topic (RF 3) gets a record every 20 ms from `rill produce`; one worker (`rill consume
--share-group`) accepts and prints each. After 3 s the partition's leader is SIGKILLed; the script
prints the longest gap between two records the worker printed around the kill — the end-to-end
failover as the worker sees it (a new leader elected and caught up, the producer's retries landing,
the worker's next fetch served by the new leader) — next to the same gap before the kill.
With `--backlog N` nothing is produced while the worker runs: N records are written first and
the worker (a prefetch of 5) works through them, so the gap is the share fetch's own failover —
its fetch to the dead leader failing, the new leader elected and caught up, its lock timer and the
next fetch served.
Timing uses this machine's monotonic clock around the worker's output lines.
"""
import argparse
import json
import os
import subprocess
import threading
import time


def node_process(dev_pid, node):
    """The pid of `rill dev`'s rill-server child that runs `node`."""
    ps = subprocess.run(["ps", "-A", "-o", "pid=,ppid=,args="], capture_output=True, text=True, check=True)
    for line in ps.stdout.splitlines():
        pid, ppid, command = line.split(None, 2)
        words = command.split()
        if int(ppid) == dev_pid and "--node-id" in words and words[words.index("--node-id") + 1] == str(node):
            return int(pid)
    raise SystemExit(f"rill dev (pid {dev_pid}) runs no process for node {node}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rill", default=os.path.join(os.environ.get("CARGO_TARGET_DIR", "/var/tmp/rill-target"), "debug", "rill"))
    ap.add_argument("--bootstrap", default=os.environ.get("RILL_BOOTSTRAP", "127.0.0.1:7001"))
    ap.add_argument("--rill-dev-pid", type=int, required=True)
    ap.add_argument("--backlog", type=int, default=0, help="write this many records first, none during the run")
    args = ap.parse_args()
    rill = [args.rill, "--bootstrap", args.bootstrap]
    topic = group = f"failover-{os.getpid()}"
    subprocess.run(rill + ["topic", "create", topic, "--partitions", "1", "--replication-factor", "3",
                           "--config", "replica.lag.time.max.ms=2000"], check=True, capture_output=True)
    subprocess.run(rill + ["share", "config", group, "--config", "share.auto.offset.reset=earliest"],
                   check=True, capture_output=True)
    if args.backlog:
        lines = "".join(f"b{i}\n" for i in range(args.backlog))
        subprocess.run(rill + ["produce", topic], input=lines, check=True, capture_output=True, text=True)
    extra = ["--prefetch", "5", "--process-ms", "2"] if args.backlog else []
    worker = subprocess.Popen(rill + ["consume", topic, "--share-group", group, "--format", "%o"] + extra,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    seen = []

    def read():
        for line in worker.stdout:
            seen.append(time.monotonic())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    producer = subprocess.Popen(rill + ["produce", topic, "--linger-ms", "0"], stdin=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
    stop = time.monotonic() + 10
    killed_at = None
    i = 0
    while time.monotonic() < stop:
        if not args.backlog:
            producer.stdin.write(f"r{i}\n")
            producer.stdin.flush()
            i += 1
        time.sleep(0.02)
        if killed_at is None and time.monotonic() > stop - 7:
            described = json.loads(subprocess.run(rill + ["topic", "describe", topic, "--output", "json"],
                                                  check=True, capture_output=True, text=True).stdout)
            leader = described["partitions"][0]["leader"]
            os.kill(node_process(args.rill_dev_pid, leader), 9)
            killed_at = time.monotonic()
            print(f"killed node {leader}, the partition's leader, after {len(seen)} records")
    producer.stdin.close()
    producer.wait(timeout=60)
    time.sleep(3)
    worker.kill()
    worker.wait()
    before = [b - a for a, b in zip(seen, seen[1:]) if b < killed_at]
    around = [b - a for a, b in zip(seen, seen[1:]) if b >= killed_at]
    print(f"{len(seen)} records printed of {i + args.backlog} written")
    print(f"longest gap before the kill: {max(before) * 1000:.0f} ms; around and after it: {max(around) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
