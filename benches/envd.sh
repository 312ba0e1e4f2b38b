#!/usr/bin/env bash
# The envd door's benchmarks (see benches/envd_bench.py, not named e2b.py,
# which would shadow the SDK): `commands.run("true")` through E2B's Python
# SDK against the same command through sandboxd-grpc's `Execute` and a bare
# fork+exec; a 1 GiB stdout stream through envd's `Start` against the same
# through sandboxd-grpc's `Start` and the pipeline into `cat`; the server's
# RSS per live background process. Uses the release binary unless
# AGENT_REACH_BIN is set; extra arguments (`--calls N`, `--bytes N`,
# `--runs N`, `--live N`) go to the script.
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/common/python.sh
export PIP_CACHE_DIR="${PIP_CACHE_DIR:-$PWD/target/pip-cache}"
venv="${ENVD_BENCH_VENV:-target/envd-bench-venv}"
venv_with "$venv" 'e2b, grpc' 'e2b==2.63.0' 'grpcio>=1.60'
bin="${AGENT_REACH_BIN:-target/release/agent-reach}"
if [[ -z "${AGENT_REACH_BIN:-}" ]]; then
    cargo build --quiet --release --bin agent-reach
fi
exec timeout 3600 "$venv/bin/python" benches/envd_bench.py "$(realpath "$bin")" "$@"
