"""``Client``: one long-lived ``agent-reach exec --jsonl`` process, used
from any thread.

Requests are written as lines; a reader thread takes each result line,
finds its request by id and hands the result over. A ``busy`` result (the
scheduler's queue was full) is sent again after its ``retry_after_ms``, up
to ``busy_retries`` times. When the process dies, the requests in flight
come back as ``status="error"`` with ``error.kind == "process_exited"``
and the next request starts a new process. ``close()`` (or leaving the
``with`` block) lets the requests in flight finish, then ends the process;
none is left behind.
"""

from __future__ import annotations

import collections
import os
import subprocess
import threading
import time
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence

from . import _protocol as proto
from .results import Result


class _Process:
    """One ``exec --jsonl`` child, its reader thread and its pending table."""

    def __init__(self, argv: List[str], env: Dict[str, str], cwd: Optional[str]):
        self.popen = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=cwd,
            bufsize=0,
        )
        self.pending: Dict[str, Callable[[Optional[Dict[str, Any]]], None]] = {}
        self.lock = threading.Lock()
        self.write_lock = threading.Lock()
        self.dead = False
        self.stderr_tail: collections.deque = collections.deque(maxlen=64)
        self.reader = threading.Thread(target=self._read, name="agent-reach-reader", daemon=True)
        self.stderr_reader = threading.Thread(target=self._read_stderr, name="agent-reach-stderr", daemon=True)
        self.reader.start()
        self.stderr_reader.start()

    def _read(self) -> None:
        stdout = self.popen.stdout
        assert stdout is not None
        for line in stdout:
            value = proto.decode(line)
            if value is None:
                continue
            with self.lock:
                callback = self.pending.pop(str(value.get("id")), None)
            if callback is not None:
                callback(value)
        self._die()

    def _read_stderr(self) -> None:
        stderr = self.popen.stderr
        assert stderr is not None
        for line in stderr:
            self.stderr_tail.append(line.decode(errors="replace").rstrip("\n"))

    def _die(self) -> None:
        with self.lock:
            self.dead = True
            lost = list(self.pending.values())
            self.pending.clear()
        for callback in lost:
            callback(None)

    def why_dead(self) -> str:
        code = self.popen.poll()
        tail = "; ".join(list(self.stderr_tail)[-5:])
        return f"agent-reach exec --jsonl exited (code {code}){': ' + tail if tail else ''}"

    def send(self, wire_id: str, line: bytes, callback: Callable[[Optional[Dict[str, Any]]], None]) -> bool:
        with self.lock:
            if self.dead:
                return False
            self.pending[wire_id] = callback
        try:
            with self.write_lock:
                stdin = self.popen.stdin
                assert stdin is not None
                stdin.write(line)
        except (BrokenPipeError, ValueError, OSError):
            with self.lock:
                self.pending.pop(wire_id, None)
            return False
        return True

    def close(self, timeout: float) -> None:
        try:
            if self.popen.stdin is not None:
                self.popen.stdin.close()
        except OSError:
            pass
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()
        self.reader.join(timeout=timeout)
        self.stderr_reader.join(timeout=timeout)
        for stream in (self.popen.stdout, self.popen.stderr):
            if stream is not None:
                stream.close()


