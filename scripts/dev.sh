#!/usr/bin/env bash
# Starts a local 3-node Rill cluster and shows it working: creates a topic, produces records
# with acks=all, reads them back, and describes the partitions. The cluster keeps running until
# Ctrl-C, which stops every node gracefully.
# Works on a fresh Debian machine with only Rust installed: it installs what the build needs.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

ensure_build_deps
step "building rill and rill-server (the first build compiles RocksDB: 10-20 minutes)"
cargo build --bins
bin="$CARGO_TARGET_DIR/debug"
data_dir="${RILL_DEV_DIR:-.rill-dev}"
export RILL_BOOTSTRAP="127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003"

step "starting 3 nodes (data and logs in $data_dir/)"
ready=$(mktemp -u)
mkfifo "$ready"
"$bin/rill" dev --nodes 3 --data-dir "$data_dir" --base-port 7001 >"$ready" &
dev_pid=$!
stop() { kill -TERM "$dev_pid" 2>/dev/null || true; wait "$dev_pid" 2>/dev/null || true; rm -f "$ready"; }
trap stop EXIT
trap 'exit 130' INT TERM
while IFS= read -r line; do
  echo "$line"
  [ "$line" = "press Ctrl-C to stop" ] && break
done <"$ready"
# Keep draining rill dev's output in the background so it never blocks.
cat "$ready" &

step "rill cluster status"
"$bin/rill" cluster status

step "rill topic create demo --partitions 3 --replication-factor 3"
if ! out=$("$bin/rill" topic create demo --partitions 3 --replication-factor 3 2>&1); then
  case "$out" in *TOPIC_ALREADY_EXISTS*) echo "topic demo exists already (from an earlier run)";; *) echo "$out" >&2; exit 1;; esac
else
  echo "$out"
fi

step "produce 9 keyed records with acks=all (key:value per line)"
printf 'alice:hello\nbob:hi\ncarol:hey\nalice:how are you\nbob:fine\ncarol:great\nalice:bye\nbob:later\ncarol:ciao\n' |
  "$bin/rill" produce demo --key-separator :

step "consume them back (partition, offset, key, value)"
"$bin/rill" consume demo --from-beginning --timeout-ms 1000 --format '%p %o %k=%v'

step "rill topic describe demo"
"$bin/rill" topic describe demo

cat <<TXT

The cluster is running. In another shell:
  export RILL_BOOTSTRAP=$RILL_BOOTSTRAP
  $bin/rill topic describe demo --output json
  seq 1 1000 | $bin/rill produce demo
  $bin/rill consume demo --from-beginning --max-messages 10
Press Ctrl-C here to stop every node.
TXT
wait $dev_pid
