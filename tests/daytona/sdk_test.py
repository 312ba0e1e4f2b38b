"""Daytona's own Python SDK (`daytona`, pinned in run.sh) driving
`agent-reach serve --listen daytona=ADDR`: the sandbox read with
`Daytona.get`, commands with their output, exit codes, working directory,
variables and timeout (a `setsid` child gone with the tree), code_run,
sessions keeping state and async commands with followed logs, a PTY
(variables, resize, exit code, kill ending its tree), the file
operations with a 20 MB round trip, a path outside the root refused, and a
wrong API key raised as the SDK's authentication error.

Usage: sdk_test.py API_URL ROOT TOKEN. Prints `ok NAME` per check; exits 1
at the first failure."""

import asyncio
import os
import sys
import time

from daytona import (
    Daytona,
    DaytonaAuthenticationError,
    DaytonaConfig,
    DaytonaError,
    DaytonaNotFoundError,
    DaytonaTimeoutError,
    FileUpload,
    PtySize,
    SessionExecuteRequest,
)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from checks import alive, check, gone_within  # noqa: E402

API_URL, ROOT, TOKEN = sys.argv[1], os.path.realpath(sys.argv[2]), sys.argv[3]


daytona = Daytona(DaytonaConfig(api_key=TOKEN, api_url=API_URL))
sandbox = daytona.get("agent-reach")
check("get: the sandbox is started", str(sandbox.state.value) == "started", sandbox.state)
check("list: the one sandbox", [s.id for s in daytona.list()] == ["agent-reach"])
try:
    daytona.get("someone-else")
    check("get: another id is not found", False, "no error")
except DaytonaNotFoundError:
    check("get: another id is not found", True)

# process.exec
r = sandbox.process.exec("echo out; echo err >&2; exit 3")
check("exec: output and exit code", r.exit_code == 3 and r.result == "out\nerr\n", repr((r.exit_code, r.result)))
os.makedirs(os.path.join(ROOT, "sub"), exist_ok=True)
r = sandbox.process.exec("pwd; echo $GREETING", cwd="sub", env={"GREETING": "hello"})
check("exec: cwd and env", r.result == f"{ROOT}/sub\nhello\n", repr(r.result))
r = sandbox.process.exec("pwd")
check("exec: no cwd is the root", r.result == f"{ROOT}\n", repr(r.result))
pid_file = os.path.join(ROOT, "child.pid")
started = time.time()
try:
    sandbox.process.exec(f"setsid sleep 300 & echo $! > {pid_file}; sleep 60", timeout=2)
    check("exec: the timeout raises", False, "no error")
except DaytonaTimeoutError:
    check("exec: the timeout raises DaytonaTimeoutError", time.time() - started < 20)
child = int(open(pid_file).read().strip())
check("exec: the setsid child is gone from /proc", gone_within(child, 5), f"pid {child}")

# code_run
r = sandbox.process.code_run("import sys\nprint(6 * 7)\nsys.exit(2)")
check("code_run: output and exit code", r.result == "42\n" and r.exit_code == 2, repr((r.exit_code, r.result)))

# sessions
sandbox.process.create_session("work")
os.makedirs(os.path.join(ROOT, "inner"), exist_ok=True)
sandbox.process.execute_session_command("work", SessionExecuteRequest(command="cd inner && export MARK=kept"))
r = sandbox.process.execute_session_command("work", SessionExecuteRequest(command="pwd; echo $MARK; echo warn >&2"))
check("session: state kept", r.stdout == f"{ROOT}/inner\nkept\n" and r.stderr == "warn\n" and r.exit_code == 0, repr(r))
r = sandbox.process.execute_session_command(
    "work",
    SessionExecuteRequest(command="for i in 1 2 3; do echo line$i; echo e$i >&2; sleep 0.2; done", run_async=True),
)
check("session: an async command answers at once", r.exit_code is None and r.cmd_id, repr(r))
out, err = [], []
asyncio.run(sandbox.process.get_session_command_logs_async("work", r.cmd_id, out.append, err.append))
check("session: logs followed to the end", "".join(out) == "line1\nline2\nline3\n" and "".join(err) == "e1\ne2\ne3\n", repr((out, err)))
cmd = sandbox.process.get_session_command("work", r.cmd_id)
check("session: the async command's exit code", cmd.exit_code == 0, repr(cmd))
logs = sandbox.process.get_session_command_logs("work", r.cmd_id)
check("session: logs read after the end", logs.stdout == "line1\nline2\nline3\n", repr(logs))
check("session: listed", [s.session_id for s in sandbox.process.list_sessions()] == ["work"])
sandbox.process.delete_session("work")
try:
    sandbox.process.get_session("work")
    check("session: deleted", False, "still there")
