"""Drives `agent-reach serve --listen mcp=...` with the published Python clients.

The server is started here on 127.0.0.1 (port 0, read back from its log) with
a token. Each check prints one line; any failure exits 1. Covers, with the
official `mcp` SDK's streamable HTTP client: no token and a wrong token are
401, the tool list, a command, quick calls on one kept connection, a dev server polled by session id with
wait_for, progress notifications while a poll waits, a dropped connection
losing nothing, a tty prompt answered, a patch, a second client that cannot see the
first one's session, and the first one's processes killed when its client
closes (HTTP DELETE); langchain-mcp-adapters with transport
"streamable_http" inside `client.session(...)`; the OpenAI Agents SDK's
MCPServerStreamableHttp list_tools/call_tool; and SIGTERM: exit 0, nothing
left running, the PATH directory removed.

Runs under the SDK's 1.x line and its 2.x line alike (tests/common/mcp_sdk.py
holds what differs between them); langchain-mcp-adapters and
the Agents SDK require mcp 1.x and are skipped, with a line saying so, when
`--sdk-only` is given (the 2.x venv).
"""

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

from mcp import ClientSession

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from mcp_sdk import VERSION, call, httpx, is_error, mcp_streams  # noqa: E402

TOKEN = "python-clients-token"
# The params of an `initialize` spoken raw.
INITIALIZE = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "1"}}
FAILURES = []
PASSED = []


def check(name, ok, detail=""):
    print(("ok   " if ok else "FAIL ") + name + ("" if ok else f"\n     {detail}"))
    (PASSED if ok else FAILURES).append(name)


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def tagged_pids(prefix):
    pids = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if any(v.startswith(prefix.encode()) for v in env):
            pids.add(int(entry))
    return pids


def closed_connections_to(port):
    """Client sockets in TIME_WAIT to `port` on loopback: one per connection
    a client closed (from /proc/net/tcp, state 06)."""
    count = 0
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            if int(fields[2].split(":")[1], 16) == port and fields[3] == "06":
                count += 1
    return count


async def wait_dead(pid, seconds):
    deadline = time.monotonic() + seconds
    while alive(pid) and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    return not alive(pid)


def http_client():
    return httpx.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"},
                             timeout=httpx.Timeout(30, read=300))


