#!/usr/bin/env bash
# Runs every test tier, exactly as CI does (.ci/run calls this):
#   format, lints and API docs, unit and storage-conformance tests, a short run of every fuzz target,
#   integration tests against real rill-server processes on 127.0.0.1, Python clients and
#   librdkafka's own test suite against `rill dev`, and the deterministic
#   simulation (fixed seeds plus a same-seed-same-trace check).
# Works on a fresh Debian machine with only Rust installed: it installs what the build needs.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

ensure_build_deps

step "format"
cargo fmt --all -- --check

step "lints"
cargo clippy --workspace --all-targets -- -D warnings

step "API docs build without warnings (broken or private intra-doc links)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps

step "build (binaries and tests)"
cargo build --workspace --bins --tests

step "unit and storage-conformance tests"
cargo test --workspace --exclude rill-tests

step "fuzzing: every target for ${RILL_FUZZ_SECONDS:-20} s (scripts/fuzz.sh; docs/testing.md, \"Fuzzing\")"
RILL_CARGO_LOCK="" scripts/fuzz.sh --seconds "${RILL_FUZZ_SECONDS:-20}"

step "integration tests (real 3-node clusters on 127.0.0.1)"
cargo test -p rill-tests -- --test-threads=1

step "benchmark smoke: 10 s of one workload against Rill (no timing assertions)"
"$CARGO_TARGET_DIR/debug/rill" bench -w smoke --systems rill-acks-all-rf3 --duration 10s --warmup 2s \
  --data-dir "${TMPDIR:-/var/tmp}/rill-bench-smoke" --base-port 17400
rm -rf "${TMPDIR:-/var/tmp}/rill-bench-smoke"

step "the Python example against a local cluster (grpcio, no Rust client)"
examples/python/check.sh

step "librdkafka's own test suite: the allowlisted tests against a local cluster (docs/kafka.md)"
scripts/librdkafka-tests.sh

step "simulation lints"
RUSTFLAGS="--cfg madsim" CARGO_TARGET_DIR="$RILL_SIM_TARGET_DIR" cargo clippy -p rill-chaos --all-targets -- -D warnings

step "deterministic simulation: default scenarios x ${RILL_SIM_SEEDS:-50} seeds"
chaos/run --seeds "${RILL_SIM_SEEDS:-50}"

step "a group of fifty members (scripted, not a default scenario: 5-14 s a seed) x 5 seeds"
chaos/run --scenario a_group_of_fifty_settles_and_takes_new_partitions_within_seconds --seeds 5

step "share groups under faults (generated, not a default scenario: 20-30 s a seed) x ${RILL_SHARE_SEEDS:-20} seeds"
chaos/run --scenario share_groups --seeds "${RILL_SHARE_SEEDS:-20}"

step "simulation determinism: the same seed twice gives the same trace"
chaos/run --seed "${RILL_DETERMINISM_SEED:-7}" --check-determinism

step "the checkers catch deliberate bugs (each mutation must produce violations)"
for m in ack-before-sync read-above-hw skip-truncate no-dedupe empty-state-snapshot serve-below-log-start purge-ahead-of-log-start compact-above-hw double-assign commit-before-process no-epoch-bump lso-off-by-one txn-offsets-on-abort expire-open-transactions probe-claims-all evict-active-producers stale-offsets-read repeated-marker-decides batch-before-marker group-offsets-before-marker stale-transactions-read stale-sync-assignment unanchored-pattern share-acquire-unreplicated expiry-ignores-renewal late-ack-applied dead-lettered-before-copy; do
  scenario=acks_all_3
  [ "$m" = no-dedupe ] && scenario=idempotence
  [ "$m" = empty-state-snapshot ] && scenario=state_partition_purges_and_installs_snapshots
  [ "$m" = serve-below-log-start ] && scenario=trims
  [ "$m" = purge-ahead-of-log-start ] && scenario=trims
  [ "$m" = compact-above-hw ] && scenario=compaction
  [ "$m" = double-assign ] && scenario=consumer_group_members_never_share_a_partition
  [ "$m" = commit-before-process ] && scenario=groups
  [ "$m" = no-epoch-bump ] && scenario=transactions
  [ "$m" = lso-off-by-one ] && scenario=transactions
  [ "$m" = batch-before-marker ] && scenario=transactions
  [ "$m" = group-offsets-before-marker ] && scenario=a_groups_owed_marker_comes_before_the_next_transactions_offsets
  [ "$m" = txn-offsets-on-abort ] && scenario=exactly_once
  [ "$m" = expire-open-transactions ] && scenario=transactions
  [ "$m" = evict-active-producers ] && scenario=producer_churn
  [ "$m" = stale-offsets-read ] && scenario=a_deposed_offsets_coordinator_never_answers_a_stale_offset
  [ "$m" = repeated-marker-decides ] && scenario=a_late_copy_of_a_marker_never_decides_the_next_transaction
  [ "$m" = stale-transactions-read ] && scenario=a_deposed_transaction_coordinator_never_describes_a_stale_transaction
  [ "$m" = stale-sync-assignment ] && scenario=classic_groups
  [ "$m" = unanchored-pattern ] && scenario=groups
  [ "$m" = share-acquire-unreplicated ] && scenario=share_groups
  [ "$m" = expiry-ignores-renewal ] && scenario=share_groups
  [ "$m" = late-ack-applied ] && scenario=a_late_acknowledgement_is_refused_after_a_failover
  [ "$m" = dead-lettered-before-copy ] && scenario=share_groups
  if chaos/run --mutation "$m" --scenario "$scenario" --seeds 50 --stop-at-first >"${TMPDIR:-/tmp}/rill-mutation-$m.log" 2>&1; then
    cat "${TMPDIR:-/tmp}/rill-mutation-$m.log"
    echo "error: mutation $m ran 50 seeds without a single violation: the checkers missed it" >&2
    exit 1
  fi
  echo "mutation $m caught: $(grep -m1 -E '^  (violation|thread)' "${TMPDIR:-/tmp}/rill-mutation-$m.log" | sed 's/^ *//')"
  grep -m1 'replay:' "${TMPDIR:-/tmp}/rill-mutation-$m.log"
done

step "all tests passed"
