#!/usr/bin/env bash
# Builds measured side by side, all alive at once (see
# benches/side_by_side.py): MCP exec_command over stdio and sandboxd-grpc
# Execute, in blocks, the builds' order swapped block by block. The first
# binary is the baseline. Makes (once) the venv with grpcio under target/.
#   benches/side_by_side.sh [--blocks N] BASELINE BIN [BIN...]
set -euo pipefail
cd "$(dirname "$0")/.."
. tests/common/python.sh
venv="${AGENT_SANDBOX_TEST_VENV:-target/agent-sandbox-venv}"
venv_with "$venv" 'k8s_agent_sandbox, grpc' 'k8s-agent-sandbox[grpc]>=1.0.8,<1.1'
exec timeout 3600 "$venv/bin/python" benches/side_by_side.py "$@"
