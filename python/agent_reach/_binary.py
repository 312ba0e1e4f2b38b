"""Finding the ``agent-reach`` executable.

The wheel puts it in the environment's scripts directory (maturin's
``bindings = "bin"``); ``$AGENT_REACH_BIN`` overrides, and ``PATH`` is the
last resort.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig

BIN_VAR = "AGENT_REACH_BIN"


class BinaryNotFound(FileNotFoundError):
    """No ``agent-reach`` executable was found."""


def find_agent_reach_bin() -> str:
    """The path of the ``agent-reach`` executable this package runs."""
    given = os.environ.get(BIN_VAR)
    if given:
        return given
    name = "agent-reach.exe" if sys.platform == "win32" else "agent-reach"
    candidates = [sysconfig.get_path("scripts")]
    user = sysconfig.get_path("scripts", f"{os.name}_user")
    if user:
        candidates.append(user)
    candidates.append(os.path.dirname(sys.executable))
    for directory in candidates:
        if directory:
            path = os.path.join(directory, name)
            if os.path.isfile(path) and os.access(path, os.X_OK):
                return path
    found = shutil.which("agent-reach")
    if found:
        return found
    raise BinaryNotFound(
        f"agent-reach not found: set ${BIN_VAR}, or `pip install agent-reach-runtime`"
    )