except DaytonaNotFoundError:
    check("session: deleted", True)

# PTY
pty = sandbox.process.create_pty_session(id="term", pty_size=PtySize(cols=100, rows=30), envs={"PTYVAR": "set"})
check("pty: connected", pty.is_connected())
info = sandbox.process.resize_pty_session("term", PtySize(cols=120, rows=40))
check("pty: resized", (info.cols, info.rows) == (120, 40), repr(info))
pty.send_input("echo v=$PTYVAR; stty size; exit 7\n")
chunks = []
result = pty.wait(on_data=chunks.append)
screen = b"".join(chunks).decode(errors="replace")
check("pty: env, size and exit code", result.exit_code == 7 and "v=set" in screen and "40 120" in screen, repr((result, screen)))
pty = sandbox.process.create_pty_session(id="killed")
pid_file = os.path.join(ROOT, "pty-child.pid")
pty.send_input(f"sleep 300 & echo $! > {pid_file}\n")
end = time.time() + 10
while not os.path.exists(pid_file) and time.time() < end:
    time.sleep(0.05)
child = int(open(pid_file).read().strip())
pty.kill()
pty.wait(timeout=10)
check("pty: kill ends its whole tree", gone_within(child, 5), f"pid {child}")
check("pty: none left", sandbox.process.list_pty_sessions() == [])

# files
big = os.urandom(20 * 1024 * 1024)
started = time.time()
sandbox.fs.upload_file(big, "data/big.bin")
back = sandbox.fs.download_file("data/big.bin")
check("files: a 20 MB round trip", back == big, f"{len(back)} bytes back in {time.time() - started:.1f}s")
sandbox.fs.upload_files([FileUpload(source=b"alpha\n", destination="docs/a.txt"), FileUpload(source=b"beta\n", destination=f"{ROOT}/docs/b.txt")])
check("files: list", [f.name for f in sandbox.fs.list_files("docs")] == ["a.txt", "b.txt"])
info = sandbox.fs.get_file_info("docs/a.txt")
check("files: info", info.size == 6 and not info.is_dir and info.permissions == "0644", repr(info))
check("files: find", [(m.line, m.content) for m in sandbox.fs.find_files("docs", "lph")] == [(1, "alpha")])
check("files: search", sandbox.fs.search_files("docs", "*.txt").files == [f"{ROOT}/docs/a.txt", f"{ROOT}/docs/b.txt"])
sandbox.fs.replace_in_files(["docs/a.txt"], "alpha", "omega")
check("files: replace", sandbox.fs.download_file("docs/a.txt") == b"omega\n")
sandbox.fs.set_file_permissions("docs/a.txt", mode="600")
check("files: permissions", sandbox.fs.get_file_info("docs/a.txt").permissions == "0600")
sandbox.fs.create_folder("moved", "755")
sandbox.fs.move_files("docs/b.txt", "moved/b.txt")
check("files: folder and move", os.path.exists(os.path.join(ROOT, "moved/b.txt")))
sandbox.fs.delete_file("moved", recursive=True)
check("files: delete", not os.path.exists(os.path.join(ROOT, "moved")))
try:
    sandbox.fs.download_file("/etc/passwd")
    check("files: outside the root refused", False, "read")
except DaytonaError as e:
    check("files: outside the root refused", "outside" in str(e), str(e))

# a wrong API key
wrong = Daytona(DaytonaConfig(api_key="wrong-key", api_url=API_URL))
try:
    wrong.get("agent-reach")
    check("auth: a wrong API key is refused", False, "no error")
except DaytonaAuthenticationError:
    check("auth: a wrong API key raises DaytonaAuthenticationError", True)
print("all daytona SDK checks passed", flush=True)
