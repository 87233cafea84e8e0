#!/usr/bin/env bash
# Creates examples/python/.venv with grpcio, kafka-python (whose record batch codec the
# example uses, with the lz4, zstandard and python-snappy codecs) and confluent-kafka (which
# bundles librdkafka; for the Kafka listener's checks), and generates the Python gRPC
# stubs for Rill's public API from proto/ into examples/python/gen/. Safe to rerun.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
if [ ! -x "$here/.venv/bin/python" ]; then
  python3 -m venv "$here/.venv" 2>/dev/null || {
    # Debian splits venv out of the base python package.
    command -v apt-get >/dev/null && { apt-get install -y python3-venv >/dev/null || sudo apt-get install -y python3-venv >/dev/null; }
    python3 -m venv "$here/.venv"
  }
fi
"$here/.venv/bin/pip" install --quiet --disable-pip-version-check "grpcio>=1.60" "grpcio-tools>=1.60" \
  "kafka-python>=3.0" "lz4>=4" "zstandard>=0.22" "python-snappy>=0.7" "confluent-kafka>=2.6"
mkdir -p "$here/gen"
"$here/.venv/bin/python" -m grpc_tools.protoc -I "$root/proto/rill" \
  --python_out="$here/gen" --grpc_python_out="$here/gen" \
  common.proto records.proto admin.proto groups.proto share.proto
echo "ready: $here/.venv/bin/python $here/producer.py TOPIC VALUE... ; $here/.venv/bin/python $here/consumer.py TOPIC"
