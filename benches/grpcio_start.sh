#!/usr/bin/env bash
# A 1 GiB `Start` stream through grpcio (see benches/grpcio_start.py). Uses
# the release binary unless binaries are given; several are run alternately.
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/common/python.sh
venv="${AGENT_SANDBOX_TEST_VENV:-target/agent-sandbox-venv}"
venv_with "$venv" 'k8s_agent_sandbox, grpc' 'k8s-agent-sandbox[grpc]>=1.0.8,<1.1'
runs=()
while [[ "${1:-}" == --* ]]; do runs+=("$1" "$2"); shift 2; done
if [[ $# -eq 0 ]]; then
    cargo build --quiet --release --bin agent-reach
    set -- target/release/agent-reach
fi
exec timeout 3600 "$venv/bin/python" benches/grpcio_start.py "${runs[@]}" "$@"
