"""Drives `agent-reach serve` over stdio with the official Python MCP SDK.

Each check prints one line; any failure exits 1 after printing what the server
said. Covers: tool list, a command, a server polled until its ready line with
wait_for, `cat` on a PTY ended with Ctrl-D, a password prompt answered after
awaiting_input, a kill, a patch, the metrics resource, and no process left after the client closes.
"""

import asyncio
import json
import os
import sys
import tempfile
import time

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from mcp_sdk import VERSION, call, field, is_error  # noqa: E402

FAILURES = []
PASSED = []


def check(name, ok, detail=""):
    print(("ok   " if ok else "FAIL ") + name + ("" if ok else f"\n     {detail}"))
    if not ok:
        FAILURES.append(name)
    else:
        PASSED.append(name)


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


async def main(binary):
    work = tempfile.mkdtemp(prefix="ar-mcp-")
    home = tempfile.mkdtemp(prefix="ar-mcp-home-")
    params = StdioServerParameters(
        command=binary,
        args=["serve", "--root", work],
        env={
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": home,
            "AGENT_REACH_HOME": os.path.join(home, "ar"),
            "SHELL": "/bin/bash",
            "AGENT_REACH_LOG": "warn",
        },
        cwd=work,
    )
    tag_prefix = None
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()

            tools = {t.name for t in (await session.list_tools()).tools}
            want = {"exec_command", "write_stdin", "list_sessions", "kill_session", "apply_patch"}
            check("list tools", want <= tools, f"got {sorted(tools)}")

            r, text, s = await call(session, "exec_command", {"cmd": "echo hello; echo $AGENT_REACH_SESSION"})
            lines = s.get("output", "").split("\n")
            check("a command", s.get("exit_code") == 0 and lines[0] == "hello"
                  and text.startswith("Wall time: ") and "Process exited with code 0" in text, text)
            tag = lines[1] if len(lines) > 1 else ""
            tag_prefix = "AGENT_REACH_SESSION=" + "-".join(tag.split("-")[:2]) + "-"

            r, text, s = await call(session, "exec_command", {
                "cmd": "echo compiling; sleep 1; echo compiling more; sleep 1; echo 'ready on port 4000'; sleep 600",
                "yield_time_ms": 250})
            sid = s.get("session_id")
            check("dev server starts as a session", s.get("state") == "running" and sid is not None, text)
            t0 = time.monotonic()
            seen = s.get("output", "")
            for _ in range(10):
                r, text, s = await call(session, "write_stdin", {"session_id": sid, "wait_for": "ready on port \\d+",
                                                                  "yield_time_ms": 30000})
                seen += s.get("output", "")
                if s.get("state") == "matched":
                    break
            check("polled until its ready line", s.get("state") == "matched" and "ready on port 4000" in seen
                  and time.monotonic() - t0 < 10, text)

            r, text, s = await call(session, "exec_command", {"cmd": "cat", "tty": True, "yield_time_ms": 5000})
            cat = s.get("session_id")
            check("cat on a pty waits for input", s.get("state") == "awaiting_input"
                  and "Process is waiting for input" in text, text)
            r, text, s = await call(session, "write_stdin", {"session_id": cat, "chars": "meow\n", "yield_time_ms": 1000})
            check("cat echoes what was typed", "meow" in s.get("output", ""), text)
            r, text, s = await call(session, "write_stdin", {"session_id": cat, "chars": "\u0004", "yield_time_ms": 5000})
            check("ctrl-d ends cat", s.get("state") == "exited" and s.get("exit_code") == 0, text)

            r, text, s = await call(session, "exec_command", {
                "cmd": "read -s -p 'Password: ' pw; echo; [ \"$pw\" = 'open sesame' ] && echo welcome || echo denied",
                "tty": True, "yield_time_ms": 20000})
            pw = s.get("session_id")
            check("password prompt is awaiting_input", s.get("state") == "awaiting_input"
                  and "Password:" in s.get("output", ""), text)
            r, text, s = await call(session, "write_stdin", {"session_id": pw, "chars": "open sesame\n",
                                                             "yield_time_ms": 5000})
            check("password answered", s.get("exit_code") == 0 and "welcome" in s.get("output", "")
                  and "open sesame" not in s.get("output", ""), text)

            r, text, s = await call(session, "list_sessions", {})
            ids = [row["session_id"] for row in s.get("sessions", [])]
            check("list_sessions shows the dev server", sid in ids, text)
            r, text, s = await call(session, "kill_session", {"session_id": sid})
            check("kill", not is_error(r) and f"session {sid} was killed" in text, text)
            r, text, s = await call(session, "write_stdin", {"session_id": sid})
            check("a killed session says what became of it", is_error(r) and f"session {sid} was killed" in text, text)

            patch = "*** Begin Patch\n*** Add File: notes.txt\n+patched\n*** End Patch\n"
            r, text, s = await call(session, "apply_patch", {"input": patch})
            try:
                with open(os.path.join(work, "notes.txt")) as f:
                    content = f.read()
            except OSError as e:
                content = f"({e})"
            check("a patch", not is_error(r) and "A notes.txt" in text and content == "patched\n", text)

            resources = (await session.list_resources()).resources
            uris = [str(r.uri) for r in resources]
            check("the metrics resource is listed", uris == ["agent-reach://metrics"], f"got {uris}")
            read = await session.read_resource("agent-reach://metrics")
            body = read.contents[0]
            metrics = json.loads(body.text)
            check("the metrics count the calls",
                  field(body, "mime_type") == "application/json"
                  and metrics["tools"]["exec_command"]["calls"] >= 3
                  and metrics["tools"]["apply_patch"]["successes"] == 1, body.text)

            await call(session, "exec_command", {"cmd": "setsid sleep 900 & sleep 901", "yield_time_ms": 250})
            check("sessions are running before close", len(tagged_pids(tag_prefix)) >= 2, tag_prefix)

    deadline = time.monotonic() + 15
    left = tagged_pids(tag_prefix)
    while left and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
        left = tagged_pids(tag_prefix)
    check("no process left after the client closes", not left, f"left: {sorted(left)}")
    path_root = os.path.join(home, "ar", "tmp", "path")
    dirs = os.listdir(path_root) if os.path.isdir(path_root) else []
    check("session PATH directory removed", not dirs, f"left: {dirs}")


