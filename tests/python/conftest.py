"""Shared fixtures: a temp project with a registry, and clients on it."""

import os
import stat
import textwrap

import pytest

SECRET = "hunter2-python-secret-value"

REGISTRY = """
allow_raw_commands = true

[scheduler]
global = {global_}
queue = {queue}

[[tools]]
name = "echo_msg"
description = "Print a message"
command = ["echo", "{{msg}}"]
cwd = "project_root"
risk = "low"
params = [{{ name = "msg", type = "string", required = true }}]

[[tools]]
name = "count"
description = "Count to n"
command = ["seq", "{{n}}"]
cwd = "project_root"
risk = "low"
params = [{{ name = "n", type = "integer", min = 1, max = 100, required = true }}]

[[tools]]
name = "slow"
command = ["sleep", "30"]
cwd = "project_root"
risk = "low"
timeout = 1

[[tools]]
name = "nap"
command = ["sleep", "0.3"]
cwd = "project_root"
risk = "low"

[[tools]]
name = "noop"
command = ["true"]
cwd = "project_root"
risk = "low"

[[tools]]
name = "show_secret"
command = ["sh", "-c", "echo token=$API_TOKEN"]
cwd = "project_root"
risk = "low"
secrets = ["API_TOKEN"]
"""


def write_registry(directory, global_=8, queue=4096):
    path = os.path.join(directory, "registry.toml")
    with open(path, "w") as f:
        f.write(REGISTRY.format(global_=global_, queue=queue))
    return path


@pytest.fixture
def project(tmp_path):
    home = tmp_path / "ar-home"
    home.mkdir()
    return tmp_path


@pytest.fixture
def env(project):
    return {
        "AGENT_REACH_HOME": str(project / "ar-home"),
        "API_TOKEN": SECRET,
    }


@pytest.fixture
def registry(project):
    return write_registry(str(project))
