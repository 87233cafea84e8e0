#!/usr/bin/env bash
# Runs Rill's fuzz targets (fuzz/, cargo-fuzz and libFuzzer) for a fixed time each.
#
#   scripts/fuzz.sh                        # every target, 60 s each
#   scripts/fuzz.sh --seconds 600          # every target, 10 minutes each
#   scripts/fuzz.sh --minutes 30 raft_codec  # one target, 30 minutes
#   scripts/fuzz.sh --list                 # the targets
#
# Needs the nightly toolchain (libFuzzer's instrumentation); installs cargo-fuzz when missing.
# Builds in $RILL_FUZZ_TARGET_DIR and keeps each target's growing corpus in
# $RILL_FUZZ_DIR/corpus/<target>, both outside the checkout; the committed seeds in
# fuzz/seeds/<target> are read too. On a crash it exits non-zero and prints the reproducer, kept
# in $RILL_FUZZ_DIR/artifacts/<target>/ (replay: the printed `cargo fuzz run` line).
set -euo pipefail
cd "$(dirname "$0")/.."

TARGET_DIR="${RILL_FUZZ_TARGET_DIR:-/var/tmp/rill-fuzz-target}"
WORK_DIR="${RILL_FUZZ_DIR:-/var/tmp/rill-fuzz}"
# One build at a time on a shared machine (the other scripts' cargo runs take the same lock).
LOCK="${RILL_CARGO_LOCK-/var/tmp/rill-cargo.lock}"
# Inputs up to 64 KiB: a few record batches or a request with many entries; larger inputs
# explore nothing new and slow every run.
MAX_LEN=65536
# A target that holds more than this is a bug (the targets assert tighter bounds themselves);
# libFuzzer also reports any single allocation above it.
RSS_LIMIT_MB=2048

seconds=60
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --minutes) seconds=$(( $2 * 60 )); shift 2 ;;
    --list) list=1; shift ;;
    -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
    -*) echo "error: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done

all_targets() { sed -n 's/^name = "\(.*\)"$/\1/p' fuzz/Cargo.toml | grep -v '^rill-fuzz$'; }
if [ "${list:-0}" = 1 ]; then
  all_targets
  exit 0
fi
[ ${#targets[@]} -eq 0 ] && mapfile -t targets < <(all_targets)

# An empty RILL_CARGO_LOCK runs cargo without the lock (scripts/test.sh, whose own builds take
# none, and whose caller may hold it already).
cargo() {
  if [ -n "$LOCK" ]; then
    flock "$LOCK" cargo "$@"  # flock runs the cargo binary, not this function
  else
    command cargo "$@"
  fi
}

if ! rustup run nightly rustc --version >/dev/null 2>&1; then
  echo "==> installing the nightly toolchain (libFuzzer's instrumentation needs it)"
  rustup toolchain install nightly --profile minimal
fi
if ! command cargo fuzz --version >/dev/null 2>&1; then
  echo "==> installing cargo-fuzz"
  cargo install cargo-fuzz --locked
fi

failed=()
for t in "${targets[@]}"; do
  all_targets | grep -qx "$t" || { echo "error: no fuzz target $t (scripts/fuzz.sh --list)" >&2; exit 2; }
  corpus="$WORK_DIR/corpus/$t"
  artifacts="$WORK_DIR/artifacts/$t"
  mkdir -p "$corpus" "$artifacts"
  seeds=()
  [ -d "fuzz/seeds/$t" ] && seeds=("fuzz/seeds/$t")
  printf '\n\033[1m==> fuzz %s for %s s\033[0m\n' "$t" "$seconds"
  # Build under the lock; fuzz without it (the run does not build).
  cargo +nightly fuzz build --fuzz-dir fuzz --target-dir "$TARGET_DIR" "$t"
  log="$WORK_DIR/$t.log"
  if command cargo +nightly fuzz run --fuzz-dir fuzz --target-dir "$TARGET_DIR" "$t" \
    "$corpus" "${seeds[@]}" -- \
    -max_total_time="$seconds" -max_len="$MAX_LEN" -rss_limit_mb="$RSS_LIMIT_MB" -timeout=10 \
    -artifact_prefix="$artifacts/" -print_final_stats=1 >"$log" 2>&1; then
    grep -E '^(Done|stat::number_of_executed_units|stat::peak_rss_mb)' "$log" | tr '\n' ' '
    echo "corpus: $(find "$corpus" -type f | wc -l) inputs"
  else
    tail -n 60 "$log"
    reproducer=$(grep -oE "$artifacts/[^ ]+" "$log" | tail -n 1 || true)
    echo "error: fuzz target $t failed; reproducer: ${reproducer:-see $log}" >&2
    echo "replay: cargo +nightly fuzz run --fuzz-dir fuzz --target-dir $TARGET_DIR $t ${reproducer:-<file>}" >&2
    failed+=("$t")
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "error: ${#failed[@]} fuzz target(s) failed: ${failed[*]}" >&2
  exit 1
fi
echo "every fuzz target ran ${seconds} s without a failure: ${targets[*]}"
