"""E2B's own Python SDK (`e2b`, pinned in run.sh) driving
`agent-reach serve --listen envd=ADDR` in its local mode
(`Sandbox.create(debug=True)`, `sandbox_url=`): commands with their output,
exit codes and exceptions, a background command killed with its whole tree,
the timeout, the files API, including a path outside the root refused, and
directory watching (polled and streamed).

Usage: sdk_test.py URL ROOT [TOKEN]. Without TOKEN the server has none
(loopback, as the SDK's debug mode expects) and the sandbox is made with
`Sandbox.create(debug=True, sandbox_url=URL)`; with TOKEN, the debug mode
sends no token of its own, so the sandbox is made as `Sandbox.create` makes
it once it has the envd access token (its `X-Access-Token` sandbox header),
and a wrong token must be refused. Prints `ok NAME` per check; exits 1 at
the first failure."""

import os
import sys
import time

from e2b import (
    AuthenticationException,
    CommandExitException,
    Sandbox,
    SandboxException,
    TimeoutException,
)

from e2b import ConnectionConfig
from packaging.version import Version

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from checks import alive, check, gone_within  # noqa: E402

URL, ROOT = sys.argv[1], sys.argv[2]
TOKEN = sys.argv[3] if len(sys.argv) > 3 else ""


def with_token(token):
    """The sandbox `Sandbox.create` makes from an envd access token."""
    config = ConnectionConfig(
        debug=True,
        sandbox_url=URL,
        extra_sandbox_headers={"X-Access-Token": token},
    )
    return Sandbox(
        sandbox_id="debug_sandbox_id",
        sandbox_domain=None,
        envd_version=Version("99.99.99"),
        envd_access_token=token,
        connection_config=config,
    )


sbx = with_token(TOKEN) if TOKEN else Sandbox.create(debug=True, sandbox_url=URL)

# Commands: output, exit code, the exception of a failing one.
r = sbx.commands.run("echo hello; echo oops >&2")
check("run returns stdout", r.stdout == "hello\n", repr(r.stdout))
check("run returns stderr", r.stderr == "oops\n", repr(r.stderr))
check("run returns exit code 0", r.exit_code == 0, r.exit_code)

try:
    sbx.commands.run("echo before; exit 7")
    check("nonzero exit raises CommandExitException", False, "no exception")
except CommandExitException as e:
    check("nonzero exit raises CommandExitException", e.exit_code == 7, e.exit_code)
    check("the exception carries the output", e.stdout == "before\n", repr(e.stdout))

r = sbx.commands.run("echo $GREETING; pwd", envs={"GREETING": "hi there"}, cwd=ROOT)
check("envs and cwd reach the command", r.stdout == f"hi there\n{ROOT}\n", repr(r.stdout))

seen = []
sbx.commands.run("for i in 1 2 3; do echo line$i; done", on_stdout=lambda s: seen.append(s))
check("on_stdout streams the output", "".join(seen) == "line1\nline2\nline3\n", repr(seen))

# The timeout: the SDK's TimeoutException, and the command gone.
marker = os.path.join(ROOT, "timeout.pid")
started = time.time()
try:
    sbx.commands.run(f"echo $$ > {marker}; sleep 30", timeout=4)
    check("a command past its timeout raises TimeoutException", False, "no exception")
except TimeoutException:
    check("a command past its timeout raises TimeoutException", time.time() - started < 15)
pid = int(open(marker).read())
check("the timed-out command is gone", gone_within(pid, 5), pid)

# A background command and its child, listed, then killed with its tree.
child_file = os.path.join(ROOT, "child.pid")
h = sbx.commands.run(f"sleep 300 & echo $! > {child_file}; wait", background=True, timeout=0)
deadline = time.time() + 5
while not os.path.exists(child_file) or not open(child_file).read().strip():
    check("the background command starts", time.time() < deadline)
    time.sleep(0.05)
