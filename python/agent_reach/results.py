"""Typed results: the contract's normalized result as dataclasses.

Every field of the JSON result has an attribute of the same name; unknown
fields a newer agent-reach adds are kept in ``extra`` rather than dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Optional

STATUSES = ("success", "failure", "timeout", "rejected", "busy", "error")


@dataclass(frozen=True)
class ErrorInfo:
    """``error``: a stable ``kind`` and a human ``message``."""

    kind: str
    message: str
    retry_after_ms: Optional[int] = None

    @classmethod
    def from_json(cls, value: Optional[Dict[str, Any]]) -> Optional["ErrorInfo"]:
        if not value:
            return None
        return cls(
            kind=str(value.get("kind", "")),
            message=str(value.get("message", "")),
            retry_after_ms=value.get("retry_after_ms"),
        )


@dataclass(frozen=True)
class OriginalBytes:
    """``original_bytes``: the sizes before folding."""

    stdout: int = 0
    stderr: int = 0


@dataclass(frozen=True)
class FullOutputPaths:
    """``full_output_paths``: the spill file of each stream, if folded."""

    stdout: Optional[str] = None
    stderr: Optional[str] = None


@dataclass(frozen=True)
class SandboxInfo:
    """``sandbox``: what was enforced (``enforced``, ``partial``, ``none``...)."""

    fs: str
    net: str
    abi: Optional[int] = None


@dataclass(frozen=True)
class Result:
    """One normalized result (``run --json``, ``exec --json``, a tool)."""

    id: Optional[str]
    status: str
    tool: Optional[str] = None
    exit_code: Optional[int] = None
    signal: Optional[int] = None
    stdout: str = ""
    stderr: str = ""
    duration_ms: Optional[int] = None
    truncated: bool = False
    original_bytes: OriginalBytes = field(default_factory=OriginalBytes)
    full_output_path: Optional[str] = None
    full_output_paths: FullOutputPaths = field(default_factory=FullOutputPaths)
    sandbox: Optional[SandboxInfo] = None
    cached: bool = False
    error: Optional[ErrorInfo] = None
    extra: Dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """True when the status is ``success``."""
        return self.status == "success"

    @classmethod
    def from_json(cls, value: Dict[str, Any]) -> "Result":
        known = {
            "id", "tool", "status", "exit_code", "signal", "stdout", "stderr",
            "duration_ms", "truncated", "original_bytes", "full_output_path",
            "full_output_paths", "sandbox", "cached", "error",
        }
        original = value.get("original_bytes") or {}
        paths = value.get("full_output_paths") or {}
        sandbox = value.get("sandbox")
        rid = value.get("id")
        return cls(
            id=None if rid is None else str(rid),
            tool=value.get("tool"),
            status=str(value.get("status", "error")),
            exit_code=value.get("exit_code"),
            signal=value.get("signal"),
            stdout=value.get("stdout") or "",
            stderr=value.get("stderr") or "",
            duration_ms=value.get("duration_ms"),
            truncated=bool(value.get("truncated", False)),
            original_bytes=OriginalBytes(
                stdout=int(original.get("stdout") or 0),
                stderr=int(original.get("stderr") or 0),
            ),
            full_output_path=value.get("full_output_path"),
            full_output_paths=FullOutputPaths(
                stdout=paths.get("stdout"), stderr=paths.get("stderr")
            ),
            sandbox=None
            if not sandbox
            else SandboxInfo(
                fs=str(sandbox.get("fs", "")),
                net=str(sandbox.get("net", "")),
                abi=sandbox.get("abi"),
            ),
            cached=bool(value.get("cached", False)),
            error=ErrorInfo.from_json(value.get("error")),
            extra={k: v for k, v in value.items() if k not in known},
        )
