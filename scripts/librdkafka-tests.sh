#!/usr/bin/env bash
# librdkafka's own test suite against a local Rill cluster, through the Kafka listener
# (docs/kafka.md, "librdkafka's test suite").
#
#   scripts/librdkafka-tests.sh            the allowlisted tests (scripts/librdkafka-tests.allow);
#                                          fails if any of them fails
#   scripts/librdkafka-tests.sh 0012 0030  just these tests, allowlisted or not
#
# librdkafka's source is the one the rdkafka-sys crate ships (cargo fetches it from crates.io
# into its registry; nothing of it is committed here). The library and its test runner are built
# once, outside the repository, in $RILL_LIBRDKAFKA_DIR (default /var/tmp/rill-librdkafka). The
# cluster is `rill dev` with the broker settings librdkafka's "default" test scenario expects of
# Kafka: topic auto-creation on, four partitions a topic, three replicas. Each test runs on its
# own (TESTS=NNNN) in quick mode, with a time limit; its log is kept in $RILL_LIBRDKAFKA_DIR/logs.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
. "$root/scripts/lib.sh"

crate_version="4.10.0+2.12.1"        # rdkafka-sys: the librdkafka it bundles follows the +
librdkafka_version="${crate_version#*+}"
dir="${RILL_LIBRDKAFKA_DIR:-/var/tmp/rill-librdkafka}"
build="$dir/$librdkafka_version"
bin="${CARGO_TARGET_DIR:-/var/tmp/rill-target}/debug"
per_test_limit="${RILL_LIBRDKAFKA_TEST_SECONDS:-240}"

if [ ! -x "$build/tests/test-runner" ]; then
  step "building librdkafka $librdkafka_version and its test runner (once, in $build)"
  mkdir -p "$dir/fetch/src"
  cat >"$dir/fetch/Cargo.toml" <<EOF
[package]
name = "librdkafka-source"
version = "0.0.0"
edition = "2021"
[dependencies]
rdkafka-sys = "=$crate_version"
[workspace]
EOF
  : >"$dir/fetch/src/lib.rs"
  cargo fetch --quiet --manifest-path "$dir/fetch/Cargo.toml"
  source_dir=$(ls -d "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/"rdkafka-sys-$crate_version"/librdkafka | head -1)
  rm -rf "$build"
  cp -r "$source_dir" "$build"
  chmod -R u+w "$build"
  (
    cd "$build"
    # Only what Debian's build essentials and zlib provide; the tests that need TLS, SASL or a
    # codec left out here are not on the allowlist.
    ./configure --disable-gssapi --disable-curl --disable-ssl --disable-sasl --disable-zstd \
      --disable-lz4-ext --disable-regex-ext >"$dir/configure.log" 2>&1
    make -j"$(nproc)" libs >"$dir/build.log" 2>&1
    make -j"$(nproc)" -C tests build >>"$dir/build.log" 2>&1
  ) || { tail -30 "$dir/build.log" "$dir/configure.log" 2>/dev/null; echo "building librdkafka failed" >&2; exit 1; }
fi

if [ "$#" -gt 0 ]; then
  tests=("$@")
else
  mapfile -t tests < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$root/scripts/librdkafka-tests.allow" | awk '{print $1}')
fi

base=$((20000 + RANDOM % 20000))
data=$(mktemp -d)
RILL_KAFKA_AUTO_CREATE_TOPICS=true RILL_KAFKA_DEFAULT_PARTITIONS=4 \
  "$bin/rill" dev --nodes 3 --base-port "$base" --data-dir "$data" >"$data/dev.out" 2>&1 &
dev=$!
trap 'kill -TERM $dev 2>/dev/null; wait $dev 2>/dev/null; rm -rf "$data"' EXIT
for _ in $(seq 1 600); do grep -q '^cluster ready' "$data/dev.out" && break; sleep 0.1; done
grep -q '^cluster ready' "$data/dev.out" || { cat "$data/dev.out"; echo "rill dev did not start" >&2; exit 1; }
kafka=$(sed -n 's/^kafka bootstrap: //p' "$data/dev.out")
echo "bootstrap.servers=$kafka" >"$data/test.conf"

mkdir -p "$dir/logs"
failed=()
cd "$build/tests"
for t in "${tests[@]}"; do
  start=$(date +%s)
  # TEST_KAFKA_VERSION: the Kafka whose features the tests may assume (they skip what is newer).
  if LD_LIBRARY_PATH=../src:../src-cpp TESTS="$t" RDKAFKA_TEST_CONF="$data/test.conf" \
    TEST_KAFKA_VERSION=3.9.0 BROKERS="$kafka" timeout "$per_test_limit" ./test-runner -Q -p1 \
    >"$dir/logs/$t.log" 2>&1; then
    echo "$t passed ($(( $(date +%s) - start )) s)"
  else
    echo "$t FAILED ($(( $(date +%s) - start )) s): $dir/logs/$t.log"
    grep -a -A2 'failed at' "$dir/logs/$t.log" | head -6 || true
    failed+=("$t")
  fi
done
if [ "${#failed[@]}" -gt 0 ]; then
  echo "librdkafka tests failed: ${failed[*]}" >&2
  exit 1
fi
echo "librdkafka's test suite: ${#tests[@]} test(s) passed against a 3-node Rill cluster"
