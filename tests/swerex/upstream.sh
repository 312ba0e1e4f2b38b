#!/usr/bin/env bash
# Runs SWE-ReX's own remote-runtime tests (tests/test_execution.py and
# tests/test_server.py of the swe-rex sdist from PyPI, unpacked under
# target/ at test time, never committed) against our `swerex-remote` link:
# their `remote_server` fixture, which starts the original in-process, is
# replaced by one that starts the link given as $1.
set -euo pipefail
cd "$(dirname "$0")/../.."
link="$1"
venv="${SWEREX_TEST_VENV:-target/swerex-venv}"
version="$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("swe-rex"))')"
dir="target/swerex-upstream/swe_rex-$version"
if [[ ! -f "$dir/tests/conftest.py" ]] || ! grep -q agent-reach "$dir/tests/conftest.py"; then
    rm -rf target/swerex-upstream && mkdir -p target/swerex-upstream
    "$venv/bin/pip" download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
        "swe-rex==$version" -d target/swerex-upstream
    tar xzf "target/swerex-upstream/swe_rex-$version.tar.gz" -C target/swerex-upstream
    # The sdist ships no conftest.py; ours gives their tests the fixtures
    # they name, with the server under test being our link.
    cat > "$dir/tests/conftest.py" <<'PY'
"""Fixtures for SWE-ReX's tests, written by agent-reach's upstream.sh: the
server under test is agent-reach's `swerex-remote`."""
import os
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field

import pytest

from swerex.runtime.abstract import BashAction, CloseBashSessionRequest, Command, CreateBashSessionRequest
from swerex.runtime.remote import RemoteRuntime

TEST_API_KEY = "testkey"


@dataclass
class RemoteServer:
    port: int
    headers: dict = field(default_factory=lambda: {"X-API-Key": TEST_API_KEY})


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def remote_server():
    port = _free_port()
    home = tempfile.mkdtemp(prefix="ar-swerex-upstream-")
    env = {"PATH": os.environ["PATH"], "HOME": home, "AGENT_REACH_HOME": home, "LANG": "C.UTF-8"}
    proc = subprocess.Popen(
        [os.environ["AGENT_REACH_SWEREX_LINK"], "--host", "127.0.0.1", "--port", str(port), "--auth-token", TEST_API_KEY],
        env=env, cwd=home, stdout=subprocess.DEVNULL,
    )
    for _ in range(400):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            time.sleep(0.05)
    else:
        pytest.fail("agent-reach swerex-remote did not start")
    yield RemoteServer(port)
    proc.terminate()
    proc.wait(timeout=10)


@pytest.fixture
async def remote_runtime(remote_server):
    r = RemoteRuntime(port=remote_server.port, auth_token=TEST_API_KEY)
    try:
        yield r
    finally:
        await r.close()


@pytest.fixture
async def runtime_with_default_session(remote_runtime):
    await remote_runtime.create_session(CreateBashSessionRequest())
    try:
        yield remote_runtime
    finally:
        await remote_runtime.close_session(CloseBashSessionRequest())


class _Action(BashAction):
    timeout: float | None = 5


class _Command(Command):
    timeout: float | None = 5
PY
    touch "$dir/tests/__init__.py"
fi
cd "$dir"
AGENT_REACH_SWEREX_LINK="$link" "../../../$venv/bin/python" -m pytest -q -p no:cacheprovider \
    -o asyncio_mode=auto -o asyncio_default_fixture_loop_scope=function \
    tests/test_execution.py tests/test_server.py
