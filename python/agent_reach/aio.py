"""``AsyncClient``: the same client for asyncio, over one long-lived
``agent-reach exec --jsonl`` process read by one task.

Same behaviour as :class:`agent_reach.Client`: results matched by id,
``busy`` retried after ``retry_after_ms``, a dead process restarted on the
next request (the requests it had come back with ``error.kind ==
"process_exited"``), ``aclose()`` / ``async with`` leaving no process.
"""

from __future__ import annotations

import asyncio
import collections
import os
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence

from . import _protocol as proto
from .results import Result


class _AsyncProcess:
    def __init__(self, proc: asyncio.subprocess.Process):
        self.proc = proc
        self.pending: Dict[str, asyncio.Future] = {}
        self.dead = False
        self.stderr_tail: collections.deque = collections.deque(maxlen=64)
        self.reader = asyncio.ensure_future(self._read())
        self.stderr_reader = asyncio.ensure_future(self._read_stderr())

    @classmethod
    async def start(cls, argv: List[str], env: Dict[str, str], cwd: Optional[str]) -> "_AsyncProcess":
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env,
            cwd=cwd,
            limit=proto.MAX_LINE,
        )
        return cls(proc)

    async def _read(self) -> None:
        stdout = self.proc.stdout
        assert stdout is not None
        try:
            while True:
                line = await stdout.readline()
                if not line:
                    break
                value = proto.decode(line)
                if value is None:
                    continue
                future = self.pending.pop(str(value.get("id")), None)
                if future is not None and not future.done():
                    future.set_result(value)
        finally:
            self.dead = True
            for future in self.pending.values():
                if not future.done():
                    future.set_result(None)
            self.pending.clear()

    async def _read_stderr(self) -> None:
        stderr = self.proc.stderr
        assert stderr is not None
        while True:
            line = await stderr.readline()
            if not line:
                return
            self.stderr_tail.append(line.decode(errors="replace").rstrip("\n"))

    def why_dead(self) -> str:
        tail = "; ".join(list(self.stderr_tail)[-5:])
        code = self.proc.returncode
        return f"agent-reach exec --jsonl exited (code {code}){': ' + tail if tail else ''}"

    def send(self, wire_id: str, line: bytes) -> Optional[asyncio.Future]:
        if self.dead or self.proc.returncode is not None:
            return None
        stdin = self.proc.stdin
        assert stdin is not None
        future = asyncio.get_running_loop().create_future()
        self.pending[wire_id] = future
        try:
            stdin.write(line)
        except (BrokenPipeError, ConnectionResetError, RuntimeError):
            self.pending.pop(wire_id, None)
            return None
        return future

    async def close(self, timeout: float) -> None:
        stdin = self.proc.stdin
        if stdin is not None:
            try:
                stdin.close()
            except (BrokenPipeError, ConnectionResetError, RuntimeError):
                pass
        try:
            await asyncio.wait_for(self.proc.wait(), timeout)
        except asyncio.TimeoutError:
            self.proc.kill()
            await self.proc.wait()
        for task in (self.reader, self.stderr_reader):
            try:
                await asyncio.wait_for(task, timeout)
            except (asyncio.TimeoutError, asyncio.CancelledError):
                task.cancel()


class AsyncClient:
    """An asyncio client of ``agent-reach exec --jsonl`` (see ``Client``)."""

    def __init__(
        self,
        config: Optional[os.PathLike] = None,
        *,
        profile: Optional[str] = None,
        root: Optional[os.PathLike] = None,
        binary: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[os.PathLike] = None,
        max_in_flight: int = proto.DEFAULT_MAX_IN_FLIGHT,
        busy_retries: int = proto.DEFAULT_BUSY_RETRIES,
        close_timeout: float = proto.DEFAULT_CLOSE_TIMEOUT,
    ):
        self._argv = proto.command_line(binary, config, profile, root)
        self._env = proto.child_env(env)
        self._cwd = None if cwd is None else os.fspath(cwd)
        self.config, self.profile, self.root = config, profile, root
        self.binary = self._argv[0]
        self.max_in_flight = max(1, int(max_in_flight))
        self.busy_retries = max(0, int(busy_retries))
        self.close_timeout = close_timeout
        self.restarts = 0
        self._next = 0
        self._closed = False
        self._process: Optional[_AsyncProcess] = None
        self._starting: Optional[asyncio.Lock] = None

    async def _current(self) -> _AsyncProcess:
        if self._closed:
            raise proto.ClientClosed("the client is closed")
        if self._starting is None:
            self._starting = asyncio.Lock()
        async with self._starting:
            process = self._process
            if (
                process is None
                or process.dead
                or process.proc.returncode is not None
                or proto.process_gone(process.proc.pid)
            ):
                if process is not None:
                    await process.close(self.close_timeout)
                    self.restarts += 1
                process = await _AsyncProcess.start(self._argv, self._env, self._cwd)
                self._process = process
            return process

    @property
    def pid(self) -> Optional[int]:
        return None if self._process is None else self._process.proc.pid

    async def request(self, request: Mapping[str, Any]) -> Result:
        """Sends one request object as the contract writes it; its result."""
        caller_id = request.get("id")
        tries = 0
        unsent = 0
        while True:
            try:
                process = await self._current()
            except proto.ClientClosed as closed:
                return proto.lost(caller_id, str(closed))
            self._next += 1
            wire_id = f"py-{self._next}"
            future = process.send(wire_id, proto.encode(request, wire_id))
            if future is None and unsent < 1:
                # Never written to a live process: nothing of it ran, so it
                # goes once more to a fresh one.
                process.dead = True
                unsent += 1
                continue
            value = None if future is None else await future
            if value is None:
                return proto.lost(caller_id, process.why_dead())
            result = Result.from_json(value)
            if result.status == "busy" and tries < self.busy_retries:
                tries += 1
                await asyncio.sleep(proto.retry_delay(result))
                continue
            return proto.restore_id(result, caller_id)

    async def run(self, tool: str, /, **params: Any) -> Result:
        return await self.request(proto.tool_request(tool, params, {}))

    async def call(
        self,
        tool: str,
        params: Optional[Mapping[str, Any]] = None,
        *,
        approve: Optional[bool] = None,
        priority: Optional[str] = None,
        max_output_tokens: Optional[int] = None,
        tty: Optional[bool] = None,
    ) -> Result:
        options = dict(approve=approve, priority=priority, max_output_tokens=max_output_tokens, tty=tty)
        return await self.request(proto.tool_request(tool, params or {}, options))

    async def run_command(
        self,
        argv: Sequence[str],
        *,
        workdir: Optional[os.PathLike] = None,
        timeout_ms: Optional[int] = None,
        tty: Optional[bool] = None,
        priority: Optional[str] = None,
        approve: Optional[bool] = None,
        max_output_tokens: Optional[int] = None,
    ) -> Result:
        options = dict(
            workdir=None if workdir is None else os.fspath(workdir),
            timeout_ms=timeout_ms,
            tty=tty,
            priority=priority,
            approve=approve,
            max_output_tokens=max_output_tokens,
        )
        return await self.request(proto.command_request(argv, options))

    async def batch(self, requests: Iterable[Mapping[str, Any]]) -> List[Result]:
        slots = asyncio.Semaphore(self.max_in_flight)

        async def one(request: Mapping[str, Any]) -> Result:
            async with slots:
                return await self.request(request)

        return list(await asyncio.gather(*(one(r) for r in requests)))

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        process, self._process = self._process, None
        if process is not None:
            await process.close(self.close_timeout)

    close = aclose

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()