child = int(open(child_file).read())
listed = [p.pid for p in sbx.commands.list()]
check("list shows the background command", h.pid in listed, (h.pid, listed))
check("kill answers true", sbx.commands.kill(h.pid) is True)
check("the killed command is gone", gone_within(h.pid, 5), h.pid)
check("its child is gone too", gone_within(child, 5), child)
check("kill of a gone process answers false", sbx.commands.kill(h.pid) is False)

# stdin of a background command.
h = sbx.commands.run("read line; echo got:$line", background=True, stdin=True)
sbx.commands.send_stdin(h.pid, "abc\n")
r = h.wait()
check("send_stdin reaches the command", r.stdout == "got:abc\n", repr(r.stdout))

# A background command reattached with connect after its first handle let go.
h = sbx.commands.run("sleep 1; echo reattached", background=True)
h.disconnect()
again = sbx.commands.connect(h.pid)
r = again.wait()
check("connect reattaches to a running command", r.stdout == "reattached\n", repr(r.stdout))

# A PTY: input, a resize the program sees, kill.
from e2b.sandbox.commands.command_handle import PtySize

pty_out = []
t = sbx.pty.create(PtySize(rows=24, cols=80), timeout=30)
sbx.pty.resize(t.pid, PtySize(rows=40, cols=100))
sbx.pty.send_stdin(t.pid, b"stty size; exit\n")
t.wait(on_pty=lambda d: pty_out.append(d))
text = b"".join(pty_out).decode(errors="replace")
check("a PTY runs its input and sees its new size", "40 100" in text, repr(text[-300:]))
t = sbx.pty.create(PtySize(rows=24, cols=80), timeout=30)
check("a PTY is killed", sbx.pty.kill(t.pid) is True and gone_within(t.pid, 5))

# Files.
path = os.path.join(ROOT, "dir", "hello.txt")
info = sbx.files.write(path, "hello file")
check("write answers the path", info.path == path, info.path)
check("read returns what was written", sbx.files.read(path) == "hello file")
blob = bytes(range(256)) * 4096
sbx.files.write(os.path.join(ROOT, "blob.bin"), blob)
check("binary content is intact", sbx.files.read(os.path.join(ROOT, "blob.bin"), format="bytes") == bytes(blob))
names = sorted(e.name for e in sbx.files.list(os.path.join(ROOT, "dir")))
check("list shows the file", names == ["hello.txt"], names)
check("exists of a written file", sbx.files.exists(path) is True)
check("make_dir makes a directory", sbx.files.make_dir(os.path.join(ROOT, "made")) is True)
check("make_dir of an existing one answers false", sbx.files.make_dir(os.path.join(ROOT, "made")) is False)
moved = sbx.files.rename(path, os.path.join(ROOT, "made", "moved.txt"))
check("rename moves the file", moved.path == os.path.join(ROOT, "made", "moved.txt"), moved.path)
check("the old path is gone", sbx.files.exists(path) is False)
got = sbx.files.get_info(os.path.join(ROOT, "made", "moved.txt"))
check("get_info tells the size", got.size == len("hello file"), got.size)
sbx.files.remove(os.path.join(ROOT, "made"))
check("remove removes a tree", not os.path.exists(os.path.join(ROOT, "made")))

try:
    sbx.files.read("/etc/hostname")
    check("a path outside the root is refused", False, "read it")
except SandboxException as e:
    check("a path outside the root is refused", "outside" in str(e), str(e))
try:
    sbx.files.write("/tmp/agent-reach-envd-escape.txt", "x")
    check("a write outside the root is refused", False, "wrote it")
except SandboxException:
    check("a write outside the root is refused", not os.path.exists("/tmp/agent-reach-envd-escape.txt"))

# Watching a directory: the polled watcher (Sandbox.files.watch_dir) and
# the stream (AsyncSandbox.files.watch_dir with on_event), recursive.
from e2b import AsyncSandbox, FilesystemEventType


def names_of(events, kind):
    return [e.name for e in events if e.type == kind]


