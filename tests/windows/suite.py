"""The Windows test suite: agent-reach.exe under wine64, checked from Linux.

Run by tests/windows/run.sh (which builds the .exe and the shim DLL); every
test starts the real binary under Wine. Processes are checked from Linux's
/proc, where every Wine process shows its Windows .exe on its command line.
Prints one line per test and closes with 'N passed, N failed'.
"""

import http.client
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

EXE = sys.argv[1]
WINE = os.environ.get("WINE", "/usr/lib/wine/wine64")
WORK = tempfile.mkdtemp(prefix="agent-reach-windows-", dir=os.environ.get("WORK_ROOT"))
# One bound for every Wine start: a hung start fails its test, not the run.
CALL_TIMEOUT = 90


def wine(args, stdin=None, env=None, cwd=WORK, timeout=CALL_TIMEOUT):
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [WINE, EXE] + args,
        input=stdin,
        capture_output=True,
        cwd=cwd,
        env=full_env,
        timeout=timeout,
    )


def wine_processes(name):
    """Linux pids of Wine processes running program `name` (`ping.exe`):
    the first word of their command line, `C:\\...\\ping.exe` or `ping`."""
    want = name.lower().removesuffix(".exe")
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        words = cmdline.split()
        if not words:
            continue
        program = words[0].replace("\\", "/").rsplit("/", 1)[-1].lower().removesuffix(".exe")
        if program == want:
            found.append(int(pid))
    return found