class Client:
    """A synchronous client of ``agent-reach exec --jsonl``.

    ``config``, ``profile`` and ``root`` are ``exec``'s ``--config``,
    ``--profile`` and ``--root``; ``binary`` the executable (default: the
    one this package installed, or ``$AGENT_REACH_BIN``); ``env`` variables
    added to the process's environment.
    """

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
        self._lock = threading.Lock()
        self._next = 0
        self._closed = False
        self._process: Optional[_Process] = None
        self._current()

    # -- the process -------------------------------------------------------

    def _current(self) -> _Process:
        with self._lock:
            if self._closed:
                raise proto.ClientClosed("the client is closed")
            process = self._process
            if (
                process is None
                or process.dead
                or process.popen.poll() is not None
                or proto.process_gone(process.popen.pid)
            ):
                if process is not None:
                    process.close(self.close_timeout)
                    self.restarts += 1
                process = _Process(self._argv, self._env, self._cwd)
                self._process = process
            return process

    def _wire_id(self) -> str:
        with self._lock:
            self._next += 1
            return f"py-{self._next}"

    @property
    def pid(self) -> Optional[int]:
        """The process id of the current ``exec --jsonl`` process."""
        process = self._process
        return None if process is None else process.popen.pid

    def _submit(self, request: Mapping[str, Any], done: Callable[[Result], None]) -> None:
        """Sends ``request``; ``done`` gets its result (busy retried)."""
        caller_id = request.get("id")
        tries = [0]
        unsent = [0]

        def attempt() -> None:
            try:
                process = self._current()
            except proto.ClientClosed as closed:
                done(proto.lost(caller_id, str(closed)))
                return
            wire_id = self._wire_id()

            def on_line(value: Optional[Dict[str, Any]]) -> None:
                if value is None:
                    done(proto.lost(caller_id, process.why_dead()))
                    return
                result = Result.from_json(value)
                if result.status == "busy" and tries[0] < self.busy_retries:
                    tries[0] += 1
                    timer = threading.Timer(proto.retry_delay(result), attempt)
                    timer.daemon = True
                    timer.start()
                    return
                done(proto.restore_id(result, caller_id))

            if not process.send(wire_id, proto.encode(request, wire_id), on_line):
                # Never written to a live process (it died before its
                # reader saw the end of its output): nothing of the request
                # ran, so it goes once more to a fresh process.
                process.dead = True
                if unsent[0] < 1:
                    unsent[0] += 1
                    attempt()
                    return
                done(proto.lost(caller_id, process.why_dead()))

        attempt()

    def request(self, request: Mapping[str, Any]) -> Result:
        """Sends one request object as the contract writes it; its result."""
        box: List[Result] = []
        ready = threading.Event()

        def done(result: Result) -> None:
            box.append(result)
            ready.set()

        self._submit(request, done)
        ready.wait()
        return box[0]

    # -- the API -----------------------------------------------------------

    def run(self, tool: str, /, **params: Any) -> Result:
        """Runs registry tool ``tool`` with named parameters ``params``."""
        return self.request(proto.tool_request(tool, params, {}))

    def call(
        self,
        tool: str,
        params: Optional[Mapping[str, Any]] = None,
        *,
        approve: Optional[bool] = None,
        priority: Optional[str] = None,
        max_output_tokens: Optional[int] = None,
        tty: Optional[bool] = None,
    ) -> Result:
        """``run`` with the request options a parameter name could clash with."""
        options = dict(approve=approve, priority=priority, max_output_tokens=max_output_tokens, tty=tty)
        return self.request(proto.tool_request(tool, params or {}, options))

    def run_command(
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
        """Runs a raw argv (no shell), where the policy allows raw commands."""
        options = dict(
            workdir=None if workdir is None else os.fspath(workdir),
            timeout_ms=timeout_ms,
            tty=tty,
            priority=priority,
            approve=approve,
            max_output_tokens=max_output_tokens,
        )
        return self.request(proto.command_request(argv, options))

    def batch(self, requests: Iterable[Mapping[str, Any]]) -> List[Result]:
        """Sends every request (``max_in_flight`` at a time); the results in
        the order of the requests, each matched to its request by id."""
        items = list(requests)
        results: List[Optional[Result]] = [None] * len(items)
        slots = threading.Semaphore(self.max_in_flight)
        remaining = [len(items)]
        finished = threading.Event()
        count_lock = threading.Lock()
        if not items:
            return []

        def done_for(index: int) -> Callable[[Result], None]:
            def done(result: Result) -> None:
                results[index] = result
                slots.release()
                with count_lock:
                    remaining[0] -= 1
                    last = remaining[0] == 0
                if last:
                    finished.set()

            return done

        for index, request in enumerate(items):
            slots.acquire()
            self._submit(request, done_for(index))
        finished.wait()
        return [r for r in results if r is not None]

    # -- the end -----------------------------------------------------------

    def close(self) -> None:
        """Lets the requests in flight finish, then ends the process."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            process, self._process = self._process, None
        if process is not None:
            process.close(self.close_timeout)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass
