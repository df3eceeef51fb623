#!/usr/bin/env bash
# Prepares everything pylog needs in ./.venv, idempotently:
#   - system packages (as root on Debian/Ubuntu): liburing-dev for the io_uring
#     engine, xfsprogs and fio for filesystem tests and benchmarks, kcat and strace
#     for the broker's tests; Java and Maven for Apache Kafka (tools/kafka);
#   - a virtualenv with the runtime and [dev,spark,table] dependencies;
#   - the compiled C core (an editable install; rebuilt when sources change).
# Without root or without liburing the build still works, without io_uring.
#   tools/setup.sh           everything the test suite needs (tools/run-tests)
#   tools/setup.sh --bench   only what the standard benchmark needs (tools/run-benchmark):
#                            liburing-dev, the runtime and the [bench] extra; no Java,
#                            Spark, Kafka's jars or test tools
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
    "") mode=tests extras=dev,spark,table ;;
    --bench) mode=bench extras=bench ;;
    *) echo "usage: tools/setup.sh [--bench]" >&2; exit 2 ;;
esac

want=()
[ -f /usr/include/liburing.h ] || want+=(liburing-dev)
if [ "$mode" = tests ]; then
    command -v mkfs.xfs >/dev/null 2>&1 || want+=(xfsprogs)
    command -v fio >/dev/null 2>&1 || want+=(fio)
    command -v kcat >/dev/null 2>&1 || want+=(kcat)       # a real Kafka client (librdkafka 2.0) for broker tests
    command -v strace >/dev/null 2>&1 || want+=(strace)   # the zero-copy fetch test watches syscalls
    command -v java >/dev/null 2>&1 || want+=(openjdk-17-jre-headless)   # Apache Kafka (the reference) and Spark
    command -v javac >/dev/null 2>&1 || want+=(openjdk-17-jdk-headless)  # Kafka's Java clients run from a source file
    command -v mvn >/dev/null 2>&1 || want+=(maven)       # fetches Kafka's jars (tools/kafka/pom.xml)
fi
if [ ${#want[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "pylog setup: apt-get install ${want[*]}"
        apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${want[@]}" >/dev/null
    else
        echo "pylog setup: missing ${want[*]} and not root: io_uring and some tests will be unavailable"
    fi
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q "setuptools>=77" wheel "Cython>=3.0,<3.4"
# The distribution was named "pylog" before (on PyPI that name is another, unrelated
# package): an old install of it would own the same `pylog` command and import name.
if .venv/bin/python -m pip show -q pylog >/dev/null 2>&1; then
    .venv/bin/python -m pip uninstall -y -q pylog
fi
.venv/bin/python -m pip install -q --no-build-isolation -e ".[$extras]"
# Apache Kafka's broker, clients and tools (Maven Central, into ~/.cache/pylog; never committed).
if [ "$mode" = tests ] && command -v mvn >/dev/null 2>&1 && command -v java >/dev/null 2>&1; then
    tools/kafka/fetch >/dev/null || echo "pylog setup: could not fetch Apache Kafka's jars (tools/kafka/fetch)"
    tools/spark-kafka/fetch >/dev/null || echo "pylog setup: could not fetch Spark's Kafka connector (tools/spark-kafka/fetch)"
    tools/spark-iceberg/fetch >/dev/null || echo "pylog setup: could not fetch Spark's Iceberg runtime (tools/spark-iceberg/fetch)"
    tools/spark-iceberg/pyspark >/dev/null || echo "pylog setup: could not install the PySpark of Spark's Iceberg runtime (tools/spark-iceberg/pyspark)"
    # The pinned Kafka releases whose message schemas the protocol codec is generated from.
    .venv/bin/python tools/protocol_codegen.py --fetch >/dev/null \
        || echo "pylog setup: could not fetch Kafka's message schemas (tools/protocol_codegen.py --fetch)"
fi
.venv/bin/python -c "import pylog; print('pylog setup: ready;', 'crc32c:', pylog.crc32c_implementation())"