watched = os.path.join(ROOT, "watched")
sbx.files.make_dir(os.path.join(watched, "sub"))
handle = sbx.files.watch_dir(watched, recursive=True)
sbx.files.write(os.path.join(watched, "new.txt"), "one")
sbx.files.write(os.path.join(watched, "sub", "deep.txt"), "two")
sbx.commands.run(f"echo more >> {watched}/new.txt; rm {watched}/new.txt")
events = []
deadline = time.time() + 5
while time.time() < deadline and "new.txt" not in names_of(events, FilesystemEventType.REMOVE):
    events += handle.get_new_events()
    time.sleep(0.1)
handle.stop()
check("watch_dir sees a file made", "new.txt" in names_of(events, FilesystemEventType.CREATE), events)
check("watch_dir sees a file written", "new.txt" in names_of(events, FilesystemEventType.WRITE), events)
check("watch_dir sees a file removed", "new.txt" in names_of(events, FilesystemEventType.REMOVE), events)
check(
    "a recursive watch names a nested file relative to the watched directory",
    "sub/deep.txt" in names_of(events, FilesystemEventType.CREATE),
    events,
)
try:
    sbx.files.watch_dir(os.path.join(ROOT, "no-such-dir"))
    check("watching a missing directory is refused", False, "watched")
except SandboxException as e:
    check("watching a missing directory is refused", "does not exist" in str(e), str(e))
try:
    sbx.files.watch_dir("/etc")
    check("watching outside the root is refused", False, "watched")
except SandboxException as e:
    check("watching outside the root is refused", "outside" in str(e), str(e))


async def watch_stream():
    if TOKEN:
        config = dict(
            sandbox_id="debug_sandbox_id",
            sandbox_domain=None,
            envd_version=Version("99.99.99"),
            envd_access_token=TOKEN,
            connection_config=ConnectionConfig(
                debug=True, sandbox_url=URL, extra_sandbox_headers={"X-Access-Token": TOKEN}
            ),
        )
        asbx = AsyncSandbox(**config)
    else:
        asbx = await AsyncSandbox.create(debug=True, sandbox_url=URL)
    seen = []
    stream = await asbx.files.watch_dir(watched, on_event=seen.append, recursive=True)
    await asbx.files.write(os.path.join(watched, "streamed.txt"), "x")
    await asbx.files.write(os.path.join(watched, "sub", "nested.txt"), "y")
    await asbx.files.remove(os.path.join(watched, "streamed.txt"))
    end = time.time() + 5
    while time.time() < end and "streamed.txt" not in names_of(seen, FilesystemEventType.REMOVE):
        await asyncio.sleep(0.05)
    await stream.stop()
    return seen


import asyncio

seen = asyncio.run(watch_stream())
check("a watch stream sees a file made", "streamed.txt" in names_of(seen, FilesystemEventType.CREATE), seen)
check("a watch stream sees a file removed", "streamed.txt" in names_of(seen, FilesystemEventType.REMOVE), seen)
check(
    "a recursive watch stream sees a nested file",
    "sub/nested.txt" in names_of(seen, FilesystemEventType.CREATE),
    seen,
)

# Without the token.
if TOKEN:
    bad = with_token("wrong")
    try:
        bad.commands.run("true")
        check("a wrong token is refused", False, "ran")
    except AuthenticationException:
        check("a wrong token is refused", True)
    try:
        bad.files.read(os.path.join(ROOT, "blob.bin"))
        check("a wrong token reads no file", False, "read it")
    except AuthenticationException:
        check("a wrong token reads no file", True)
    nobody = Sandbox.create(debug=True, sandbox_url=URL)
    try:
        nobody.commands.list()
        check("no token is refused", False, "listed")
    except AuthenticationException:
        check("no token is refused", True)

print("all ok", flush=True)
# Every check has passed (a failed one exits non-zero above). The SDK's
# background threads (watch and stream handles) have been seen to abort the
# interpreter's teardown (SIGABRT, no message, once in a CI run), so the
# client leaves without it.
os._exit(0)
