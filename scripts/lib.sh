# Shared helpers for Rill's scripts. Source it; do not run it.

# Where compiled artifacts live. Outside the checkout so clean clones (CI) reuse the cache:
# RocksDB's C++ alone takes 10-20 minutes to build.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/rill-target}"
# The simulation (--cfg madsim) is a different build of the same code; it gets its own cache.
RILL_SIM_TARGET_DIR="${RILL_SIM_TARGET_DIR:-/var/tmp/rill-sim-target}"
export RILL_SIM_TARGET_DIR

step() { printf '\n\033[1m==> %s\033[0m\n' "$*"; }

# Installs what the build and the tests need on a fresh Debian/Ubuntu machine with only Rust:
# a C++ compiler for RocksDB, libclang for its bindings, kcat (a Kafka client the Kafka
# listener's tests use), and make and zlib for building librdkafka's test suite. protoc is
# vendored by the build.
ensure_build_deps() {
  local missing=()
  command -v c++ >/dev/null 2>&1 || missing+=(g++)
  # A Kafka client no one here wrote, for the Kafka listener's integration tests.
  command -v kcat >/dev/null 2>&1 || missing+=(kcat)
  # What bindgen's clang-sys loads: libclang.so or libclang-<version>.so (not libclang-cpp, which
  # some images carry without libclang itself).
  if ! ls /usr/lib/llvm-*/lib/libclang.so* /usr/lib/llvm-*/lib/libclang-[0-9]*.so* >/dev/null 2>&1 \
    && ! ldconfig -p 2>/dev/null | grep -Eq 'libclang(-[0-9.]+)?\.so'; then
    missing+=(libclang-dev)
  fi
  # librdkafka's own test suite is built from source (scripts/librdkafka-tests.sh).
  command -v make >/dev/null 2>&1 || missing+=(make)
  [ -f /usr/include/zlib.h ] || missing+=(zlib1g-dev)
  if [ ${#missing[@]} -gt 0 ]; then
    step "installing build and test dependencies: ${missing[*]}"
    local sudo=""
    [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1 && sudo="sudo"
    if ! command -v apt-get >/dev/null 2>&1; then
      echo "error: please install ${missing[*]} (a C++ compiler, libclang, kcat) with your package manager" >&2
      return 1
    fi
    $sudo apt-get install -y "${missing[@]}" || { $sudo apt-get update && $sudo apt-get install -y "${missing[@]}"; }
  fi
}
