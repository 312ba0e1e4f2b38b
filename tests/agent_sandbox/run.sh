#!/usr/bin/env bash
# Drives `agent-reach serve` as the in-pod runtime of kubernetes-sigs/agent-sandbox
# with its published Python client (`k8s-agent-sandbox` from PyPI, with the
# grpc extra), the control plane stubbed. Makes (once) a virtualenv under
# target/, builds the binary if needed, runs client_test.py. Exits non-zero
# if any check fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/common/python.sh
venv="${AGENT_SANDBOX_TEST_VENV:-target/agent-sandbox-venv}"
venv_with "$venv" 'k8s_agent_sandbox, grpc' 'k8s-agent-sandbox[grpc]>=1.0.8,<1.1'
bin=$(test_binary)
echo "== k8s-agent-sandbox client against $bin"
exec timeout 300 "$venv/bin/python" tests/agent_sandbox/client_test.py "$bin"
