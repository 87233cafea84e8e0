"""Running a confluent-kafka script to a clean exit.

A librdkafka consumer left open keeps the interpreter from exiting until its group lets it go
(its threads outlive `main`), so a script that fails must not wait for that: `run(main)` prints
the failure and leaves at once with status 1.
"""

import os
import sys


def run(main):
    try:
        main()
    except SystemExit as e:
        if e.code not in (None, 0):
            print(e.code, file=sys.stderr)
            sys.stdout.flush()
            os._exit(1)
        raise
    except BaseException as e:
        print(f"failed: {e!r}", file=sys.stderr)
        sys.stdout.flush()
        os._exit(1)
