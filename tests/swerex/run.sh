#!/usr/bin/env bash
# Drives agent-reach's `swerex-remote` personality with SWE-ReX's own client
# (`swe-rex` from PyPI, plus `aiohttp`, which its RemoteRuntime imports
# without declaring it). Makes (once) a virtualenv under target/, builds the
# binary if needed, links it as `swerex-remote`, runs client_test.py, then
# SWE-ReX's own remote-runtime tests (tests/swerex/upstream.sh). Exits
# non-zero if any check fails.
set -euo pipefail
cd "$(dirname "$0")/../.."
. tests/common/python.sh
venv="${SWEREX_TEST_VENV:-target/swerex-venv}"
venv_with "$venv" 'swerex, aiohttp, pytest, pytest_asyncio' 'swe-rex>=1.4,<2' aiohttp pytest pytest-asyncio requests
bin=$(test_binary)
links="target/swerex-links"
mkdir -p "$links"
ln -sf "$(realpath "$bin")" "$links/swerex-remote"
echo "== SWE-ReX RemoteRuntime against $links/swerex-remote"
timeout 600 "$venv/bin/python" tests/swerex/client_test.py "$(cd "$links" && pwd)/swerex-remote"
echo "== SWE-ReX's own remote runtime tests against $links/swerex-remote"
SWEREX_TEST_VENV="$venv" timeout 900 tests/swerex/upstream.sh "$(cd "$links" && pwd)/swerex-remote"