def wait_for(predicate, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return predicate()


def text(completed_stream):
    return completed_stream.decode("utf-8", "replace")


def check(condition, message):
    if not condition:
        raise AssertionError(message)


# ---- the tests -------------------------------------------------------------


def test_run_passes_the_exit_code_and_stdout_through():
    done = wine(["run", "--", "cmd", "/c", "echo hello& exit 3"])
    check(done.returncode == 3, f"exit {done.returncode}, stderr {done.stderr!r}")
    check(text(done.stdout) == "hello\n", f"stdout {done.stdout!r}")


def test_a_missing_command_is_127():
    done = wine(["run", "--", "no-such-program-here"])
    check(done.returncode == 127, f"exit {done.returncode}, stderr {done.stderr!r}")


def test_the_timeout_is_124_and_ends_the_whole_tree():
    check(not wine_processes("ping.exe"), "a ping.exe was running before the test")
    proc = subprocess.Popen(
        [WINE, EXE, "run", "--timeout-ms", "20000", "--", "cmd", "/c",
         "start /b ping -n 300 127.0.0.1 >NUL & ping -n 300 127.0.0.1 >NUL"],
        cwd=WORK, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        both = wait_for(lambda: len(wine_processes("ping.exe")) >= 2, 18)
        out, err = proc.communicate(timeout=CALL_TIMEOUT)
    finally:
        proc.kill()
    check(both, "the two ping.exe of the tree never showed in /proc")
    check(proc.returncode == 124, f"exit {proc.returncode}, stderr {err!r}")
    check(wait_for(lambda: not wine_processes("ping.exe"), 5),
          f"ping.exe left after the timeout: {wine_processes('ping.exe')}")


def test_long_output_is_folded_head_and_tail():
    done = wine(["run", "--timeout-ms", "80000", "--max-output-tokens", "200", "--",
                 "cmd", "/c", "for /l %i in (1,1,3000) do @echo line %i"])
    out = text(done.stdout)
    check(done.returncode == 0, f"exit {done.returncode}")
    check(out.startswith("line 1\n"), f"head missing: {out[:80]!r}")
    check("line 3000" in out, f"tail missing: {out[-80:]!r}")
    check("omitted" in out and "line 1500\n" not in out, "not folded")
    check(len(out) < 3000, f"{len(out)} bytes shown for a 200-token budget")


def test_gbk_output_comes_back_as_utf8():
    with open(os.path.join(WORK, "gbk.txt"), "wb") as f:
        f.write("中文 GBK\r\n".encode("gbk"))
    # Wine takes the ANSI code page (936) from the Linux locale.
    done = wine(["run", "--", "cmd", "/c", "type", "gbk.txt"],
                env={"LANG": "zh_CN.UTF-8", "LC_ALL": "zh_CN.UTF-8"})
    check(done.returncode == 0, f"exit {done.returncode}")
    check(text(done.stdout) == "中文 GBK\n", f"stdout {done.stdout!r}")
    check("code page 936" in text(done.stderr), f"stderr {done.stderr!r}")


def test_apply_patch_keeps_a_crlf_file_crlf():
    target = os.path.join(WORK, "crlf.txt")
    with open(target, "wb") as f:
        f.write(b"alpha\r\nbeta\r\ngamma\r\n")
    patch = ("*** Begin Patch\n*** Update File: crlf.txt\n@@\n alpha\n-beta\n+BETA\n"
             " gamma\n*** End Patch\n")
    done = wine(["apply-patch"], stdin=patch.encode())
    check(done.returncode == 0, f"exit {done.returncode}, {done.stdout!r} {done.stderr!r}")
    with open(target, "rb") as f:
        body = f.read()
    check(body == b"alpha\r\nBETA\r\ngamma\r\n", f"file now {body!r}")


def test_exec_json_runs_one_request():
    request = {"id": 7, "command": ["cmd", "/c", "echo hi"]}
    done = wine(["exec", "--json"], stdin=json.dumps(request).encode())
    result = json.loads(done.stdout)
    check(done.returncode == 0, f"exit {done.returncode}: {result}")
    check(result["status"] == "success" and result["stdout"] == "hi\n", str(result))
    check(result["id"] == 7, str(result))


def test_exec_runs_registry_tools_under_the_policy():
    project = tempfile.mkdtemp(prefix="tool-requests-", dir=WORK)
    os.makedirs(os.path.join(project, "src"))
    with open(os.path.join(project, "src", "a.txt"), "w") as f:
        f.write("in src")
    config = os.path.join(project, "agent-reach.toml")
    with open(config, "wb") as f:
        f.write(b'[[tools]]\r\nname = "show"\r\ncommand = ["cmd", "/c", "type", "{path}"]\r\n'
                b'cwd = "project_root"\r\nrisk = "low"\r\ndescription = "Print a file"\r\n'
                b'params = [{ name = "path", type = "path", required = true }]\r\n'
                b'\r\n[[tools]]\r\nname = "wipe"\r\ncommand = ["cmd", "/c", "echo", "wiped"]\r\n'
                b'cwd = "project_root"\r\nrisk = "high"\r\ndescription = "Pretend"\r\n'
                b'\r\n[[tools]]\r\nname = "token"\r\ncommand = ["cmd", "/c", "echo %TOKEN%"]\r\n'
                b'cwd = "project_root"\r\nrisk = "low"\r\ndescription = "Leak"\r\n'
                b'secrets = ["TOKEN"]\r\n')
    flags = ["exec", "--jsonl", "--config", config, "--root", project]
    lines = [
        {"id": "show", "tool": "show", "args": {"path": "src\\a.txt"}},
        {"id": "outside", "tool": "show", "args": {"path": "..\\x.txt"}},
        {"id": "risky", "tool": "wipe"},
        {"id": "approved", "tool": "wipe", "approve": True},
        {"id": "secret", "tool": "token"},
        {"id": "nope", "tool": "nope"},
        {"id": "raw", "command": ["cmd", "/c", "echo raw"]},
        # cmd would read `&` as its own: a value holding it is refused.
        {"id": "inject", "tool": "show", "args": {"path": "src\\a.txt&echo pwned"}},
    ]
    done = wine(flags, stdin="".join(json.dumps(line) + "\n" for line in lines).encode(),
                env={"TOKEN": "s3cr3t-value"})
    check(done.returncode == 0, f"exit {done.returncode}, stderr {done.stderr!r}")
    by_id = {r.get("id"): r for r in map(json.loads, done.stdout.decode().splitlines())}
    check(len(by_id) == len(lines), str(by_id))
    show = by_id["show"]
    check(show["status"] == "success" and show["stdout"] == "in src" and show["tool"] == "show",
          str(show))
    check(by_id["outside"]["error"]["kind"] == "invalid_params", str(by_id["outside"]))
    check(by_id["risky"]["error"]["kind"] == "approval_required", str(by_id["risky"]))
    check(by_id["approved"]["status"] == "success" and by_id["approved"]["stdout"] == "wiped\n",
          str(by_id["approved"]))
    secret = by_id["secret"]
    check(secret["status"] == "success" and "s3cr3t-value" not in secret["stdout"]
          and "[REDACTED:TOKEN]" in secret["stdout"], str(secret))
    check(by_id["nope"]["error"]["kind"] == "unknown_tool", str(by_id["nope"]))
    check(by_id["raw"]["error"]["kind"] == "raw_commands_disabled", str(by_id["raw"]))
    inject = by_id["inject"]
    check(inject["status"] == "rejected" and inject["error"]["kind"] == "invalid_params"
          and "cmd.exe" in inject["error"]["message"] and "pwned" not in inject.get("stdout", ""),
          str(inject))
    # The built-in registry allows raw commands: they run in the root, and
    # a workdir must lie beneath it.
    # A bare program name is never taken from the project: its own
    # hostname.cmd does not stand in for Windows' hostname.exe.
    with open(os.path.join(project, "hostname.cmd"), "w") as f:
        f.write("@echo hijacked\r\n")
    lines = [
        {"id": "hostname", "command": ["hostname"]},
        {"id": "here", "command": ["cmd", "/c", "cd"]},
        {"id": "src", "command": ["cmd", "/c", "cd"], "workdir": "src"},
        {"id": "out", "command": ["cmd", "/c", "cd"], "workdir": ".."},
    ]
    done = wine(["exec", "--jsonl", "--root", project],
                stdin="".join(json.dumps(line) + "\n" for line in lines).encode())
    by_id = {r.get("id"): r for r in map(json.loads, done.stdout.decode().splitlines())}
    check(by_id["here"]["stdout"].strip().lower().endswith(os.path.basename(project).lower()),
          str(by_id["here"]))
    check(by_id["src"]["stdout"].strip().lower().endswith("\\src"), str(by_id["src"]))
    check(by_id["out"]["error"]["kind"] == "invalid_workdir", str(by_id["out"]))
    check(by_id["hostname"]["status"] == "success"
          and "hijacked" not in by_id["hostname"]["stdout"], str(by_id["hostname"]))
    # A config that does not load is 125, a missing one 2 (as on Linux).
    bad = os.path.join(project, "bad.toml")
    with open(bad, "w") as f:
        f.write('[[tools]]\nname = "x"\ncommand = ["a"]\n')
    done = wine(["exec", "--json", "--config", bad], stdin=b"{}")
    check(done.returncode == 125, f"a bad config: exit {done.returncode}")
    done = wine(["exec", "--json", "--config", os.path.join(project, "missing.toml")], stdin=b"{}")
    check(done.returncode == 2, f"a missing config: exit {done.returncode}")


def test_exec_jsonl_answers_each_line_as_it_finishes():
    lines = [
        json.dumps({"id": "slow", "command": ["ping", "-n", "4", "127.0.0.1"]}),
        json.dumps({"id": "fast", "command": ["cmd", "/c", "echo fast"]}),
        "",
        "{not json",
        json.dumps({"id": "boxed", "command": ["cmd", "/c", "echo ran"], "sandbox": "read-only"}),
    ]
    done = wine(["exec", "--jsonl"], stdin=("\n".join(lines) + "\n").encode())
    check(done.returncode == 0, f"exit {done.returncode}, stderr {done.stderr!r}")
    results = [json.loads(line) for line in done.stdout.decode().splitlines()]
    ids = [r.get("id") for r in results]
    check(len(results) == 4 and ids.index("fast") < ids.index("slow"), str(results))
    by_id = {r.get("id"): r for r in results}
    check(by_id["fast"]["status"] == "success" and by_id["fast"]["stdout"] == "fast\n",
          str(by_id["fast"]))
    check(by_id["slow"]["status"] == "success", str(by_id["slow"]))
    check(by_id["boxed"]["status"] == "rejected", str(by_id["boxed"]))
    check(by_id[None]["error"]["kind"] == "malformed_request", str(by_id[None]))


def test_the_sandbox_is_refused_not_skipped():
    sandbox = os.path.join(os.path.dirname(EXE), "agent-reach-sandbox.exe")
    done = subprocess.run([WINE, sandbox, "--", "cmd", "/c", "echo ran"],
                          capture_output=True, cwd=WORK, timeout=CALL_TIMEOUT)
    check(done.returncode == 125, f"agent-reach-sandbox exit {done.returncode}")
    check(b"no sandbox on Windows" in done.stderr, f"stderr {done.stderr!r}")
    check(b"ran" not in done.stdout, "the command ran")
    done = wine(["run", "--sandbox", "workspace-write", "--", "cmd", "/c", "echo ran"])
    check(done.returncode == 125 and b"ran" not in done.stdout, f"run exit {done.returncode}")
    request = {"command": ["cmd", "/c", "echo ran"], "sandbox": "read-only"}
    done = wine(["exec", "--json"], stdin=json.dumps(request).encode())
    result = json.loads(done.stdout)
    check(result["status"] == "rejected" and "no sandbox on Windows" in result["error"]["message"],
          str(result))
    done = wine(["run", "--sandbox", "danger-full-access", "--", "cmd", "/c", "echo ran"])
    check(done.returncode == 0 and text(done.stdout) == "ran\n", "danger-full-access did not run")


class Mcp:
    """A stdio MCP client: one JSON-RPC message per line. `person`, when
    given, is the person behind the client: the client declares form
    elicitation, and each question (its message) gets person(message)'s
    answer, "accept" or "decline"; `asked` keeps the questions."""

    def __init__(self, flags=(), person=None):
        self.proc = subprocess.Popen(
            [WINE, EXE, "serve", *flags], cwd=WORK,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        self.next_id = 1
        self.person = person
        self.asked = []
        capabilities = {"elicitation": {"form": {}}} if person else {}
        self.call("initialize", {
            "protocolVersion": "2025-06-18", "capabilities": capabilities,
            "clientInfo": {"name": "windows-suite", "version": "1"},
        })
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message):
        self.proc.stdin.write((json.dumps(message) + "\n").encode())
        self.proc.stdin.flush()

    def call(self, method, params):
        request_id = self.next_id
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise AssertionError(f"the server closed stdout: {self.proc.stderr.read()!r}")
            message = json.loads(line)
            if message.get("method") == "elicitation/create" and self.person:
                question = message["params"]["message"]
                self.asked.append(question)
                action = self.person(question)
                answer = {"action": action}
                if action == "accept":
                    answer["content"] = {"approve": True}
                self.send({"jsonrpc": "2.0", "id": message["id"], "result": answer})
                continue
            if message.get("id") == request_id and "method" not in message:
                if "error" in message:
                    raise AssertionError(f"{method}: {message['error']}")
                return message["result"]

    def tool(self, name, **arguments):
        result = self.call("tools/call", {"name": name, "arguments": arguments})
        return result.get("isError", False), result["content"][0]["text"]

    def close(self):
        self.proc.stdin.close()
        try:
            return self.proc.wait(timeout=30)
        finally:
            self.proc.kill()


def with_mcp(body, flags=(), person=None):
    client = Mcp(flags, person)
    try:
        body(client)
    finally:
        code = client.close()
    check(code == 0, f"serve exited {code} at stdin EOF")


def test_mcp_lists_the_tools_and_runs_a_command():
    def body(mcp):
        names = [t["name"] for t in mcp.call("tools/list", {})["tools"]]
        check(names[:5] == ["exec_command", "write_stdin", "list_sessions", "kill_session",
                            "apply_patch"], str(names))
        error, reply = mcp.tool("exec_command", cmd="echo from mcp")
        check(not error and "Process exited with code 0" in reply
              and "from mcp" in reply, reply)
        # The built-in registry's file tools, Windows' own programs.
        check({"list_files", "read_file", "search_files"} <= set(names), str(names))
        result = mcp.call("tools/call", {"name": "read_file",
                                         "arguments": {"path": "builtin\\note.txt"}})
        check(result["structuredContent"]["stdout"] == "needle in a haystack\n", str(result))
        result = mcp.call("tools/call", {"name": "search_files",
                                         "arguments": {"pattern": "NEEDLE", "path": "builtin",
                                                       "ignore_case": True}})
        # Wine 8's findstr is a stub that finds nothing (see LIMIT below):
        # the call is checked to run, its matches on a real Windows only.
        found = result["structuredContent"]
        check(found["status"] == "success" and found["tool"] == "search_files", str(result))
        result = mcp.call("tools/call", {"name": "list_files", "arguments": {"path": "builtin"}})
        check("note.txt" in result["structuredContent"]["stdout"], str(result))
        result = mcp.call("tools/call", {"name": "read_file", "arguments": {"path": "a&b.txt"}})
        check(result["structuredContent"]["error"]["kind"] == "invalid_params", str(result))
    os.makedirs(os.path.join(WORK, "builtin"), exist_ok=True)
    with open(os.path.join(WORK, "builtin", "note.txt"), "wb") as f:
        f.write(b"needle in a haystack\r\n")
    with_mcp(body)


def test_mcp_kill_session_ends_the_tree_and_eof_ends_the_rest():
    def body(mcp):
        error, reply = mcp.tool("exec_command", cmd="ping -n 300 127.0.0.1",
                                yield_time_ms=1000)
        check(not error and "Process running with session ID" in reply, reply)
        session = int(reply.split("session ID ")[1].split()[0])
        check(wait_for(lambda: wine_processes("ping.exe"), 10), "ping.exe never started")
        error, reply = mcp.tool("kill_session", session_id=session)
        check(not error and "killed" in reply, reply)
        check(wait_for(lambda: not wine_processes("ping.exe"), 5),
              f"ping.exe left after kill_session: {wine_processes('ping.exe')}")
        # A second session, left running: stdin EOF must end it.
        error, reply = mcp.tool("exec_command", cmd="ping -n 300 127.0.0.1",
                                yield_time_ms=1000)
        check("session ID" in reply, reply)
        check(wait_for(lambda: wine_processes("ping.exe"), 10), "ping.exe never started")
    with_mcp(body)
    check(wait_for(lambda: not wine_processes("ping.exe"), 10),
          f"ping.exe left after the server's end: {wine_processes('ping.exe')}")


def test_mcp_sessions_take_input_and_refuse_sandboxes():
    def body(mcp):
        error, reply = mcp.tool("exec_command", cmd="set /p name=& echo got %name%",
                                shell="cmd", yield_time_ms=1000)
        check("session ID" in reply, reply)
        session = int(reply.split("session ID ")[1].split()[0])
        error, reply = mcp.tool("write_stdin", session_id=session, chars="wine\r\n",
                                yield_time_ms=5000)
        check("got wine" in reply and "exited with code 0" in reply, reply)
        error, reply = mcp.tool("exec_command", cmd="echo ran", sandbox="read-only")
        check(error and "no sandbox on Windows" in reply, reply)
    with_mcp(body)


WINE_TTY = "no pseudo console here (Wine's pseudo console does not carry a command's output)"


def test_a_tty_under_wine_runs_on_pipes_and_every_door_says_why():
    done = wine(["run", "--tty", "--", "cmd", "/c", "echo on pipes"])
    check(done.returncode == 0 and text(done.stdout) == "on pipes\n",
          f"exit {done.returncode}, stdout {done.stdout!r}")
    check(WINE_TTY in text(done.stderr), f"stderr {done.stderr!r}")
    request = {"command": ["cmd", "/c", "echo on pipes"], "tty": True}
    done = wine(["exec", "--json"], stdin=json.dumps(request).encode())
    result = json.loads(done.stdout)
    check(result["status"] == "success" and result["stdout"] == "on pipes\n"
          and WINE_TTY in result["stderr"], str(result))
    done = wine(["doctor"])
    check("no    tty: Wine's pseudo console" in text(done.stdout), f"doctor: {done.stdout!r}")

    def body(mcp):
        error, reply = mcp.tool("exec_command", cmd="echo on pipes", shell="cmd", tty=True)
        check(not error and f"Note: tty: {WINE_TTY}" in reply and "on pipes" in reply
              and "exited with code 0" in reply, reply)
    with_mcp(body)


def test_the_session_path_entry_has_the_names_and_shims():
    def body(mcp):
        error, reply = mcp.tool("exec_command", cmd="echo %PATH%", shell="cmd")
        first = reply.split("Output:\n", 1)[1].split(";")[0].strip()
        error, listing = mcp.tool("exec_command", cmd=f'dir /b "{first}"', shell="cmd")
        for name in ["apply_patch.exe", "applypatch.exe", "agent-reach-exec.exe",
                     "apply_patch.cmd", "applypatch.cmd", "agent-reach-exec.cmd",
                     "agent-reach-sandbox.exe"]:
            check(name in listing, f"{name} not in {first}: {listing}")
        with open(os.path.join(WORK, "viapath.txt"), "wb") as f:
            f.write(b"one\r\ntwo\r\n")
        patch = "*** Begin Patch\n*** Update File: viapath.txt\n@@\n-two\n+TWO\n*** End Patch\n"
        with open(os.path.join(WORK, "p.patch"), "w") as f:
            f.write(patch)
        for name in ["applypatch.exe", "apply_patch"]:
            error, reply = mcp.tool("exec_command", cmd=f"{name} --help", shell="cmd")
            check("usage: apply_patch" in reply and "code 0" in reply, f"{name}: {reply}")
        error, reply = mcp.tool("exec_command", cmd="apply_patch < p.patch", shell="cmd")
        check("Success." in reply, reply)
        error, reply = mcp.tool("exec_command", cmd="agent-reach-exec -- cmd /c exit 4",
                                shell="cmd")
        check("exited with code 4" in reply, reply)
    with_mcp(body)
    with open(os.path.join(WORK, "viapath.txt"), "rb") as f:
        body_bytes = f.read()
    check(body_bytes == b"one\r\nTWO\r\n", f"viapath.txt now {body_bytes!r}")


def test_mcp_apply_patch_tool_keeps_crlf():
    target = os.path.join(WORK, "tool.txt")
    with open(target, "wb") as f:
        f.write(b"x\r\ny\r\n")

    def body(mcp):
        error, reply = mcp.tool("apply_patch", input=(
            "*** Begin Patch\n*** Update File: tool.txt\n@@\n x\n-y\n+Y\n*** End Patch\n"))
        check(not error and "M tool.txt" in reply, reply)
    with_mcp(body)
    with open(target, "rb") as f:
        check(f.read() == b"x\r\nY\r\n", "tool.txt lost its CRLF")


def test_mcp_serves_registry_tools_and_a_person_approves():
    project = tempfile.mkdtemp(prefix="mcp-tools-", dir=WORK)
    os.makedirs(os.path.join(project, "src"))
    with open(os.path.join(project, "src", "a.txt"), "w") as f:
        f.write("in src")
    config = os.path.join(project, "agent-reach.toml")
    with open(config, "wb") as f:
        f.write(b'[[tools]]\r\nname = "show"\r\ncommand = ["cmd", "/c", "type", "{path}"]\r\n'
                b'cwd = "project_root"\r\nrisk = "low"\r\ndescription = "Print a file"\r\n'
                b'params = [{ name = "path", type = "path", required = true }]\r\n'
                b'\r\n[[tools]]\r\nname = "wipe"\r\ncommand = ["cmd", "/c", "echo", "wiped"]\r\n'
                b'cwd = "project_root"\r\nrisk = "high"\r\ndescription = "Pretend"\r\n')
    flags = ["--config", config, "--root", project]

    def unasked(mcp):
        tools = {t["name"]: t for t in mcp.call("tools/list", {})["tools"]}
        # Raw commands are off in an operator's file: the built-ins are gone.
        check(sorted(tools) == ["show", "wipe"], str(sorted(tools)))
        check(tools["show"]["inputSchema"]["required"] == ["path"]
              and "approve" in tools["show"]["inputSchema"]["properties"], str(tools["show"]))
        result = mcp.call("tools/call", {"name": "show", "arguments": {"path": "src\\a.txt"}})
        shown = result["structuredContent"]
        check(not result.get("isError") and shown["status"] == "success"
              and shown["stdout"] == "in src" and shown["tool"] == "show", str(result))
        result = mcp.call("tools/call", {"name": "show", "arguments": {"path": "..\\x.txt"}})
        check(result.get("isError") and result["structuredContent"]["error"]["kind"]
              == "invalid_params", str(result))
        # The model's own approve never counts, and no person can be asked.
        result = mcp.call("tools/call", {"name": "wipe", "arguments": {"approve": True}})
        check(result.get("isError") and result["structuredContent"]["error"]["kind"]
              == "approval_required", str(result))
        error, reply = mcp.tool("exec_command", cmd="echo raw")
        check(error and "raw_commands_disabled" in reply and "raw\n" not in reply, reply)
    with_mcp(unasked, flags)

    def accepting(mcp):
        result = mcp.call("tools/call", {"name": "wipe", "arguments": {}})
        check(not result.get("isError") and result["structuredContent"]["stdout"] == "wiped\n",
              str(result))
        check(len(mcp.asked) == 1 and "tool wipe" in mcp.asked[0] and "high" in mcp.asked[0],
              str(mcp.asked))
    with_mcp(accepting, flags, person=lambda question: "accept")

    def declining(mcp):
        result = mcp.call("tools/call", {"name": "wipe", "arguments": {}})
        check(result.get("isError") and "declined" in result["structuredContent"]["error"]["message"],
              str(result))
    with_mcp(declining, flags, person=lambda question: "decline")


def test_a_policy_sandbox_is_refused_at_every_door():
    project = tempfile.mkdtemp(prefix="boxed-", dir=WORK)
    config = os.path.join(project, "agent-reach.toml")
    with open(config, "w") as f:
        f.write('allow_raw_commands = true\n\n[sandbox]\ndefault = "workspace-write"\n')
    flags = ["--config", config, "--root", project]
    request = {"command": ["cmd", "/c", "echo ran"]}
    done = wine(["exec", "--json", *flags], stdin=json.dumps(request).encode())
    result = json.loads(done.stdout)
    check(result["status"] == "rejected" and "no sandbox on Windows" in result["error"]["message"]
          and "workspace-write" in result["error"]["message"], str(result))

    def body(mcp):
        error, reply = mcp.tool("exec_command", cmd="echo ran")
        check(error and "no sandbox on Windows" in reply and "ran\n" not in reply, reply)
        error, reply = mcp.tool("apply_patch", input=(
            "*** Begin Patch\n*** Add File: boxed.txt\n+x\n*** End Patch\n"))
        check(error and "no sandbox on Windows" in reply, reply)
        check(not os.path.exists(os.path.join(project, "boxed.txt")), "apply_patch wrote")
    with_mcp(body, flags)
    done = wine(["serve", *flags, "--sandbox", "read-only"], stdin=b"")
    check(done.returncode == 125 and b"no sandbox on Windows" in done.stderr,
          f"serve --sandbox read-only: exit {done.returncode}, {done.stderr!r}")

    # The operator's explicit danger-full-access replaces the default.
    def unconfined(mcp):
        error, reply = mcp.tool("exec_command", cmd="echo ran")
        check(not error and "ran" in reply, reply)
    with_mcp(unconfined, [*flags, "--sandbox", "danger-full-access"])


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def http_call(port, method, path, body=None, headers=None):
    """One HTTP request to the listener on loopback: (status, headers, body)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=CALL_TIMEOUT)
    try:
        data = None if body is None else json.dumps(body).encode()
        connection.request(method, path, body=data, headers=headers or {})
        response = connection.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        connection.close()


def test_mcp_over_http_behind_the_gate():
    port = free_port()
    env = dict(os.environ, AGENT_REACH_TOKEN="t0ken-for-http")
    server = subprocess.Popen([WINE, EXE, "serve", "--listen", f"mcp=127.0.0.1:{port}"],
                              cwd=WORK, env=env, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = b""
        deadline = time.monotonic() + CALL_TIMEOUT
        while b"MCP at http://" not in line and time.monotonic() < deadline:
            line = server.stderr.readline()
            check(line or server.poll() is None, f"serve ended: exit {server.poll()}")
        check(f"127.0.0.1:{port}/mcp".encode() in line, f"serve said {line!r}")
        json_headers = {"Content-Type": "application/json",
                        "Accept": "application/json, text/event-stream"}
        token = {"Authorization": "Bearer t0ken-for-http"}
        hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "windows-suite", "version": "1"}}}
        status, _, body = http_call(port, "GET", "/healthz")
        check(status == 200 and b"ok" in body, f"healthz: {status} {body!r}")
        # The gate, as an attacker meets it.
        status, _, _ = http_call(port, "POST", "/mcp", hello, json_headers)
        check(status == 401, f"no token: {status}")
        status, _, _ = http_call(port, "POST", "/mcp", hello, {**json_headers, **token,
                                                              "Host": "evil.example"})
        check(status == 403, f"a foreign Host: {status}")
        status, _, _ = http_call(port, "POST", "/mcp", hello, {
            **json_headers, **token, "Origin": "http://evil.example"})
        check(status == 403, f"a foreign Origin: {status}")
        status, _, _ = http_call(port, "POST", "/mcp", hello, {
            **json_headers, **token, "Content-Type": "text/plain"})
        check(status == 415, f"text/plain: {status}")
        # A client: its session, a command, a session killed with it.
        status, headers, body = http_call(port, "POST", "/mcp", hello, {**json_headers, **token})
        session = {k.lower(): v for k, v in headers.items()}.get("mcp-session-id")
        check(status == 200 and session, f"initialize: {status} {headers} {body!r}")
        client = {**json_headers, **token, "Mcp-Session-Id": session}
        status, _, _ = http_call(port, "POST", "/mcp", {
            "jsonrpc": "2.0", "method": "notifications/initialized"}, client)
        check(status == 202, f"initialized: {status}")

        def tool(request_id, name, **arguments):
            status, _, body = http_call(port, "POST", "/mcp", {
                "jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                "params": {"name": name, "arguments": arguments}}, client)
            check(status == 200, f"{name}: {status} {body!r}")
            # One JSON body, or (an answer slower than a second) an SSE stream.
            messages = [json.loads(body)] if body.startswith(b"{") else [
                json.loads(line[5:]) for line in body.decode().splitlines()
                if line.startswith("data:") and line[5:].strip()]
            answer = [m for m in messages if m.get("id") == request_id]
            check(answer, f"{name}: no answer in {body[:300]!r}")
            return answer[0]["result"]["content"][0]["text"]
        reply = tool(2, "exec_command", cmd="echo over http [%AGENT_REACH_TOKEN%]")
        check("Process exited with code 0" in reply and "over http" in reply, reply)
        # The listeners' token is the server's, not its commands'.
        check("t0ken-for-http" not in reply, f"a command read the token: {reply}")
        reply = tool(3, "exec_command", cmd="ping -n 300 127.0.0.1", yield_time_ms=1000)
        check("session ID" in reply, reply)
        check(wait_for(lambda: wine_processes("ping.exe"), 10), "ping.exe never started")
        status, _, _ = http_call(port, "DELETE", "/mcp", None, client)
        check(status == 200, f"DELETE: {status}")
        check(wait_for(lambda: not wine_processes("ping.exe"), 10),
              f"ping.exe left after the client's session ended: {wine_processes('ping.exe')}")
    finally:
        server.kill()
        server.wait(timeout=30)
    # What Windows cannot serve is said, not half-served.
    done = wine(["serve", "--listen", f"envd=127.0.0.1:{port}"])
    check(done.returncode == 2 and b"not available on Windows" in done.stderr,
          f"envd: exit {done.returncode}, {done.stderr!r}")
    token_file = os.path.join(WORK, "token")
    with open(token_file, "w") as f:
        f.write("t\n")
    done = wine(["serve", "--listen", f"mcp=127.0.0.1:{port}", "--token-file", token_file])
    check(done.returncode == 2 and b"AGENT_REACH_TOKEN" in done.stderr,
          f"--token-file: exit {done.returncode}, {done.stderr!r}")
    done = wine(["serve", "--listen", f"mcp=:{port}"], env={"AGENT_REACH_TOKEN": ""})
    check(done.returncode == 2 and b"--no-auth" in done.stderr,
          f"every interface without a token: exit {done.returncode}, {done.stderr!r}")


def test_limits_cap_what_callers_ask():
    project = tempfile.mkdtemp(prefix="limits-", dir=WORK)
    config = os.path.join(project, "agent-reach.toml")
    with open(config, "w") as f:
        f.write('allow_raw_commands = true\n\n[limits]\nmax_timeout_ms = 60000\n'
                'max_output_tokens = 2000\n')
    flags = ["--config", config, "--root", project]
    request = {"command": ["cmd", "/c", "echo capped"], "timeout_ms": 3600000,
               "max_output_tokens": 100000}
    done = wine(["exec", "--json", *flags], stdin=json.dumps(request).encode())
    result = json.loads(done.stdout)
    check(result["status"] == "success"
          and sorted(result["capped"]) == ["max_output_tokens", "max_timeout_ms"], str(result))

    def body(mcp):
        error, reply = mcp.tool("exec_command", cmd="echo capped", max_output_tokens=100000)
        check(not error and "Capped: max_output_tokens (asked 100000, limit 2000)" in reply, reply)
    with_mcp(body, flags)


def test_tools_inspects_a_registry_with_windows_paths():
    project = tempfile.mkdtemp(prefix="tools-", dir=WORK)
    os.makedirs(os.path.join(project, "src"))
    config = os.path.join(project, "agent-reach.toml")
    # CRLF line ends, as a Windows editor saves them.
    with open(config, "wb") as f:
        f.write(b'max_risk = "medium"\r\n\r\n[[tools]]\r\nname = "dir_src"\r\n'
                b'command = ["cmd", "/c", "dir", "{path}"]\r\ncwd = "project_root"\r\n'
                b'risk = "low"\r\ndescription = "List a directory"\r\n'
                b'params = [{ name = "path", type = "path", required = true }]\r\n'
                b'\r\n[[tools]]\r\nname = "wipe"\r\ncommand = ["cmd", "/c", "rd"]\r\n'
                b'cwd = "project_root"\r\nrisk = "high"\r\ndescription = "Remove"\r\n')
    done = wine(["tools", "check", config])
    check(done.returncode == 0 and "2 tools" in text(done.stdout),
          f"check: exit {done.returncode}, {done.stdout!r} {done.stderr!r}")
    done = wine(["tools", "--config", config, "--root", project, "list"])
    out = text(done.stdout)
    check(done.returncode == 0 and "dir_src" in out and "wipe" in out,
          f"list: exit {done.returncode}, {out!r} {done.stderr!r}")
    done = wine(["tools", "--config", config, "--root", project, "schema"])
    schema = json.loads(done.stdout)
    names = [t.get("name") or t.get("function", {}).get("name") for t in schema]
    check(done.returncode == 0 and "dir_src" in names and "wipe" not in names,
          f"schema: {names} (wipe is above max_risk)")
    bad = os.path.join(project, "bad.toml")
    with open(bad, "wb") as f:
        f.write(b'[[tools]]\r\nname = "x"\r\ncommand = ["a"]\r\n')
    done = wine(["tools", "check", bad])
    check(done.returncode == 1 and "bad.toml:" in text(done.stdout) and "cwd" in text(done.stdout),
          f"a tool without cwd: exit {done.returncode}, {done.stdout!r}")
    done = wine(["tools", "--config", os.path.join(project, "missing.toml"), "list"])
    check(done.returncode == 2, f"a missing config: exit {done.returncode}")


def main():
    tests = [(name, fn) for name, fn in globals().items() if name.startswith("test_")]
    only = os.environ.get("ONLY")
    passed = failed = 0
    for name, fn in tests:
        if only and only not in name:
            continue
        started = time.monotonic()
        try:
            fn()
        except Exception as error:  # noqa: BLE001 - every failure is reported
            failed += 1
            print(f"FAIL {name} ({time.monotonic() - started:.1f}s): {error}", flush=True)
        else:
            passed += 1
            print(f"ok   {name} ({time.monotonic() - started:.1f}s)", flush=True)
    print("LIMIT tty: Wine 8's pseudo console carries no output, so under Wine the doors run"
          " tty requests on pipes and say so (checked above); the ConPTY path's start, job,"
          " timeout and close run in the unit tests (run.sh), its output is not seen here")
    print("LIMIT findstr: Wine 8's findstr.exe is a stub that prints nothing, so the built-in"
          " search_files tool (findstr /s /n) is checked to run, not to find, under Wine")
    print(f"windows: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