class Server:
    def __init__(self, binary):
        self.work = tempfile.mkdtemp(prefix="ar-mcp-http-")
        self.home = tempfile.mkdtemp(prefix="ar-mcp-http-home-")
        self.log = os.path.join(self.home, "serve.log")
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": self.home,
            "AGENT_REACH_HOME": os.path.join(self.home, "ar"),
            "AGENT_REACH_TOKEN": TOKEN,
            "SHELL": "/bin/bash",
        }
        self.proc = subprocess.Popen(
            [binary, "serve", "--root", self.work, "--log-file", self.log,
             "--listen", "mcp=127.0.0.1:0"],
            env=env, cwd=self.work, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.addr = self._wait_listening()
        self.url = f"http://{self.addr}/mcp"

    def _wait_listening(self):
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with open(self.log) as f:
                    for line in f:
                        fields = json.loads(line).get("fields", {})
                        if fields.get("message") == "listening":
                            return fields["addr"]
            except (OSError, ValueError):
                pass
            time.sleep(0.05)
        raise RuntimeError("the server did not listen within 30 s")


async def sdk_checks(server):
    async with httpx.AsyncClient() as anon:
        body = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": INITIALIZE}
        hdrs = {"Accept": "application/json, text/event-stream"}
        r = await anon.post(server.url, json=body, headers=hdrs)
        check("no token is 401 with WWW-Authenticate: Bearer",
              r.status_code == 401 and r.headers.get("www-authenticate") == "Bearer", r.status_code)
        r = await anon.post(server.url, json=body, headers={**hdrs, "Authorization": "Bearer wrong"})
        check("a wrong token is 401", r.status_code == 401, r.status_code)
        r = await anon.get(f"http://{server.addr}/healthz")
        check("healthz needs no token", r.status_code == 200 and r.json() == {"status": "ok"}, r.text)

    a_pid = None
    async with http_client() as http, mcp_streams(server.url, http) as (read, write):
        async with ClientSession(read, write) as a:
            await a.initialize()
            tools = {t.name for t in (await a.list_tools()).tools}
            want = {"exec_command", "write_stdin", "list_sessions", "kill_session", "apply_patch"}
            check("sdk: list tools", want <= tools, f"got {sorted(tools)}")

            r, text, s = await call(a, "exec_command", {"cmd": "echo hello"})
            check("sdk: a command", s.get("exit_code") == 0 and s.get("output") == "hello\n"
                  and "Process exited with code 0" in text, text)

            port = int(server.addr.rsplit(":", 1)[1])
            before = closed_connections_to(port)
            for _ in range(20):
                await call(a, "list_sessions", {})
            closed = closed_connections_to(port) - before
            check("sdk: quick calls keep the connection (JSON answers)", closed <= 2,
                  f"{closed} connections closed over 20 calls")

            r, text, s = await call(a, "exec_command", {
                "cmd": "echo compiling; sleep 1; echo 'ready on port 4000'; exec sleep 600",
                "yield_time_ms": 250})
            sid = s.get("session_id")
            seen = s.get("output", "")
            for _ in range(10):
                r, text, s = await call(a, "write_stdin", {"session_id": sid, "wait_for": "ready on port \\d+",
                                                           "yield_time_ms": 30000})
                seen += s.get("output", "")
                if s.get("state") == "matched":
                    break
            check("sdk: a dev server polled by session id with wait_for",
                  s.get("state") == "matched" and "ready on port 4000" in seen, text)

            r, text, s = await call(a, "exec_command", {
                "cmd": "sleep 5; echo late-line; exec sleep 600", "yield_time_ms": 100})
            slow = s.get("session_id")
            notes = []

            async def on_progress(done, total, message):
                notes.append((done, message))

            r, text, s = await call(a, "write_stdin", {"session_id": slow, "wait_for": "late-line",
                                                       "yield_time_ms": 30000}, progress=on_progress)
            check("sdk: progress notifications while a poll waits",
                  len(notes) >= 1 and s.get("state") == "matched", f"{notes} {text}")
            check("sdk: a client that drops a waiting call loses nothing",
                  await dropped_call_keeps_output(server), "the output after the drop was lost")

            r, text, s = await call(a, "exec_command", {
                "cmd": "read -p 'Name? ' n; echo \"hi $n\"", "tty": True, "yield_time_ms": 20000})
            pid_ = s.get("session_id")
            check("sdk: a tty prompt awaits input", s.get("state") == "awaiting_input"
                  and "Name?" in s.get("output", ""), text)
            r, text, s = await call(a, "write_stdin", {"session_id": pid_, "chars": "bob\n", "yield_time_ms": 5000})
            check("sdk: the prompt answered", s.get("exit_code") == 0 and "hi bob" in s.get("output", ""), text)

            patch = "*** Begin Patch\n*** Add File: notes.txt\n+patched\n*** End Patch\n"
            r, text, s = await call(a, "apply_patch", {"input": patch})
            try:
                with open(os.path.join(server.work, "notes.txt")) as f:
                    content = f.read()
            except OSError as e:
                content = f"({e})"
            check("sdk: a patch", not is_error(r) and "A notes.txt" in text and content == "patched\n", text)

            r, text, s = await call(a, "list_sessions", {})
            rows = [row for row in s.get("sessions", []) if row["session_id"] == sid]
            a_pid = rows[0]["pid"] if rows else None
            check("sdk: the dev server runs", a_pid is not None and alive(a_pid), text)

            async with http_client() as http_b, \
                    mcp_streams(server.url, http_b) as (read_b, write_b):
                async with ClientSession(read_b, write_b) as b:
                    await b.initialize()
                    r, text, s = await call(b, "list_sessions", {})
                    check("sdk: another client sees none of its sessions", s.get("sessions") == [], text)
                    r, text, s = await call(b, "kill_session", {"session_id": sid})
                    check("sdk: nor can it kill one", is_error(r) and f"no session {sid}" in text, text)
            check("sdk: the dev server outlived the other client", alive(a_pid))
    check("sdk: closing the client (DELETE) kills its processes",
          a_pid is not None and await wait_dead(a_pid, 15), f"pid {a_pid} still runs")


async def dropped_call_keeps_output(server):
    """A second MCP session, spoken raw: a process that prints after 3 s, a
    write_stdin waiting for the line whose connection is dropped after
    0.5 s, then a poll: the line is there."""
    hdrs = {"Authorization": f"Bearer {TOKEN}", "Accept": "application/json, text/event-stream"}

    def rpc(n, method, params):
        return {"jsonrpc": "2.0", "id": n, "method": method, "params": params}

    def result_of(response):
        body = response.text
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            body = next(line[5:] for line in body.splitlines() if line.startswith("data:") and '"id"' in line)
        return json.loads(body)["result"].get("structuredContent", {})

    async with httpx.AsyncClient(timeout=httpx.Timeout(30)) as raw:
        r = await raw.post(server.url, headers=hdrs, json=rpc(1, "initialize", INITIALIZE))
        hdrs["Mcp-Session-Id"] = r.headers["mcp-session-id"]
        await raw.post(server.url, headers=hdrs, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
        r = await raw.post(server.url, headers=hdrs, json=rpc(2, "tools/call", {"name": "exec_command", "arguments": {
            "cmd": "sleep 3; echo after-the-drop; exec sleep 600", "yield_time_ms": 100}}))
        sid = result_of(r).get("session_id")
    async with httpx.AsyncClient(timeout=httpx.Timeout(30, read=0.5)) as dropping:
        try:
            await dropping.post(server.url, headers=hdrs, json=rpc(3, "tools/call", {"name": "write_stdin", "arguments": {
                "session_id": sid, "wait_for": "after-the-drop", "yield_time_ms": 20000}}))
        except httpx.ReadTimeout:
            pass
    async with httpx.AsyncClient(timeout=httpx.Timeout(30)) as raw:
        r = await raw.post(server.url, headers=hdrs, json=rpc(4, "tools/call", {"name": "write_stdin", "arguments": {
            "session_id": sid, "wait_for": "after-the-drop", "yield_time_ms": 10000}}))
        polled = result_of(r)
        await raw.delete(server.url, headers=hdrs)
    return "after-the-drop" in polled.get("output", "")


async def langchain_checks(server):
    from langchain_mcp_adapters.client import MultiServerMCPClient
    from langchain_mcp_adapters.tools import load_mcp_tools

    client = MultiServerMCPClient({"reach": {
        "transport": "streamable_http", "url": server.url,
        "headers": {"Authorization": f"Bearer {TOKEN}"}}})
    async with client.session("reach") as session:
        tools = await load_mcp_tools(session)
        names = {t.name for t in tools}
        check("langchain: the tools load", "exec_command" in names, sorted(names))
        exec_command = next(t for t in tools if t.name == "exec_command")
        out = await exec_command.ainvoke({"cmd": "echo from-langchain"})
        check("langchain: a command", "from-langchain" in str(out), repr(out))


async def agents_checks(server):
    from agents.mcp import MCPServerStreamableHttp

    async with MCPServerStreamableHttp(
            params={"url": server.url, "headers": {"Authorization": f"Bearer {TOKEN}"}},
            client_session_timeout_seconds=30) as mcp_server:
        tools = await mcp_server.list_tools()
        names = {t.name for t in tools}
        check("openai-agents: list_tools", "exec_command" in names, sorted(names))
        result = await mcp_server.call_tool("exec_command", {"cmd": "echo from-agents"})
        text = "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")
        check("openai-agents: call_tool", not is_error(result) and "from-agents" in text, text)


async def main(binary, sdk_only):
    server = Server(binary)
    try:
        await sdk_checks(server)
        if sdk_only:
            print(f"(mcp {VERSION}: langchain-mcp-adapters and "
                  "openai-agents need mcp 1.x; their checks run in the 1.x venv)")
        else:
            await langchain_checks(server)
            await agents_checks(server)
        # A session left running, for the SIGTERM check.
        async with http_client() as http, mcp_streams(
                server.url, http, terminate_on_close=False) as (read, write):
            async with ClientSession(read, write) as s:
                await s.initialize()
                r, text, out = await call(s, "exec_command", {
                    "cmd": "echo $AGENT_REACH_SESSION; setsid sleep 900 & exec sleep 901", "yield_time_ms": 500})
                tag = out.get("output", "").split("\n")[0]
                prefix = "AGENT_REACH_SESSION=" + "-".join(tag.split("-")[:2]) + "-"
        check("a session is left running", len(tagged_pids(prefix)) >= 1, prefix)
        server.proc.send_signal(signal.SIGTERM)
        code = server.proc.wait(timeout=20)
        check("SIGTERM: exit 0", code == 0, code)
        deadline = time.monotonic() + 10
        left = tagged_pids(prefix)
        while left and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
            left = tagged_pids(prefix)
        check("SIGTERM: nothing left running", not left, f"left: {sorted(left)}")
        path_root = os.path.join(server.home, "ar", "tmp", "path")
        dirs = os.listdir(path_root) if os.path.isdir(path_root) else []
        check("SIGTERM: the PATH directory removed", not dirs, f"left: {dirs}")
    finally:
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait()


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--sdk-only"]
    binary = os.path.abspath(args[0] if args else "target/debug/agent-reach")
    print(f"== mcp {VERSION}")
    asyncio.run(main(binary, "--sdk-only" in sys.argv[1:]))
    if FAILURES:
        print(f"failed checks: {', '.join(FAILURES)}")
    print(f"mcp-http-clients: {len(PASSED)} passed, {len(FAILURES)} failed")
    sys.exit(1 if FAILURES else 0)