async def approval_checks(binary):
    """A high-risk registry tool: the model's `approve` never counts; with an
    elicitation_callback the person is asked, and only an accept runs it."""
    import mcp.types as types

    work = tempfile.mkdtemp(prefix="ar-mcp-approve-")
    home = tempfile.mkdtemp(prefix="ar-mcp-approve-home-")
    marker = os.path.join(work, "deployed")
    config = os.path.join(work, "registry.toml")
    with open(config, "w") as f:
        f.write('[[tools]]\nname = "deploy"\ncommand = ["touch", "%s"]\ncwd = "project_root"\n'
                'risk = "high"\ndescription = "Deploy"\n' % marker)
    params = StdioServerParameters(
        command=binary,
        args=["serve", "--root", work, "--config", config],
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": home,
             "AGENT_REACH_HOME": os.path.join(home, "ar"), "AGENT_REACH_LOG": "warn"},
        cwd=work,
    )
    asked = []

    def person(action):
        async def callback(context, request):
            asked.append(request.message)
            if action == "accept":
                return types.ElicitResult(action="accept", content={"approve": True})
            return types.ElicitResult(action=action)
        return callback

    async def one(callback):
        async with stdio_client(params) as (read, write):
            kwargs = {} if callback is None else {"elicitation_callback": callback}
            async with ClientSession(read, write, **kwargs) as session:
                await session.initialize()
                tools = {t.name for t in (await session.list_tools()).tools}
                result, _, s = await call(session, "deploy", {"approve": True})
                return tools, result, s

    tools, result, s = await one(None)
    check("raw commands off in a config hide the shell tools",
          "exec_command" not in tools and "deploy" in tools, sorted(tools))
    check("the model's approve does not run a high-risk tool",
          is_error(result) and (s.get("error") or {}).get("kind") == "approval_required"
          and not os.path.exists(marker), json.dumps(s))
    _, result, s = await one(person("decline"))
    check("a declined elicitation does not run it",
          is_error(result) and len(asked) == 1 and not os.path.exists(marker), json.dumps(s))
    _, result, s = await one(person("accept"))
    check("an accepted elicitation runs it",
          not is_error(result) and s.get("status") == "success" and os.path.exists(marker)
          and "deploy" in asked[-1], json.dumps(s))


if __name__ == "__main__":
    binary = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "target/debug/agent-reach")
    print(f"== mcp {VERSION}")
    asyncio.run(main(binary))
    asyncio.run(approval_checks(binary))
    if FAILURES:
        print(f"failed checks: {', '.join(FAILURES)}")
    # The plain closing line CI reads, like every other test runner's.
    print(f"mcp-client: {len(PASSED)} passed, {len(FAILURES)} failed")
    sys.exit(1 if FAILURES else 0)
