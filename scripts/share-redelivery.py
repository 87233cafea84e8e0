#!/usr/bin/env python3
"""How soon a share group redelivers the records of a worker killed while holding them.

    scripts/share-redelivery.py [--rill PATH] [--bootstrap HOST:PORT] [--rounds N] [--lock-ms MS]

Against a running cluster (`rill dev`): for each round, a fresh topic gets one record; worker A
(`rill consume --share-group`, working for ever) takes it and is SIGKILLed at once; worker B,
already waiting, gets it again when A's lock runs out. Prints, per round, how long after A took
the record B printed it, and that time minus the lock: the redelivery overshoot (the leader's
lock timer waking, the expiry's Raft commit, B's long poll answered, B's process printing).
Timing uses this machine's monotonic clock around the two processes' output lines.
"""
import argparse
import os
import subprocess
import threading
import time


def first_line(proc, out):
    line = proc.stdout.readline()
    out.append((time.monotonic(), line.strip()))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rill", default=os.path.join(os.environ.get("CARGO_TARGET_DIR", "/var/tmp/rill-target"), "debug", "rill"))
    ap.add_argument("--bootstrap", default=os.environ.get("RILL_BOOTSTRAP", "127.0.0.1:7001"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--lock-ms", type=int, default=2000)
    args = ap.parse_args()
    rill = [args.rill, "--bootstrap", args.bootstrap]
    overshoots = []
    for r in range(args.rounds):
        topic, group = f"redelivery-{os.getpid()}-{r}", f"redelivery-{os.getpid()}-{r}"
        subprocess.run(rill + ["topic", "create", topic, "--partitions", "1", "--replication-factor", "3"], check=True, capture_output=True)
        subprocess.run(
            rill + ["share", "config", group, "--config", "share.auto.offset.reset=earliest",
                    "--config", f"share.record.lock.duration.ms={args.lock_ms}"],
            check=True, capture_output=True,
        )
        subprocess.run(rill + ["produce", topic], input=b"job\n", check=True, capture_output=True)
        consume = rill + ["consume", topic, "--share-group", group, "--format", "%o #%d"]
        a = subprocess.Popen(consume + ["--process-ms", "600000"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        got_a = []
        first_line(a, got_a)
        a.kill()
        a.wait()
        b = subprocess.Popen(consume + ["--max-messages", "1"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        got_b = []
        reader = threading.Thread(target=first_line, args=(b, got_b))
        reader.start()
        reader.join(timeout=args.lock_ms / 1000 + 30)
        b.kill()
        b.wait()
        if not got_a or not got_b:
            raise SystemExit(f"round {r}: no redelivery seen (A: {got_a}, B: {got_b})")
        took = (got_b[0][0] - got_a[0][0]) * 1000
        overshoot = took - args.lock_ms
        overshoots.append(overshoot)
        print(f"round {r}: A printed {got_a[0][1]!r}, B printed {got_b[0][1]!r} {took:.0f} ms later: {overshoot:+.0f} ms past the {args.lock_ms} ms lock")
    overshoots.sort()
    print(f"overshoot past the lock: median {overshoots[len(overshoots) // 2]:.0f} ms, max {overshoots[-1]:.0f} ms over {len(overshoots)} rounds")


if __name__ == "__main__":
    main()
