"""What the sync and async clients share: the command line, the request
lines, and the one id scheme that matches results to requests.

Each request leaves with an id of the client's own (``py-<n>``), so two
requests that the caller gave the same id never collide; the caller's id
is put back on the result.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from typing import Any, Dict, List, Mapping, Optional, Sequence

from ._binary import find_agent_reach_bin
from .results import ErrorInfo, Result

#: How many times a ``busy`` answer is retried before it is returned.
DEFAULT_BUSY_RETRIES = 50
#: How many requests ``batch`` keeps in flight at once.
DEFAULT_MAX_IN_FLIGHT = 32
#: How long ``close`` waits for the requests in flight before killing.
DEFAULT_CLOSE_TIMEOUT = 10.0
#: The longest result line read (agent-reach's own request limit).
MAX_LINE = 16 << 20
#: The ``error.kind`` of a request lost because the process died.
PROCESS_EXITED = "process_exited"
#: The ``retry_after_ms`` used when a ``busy`` result carries none.
DEFAULT_RETRY_AFTER_MS = 10


class ClientClosed(RuntimeError):
    """A request was made on a client after ``close()``."""


def command_line(
    binary: Optional[str],
    config: Optional[os.PathLike],
    profile: Optional[str],
    root: Optional[os.PathLike],
    mode: str = "--jsonl",
) -> List[str]:
    """``agent-reach exec --jsonl [--config F] [--profile P] [--root D]``."""
    argv = [binary or find_agent_reach_bin(), "exec", mode]
    argv += registry_flags(config, profile, root)
    return argv


def registry_flags(
    config: Optional[os.PathLike], profile: Optional[str], root: Optional[os.PathLike]
) -> List[str]:
    flags: List[str] = []
    if config is not None:
        flags += ["--config", os.fspath(config)]
    if profile is not None:
        flags += ["--profile", profile]
    if root is not None:
        flags += ["--root", os.fspath(root)]
    return flags


def child_env(env: Optional[Mapping[str, str]]) -> Dict[str, str]:
    merged = dict(os.environ)
    if env:
        merged.update(env)
    return merged


def tool_request(tool: str, params: Mapping[str, Any], options: Mapping[str, Any]) -> Dict[str, Any]:
    request: Dict[str, Any] = {"tool": tool, "args": dict(params)}
    request.update({k: v for k, v in options.items() if v is not None})
    return request


def command_request(argv: Sequence[str], options: Mapping[str, Any]) -> Dict[str, Any]:
    if isinstance(argv, (str, bytes)):
        raise TypeError("run_command takes an argv list, not a string (there is no shell)")
    request: Dict[str, Any] = {"command": [str(a) for a in argv]}
    request.update({k: v for k, v in options.items() if v is not None})
    return request


def encode(request: Mapping[str, Any], wire_id: str) -> bytes:
    body = dict(request)
    body["id"] = wire_id
    return json.dumps(body, separators=(",", ":")).encode() + b"\n"


def decode(line: bytes) -> Optional[Dict[str, Any]]:
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def restore_id(result: Result, caller_id: Any) -> Result:
    return replace(result, id=None if caller_id is None else str(caller_id))


def lost(caller_id: Any, why: str) -> Result:
    return Result(
        id=None if caller_id is None else str(caller_id),
        status="error",
        error=ErrorInfo(kind=PROCESS_EXITED, message=why),
    )


def retry_delay(result: Result) -> float:
    after = result.error.retry_after_ms if result.error else None
    return max(int(after or DEFAULT_RETRY_AFTER_MS), 1) / 1000.0


def process_gone(pid: int) -> bool:
    """Whether ``pid`` no longer runs: absent, or a zombie its parent has
    not waited for yet (``Popen.poll()`` can still say ``None`` then, when
    another thread holds its wait lock)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1][:1] in ("Z", "X")
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        except OSError:
            return False
        return False
