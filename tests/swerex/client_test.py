"""Drives agent-reach's `swerex-remote` personality with SWE-ReX's own
published client, `swerex.runtime.remote.RemoteRuntime` (PyPI `swe-rex`).

Each check prints one line; any failure exits 1. Covers: is_alive, a wrong
key refused, a session whose state (cwd, variables, functions) carries
between commands, check="raise" -> NonZeroExitCodeError, a syntax error ->
BashIncorrectSyntaxError, a timeout -> CommandTimeoutError with the command
killed and the session still usable, an interrupt after it, an interactive
python3, execute with env and cwd, read/write/upload (a zip with unzip),
a background process (nohup and setsid escapees too) gone after close
(checked in /proc), close keeping the server up, and a flood folded.
"""

import asyncio
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from swerex.exceptions import (
    BashIncorrectSyntaxError,
    CommandTimeoutError,
    NonZeroExitCodeError,
    SessionDoesNotExistError,
    SessionExistsError,
)
from swerex.runtime.abstract import (
    BashAction,
    BashInterruptAction,
    CloseBashSessionRequest,
    Command,
    CreateBashSessionRequest,
    ReadFileRequest,
    UploadRequest,
    WriteFileRequest,
)
from swerex.runtime.remote import RemoteRuntime

TOKEN = "test-token-7"
FAILURES = []
PASSED = []


def check(name, ok, detail=""):
    print(("ok   " if ok else "FAIL ") + name + ("" if ok else f"\n     {detail}"))
    (PASSED if ok else FAILURES).append(name)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1].split()[0] != "Z"
    except OSError:
        return False


async def raises(exc, coro):
    try:
        await coro
    except exc as e:
        return e
    except Exception as e:  # noqa: BLE001
        return AssertionError(f"raised {type(e).__name__}: {e}")
    return AssertionError("did not raise")


async def run(rt, command, **kw):
    return await rt.run_in_session(BashAction(command=command, **kw))


async def main(link, work):
    port = free_port()
    home = tempfile.mkdtemp(prefix="ar-swerex-home-")
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": home,
        "AGENT_REACH_HOME": home,
        "LANG": "C.UTF-8",
    }
    server = subprocess.Popen(
        [link, "--host", "127.0.0.1", "--port", str(port), "--auth-token", TOKEN],
        cwd=work,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(os.path.join(home, "server.log"), "wb"),
    )
    try:
        rt = RemoteRuntime(host="127.0.0.1", port=port, auth_token=TOKEN)
        await rt.wait_until_alive(timeout=30)
        check("is_alive answers with the key", bool(await rt.is_alive(timeout=5)))
        wrong = RemoteRuntime(host="127.0.0.1", port=port, auth_token="wrong")
        check("a wrong key is refused", not bool(await wrong.is_alive(timeout=5)))
        err = await raises(Exception, wrong.execute(Command(command=["true"])))
        check("a wrong key cannot execute", not isinstance(err, AssertionError), str(err))

        await rt.create_session(CreateBashSessionRequest(startup_timeout=10))
        err = await raises(SessionExistsError, rt.create_session(CreateBashSessionRequest(startup_timeout=10)))
        check("a second default session is SessionExistsError", not isinstance(err, AssertionError), str(err))
        await run(rt, "cd /tmp && X=41 && f() { echo \"f:$1\"; }", timeout=10)
        obs = await run(rt, "echo $((X+1)) $(pwd); f ok", timeout=10)
        check("state carries between commands", obs.output.strip() == "42 /tmp\nf:ok" and obs.exit_code == 0, repr(obs))
        obs = await run(rt, "echo a\necho b", timeout=10)
        check("a multi-line command runs whole", obs.output == "a\nb\n", repr(obs.output))
        err = await raises(NonZeroExitCodeError, run(rt, "echo out; exit_code_test() { return 3; }; exit_code_test", timeout=10))
        check("check=raise on failure is NonZeroExitCodeError", not isinstance(err, AssertionError) and "exit code 3" in str(err), str(err))
        obs = await run(rt, "false", check="silent", timeout=10)
        check("check=silent gives the exit code", obs.exit_code == 1, repr(obs))
        obs = await run(rt, "false", check="ignore", timeout=10)
        check("check=ignore gives no exit code", obs.exit_code is None, repr(obs))
        err = await raises(BashIncorrectSyntaxError, run(rt, "echo never; (a", timeout=10))
        check("a syntax error is BashIncorrectSyntaxError", not isinstance(err, AssertionError), str(err))

        start = time.monotonic()
        err = await raises(CommandTimeoutError, run(rt, "echo started; sleep 300", timeout=1))
        took = time.monotonic() - start
        check("a timeout is CommandTimeoutError", not isinstance(err, AssertionError), str(err))
        check("the timeout answers promptly", took < 10, f"{took:.1f}s")
        obs = await rt.run_in_session(BashInterruptAction())
        check("an interrupt after the timeout is answered", obs.exit_code == 0 and "started" in obs.output, repr(obs))
        obs = await run(rt, "echo $X; pgrep -f 'sleep 300' || echo none", timeout=10)
        check("the session is usable and the command was killed", obs.output.split() == ["41", "none"], repr(obs.output))
        obs = await rt.run_in_session(BashInterruptAction())
        check("an interrupt on an idle shell is answered", obs.exit_code == 0, repr(obs))

        obs = await run(rt, "python3", is_interactive_command=True, expect=[">>> "], timeout=20)
        check("python3 starts interactively", obs.expect_string == ">>> " and "Python" in obs.output, repr(obs))
        obs = await run(rt, "print(6*7)", is_interactive_command=True, expect=[">>> "], timeout=10)
        check("python3 answers", obs.output == "42", repr(obs))
        obs = await run(rt, "quit()", is_interactive_quit=True, timeout=10)
        check("python3 quits back to the shell", obs.exit_code == 0, repr(obs))
        obs = await run(rt, "echo back $X", timeout=10)
        check("the shell works after the interactive program", obs.output == "back 41\n", repr(obs.output))

        r = await rt.execute(Command(command=["sh", "-c", "echo $FOO; pwd; echo e >&2"], env={"FOO": "bar", "PATH": env["PATH"]}, cwd="/tmp"))
        check("execute with env and cwd", r.stdout == "bar\n/tmp\n" and r.stderr == "e\n" and r.exit_code == 0, repr(r))
        r = await rt.execute(Command(command=["sh", "-c", "env | wc -l"], env={"ONLY": "1"}))
        check("execute's env replaces the environment", int(r.stdout.strip()) <= 4, repr(r))
        r = await rt.execute(Command(command="echo hi && exit 4", shell=True))
        check("execute with shell=True", r.stdout == "hi\n" and r.exit_code == 4, repr(r))
        err = await raises(CommandTimeoutError, rt.execute(Command(command=["sleep", "30"], timeout=0.5)))
        check("execute's timeout is CommandTimeoutError", not isinstance(err, AssertionError), str(err))
        err = await raises(FileNotFoundError, rt.execute(Command(command=["no-such-program-x"])))
        check("execute of a missing program is FileNotFoundError", not isinstance(err, AssertionError), str(err))

        path = os.path.join(work, "sub", "f.txt")
        await rt.write_file(WriteFileRequest(path=path, content="héllo\n"))
        r = await rt.read_file(ReadFileRequest(path=path))
        check("write_file then read_file", r.content == "héllo\n", repr(r))
        err = await raises(FileNotFoundError, rt.read_file(ReadFileRequest(path=os.path.join(work, "none"))))
        check("read_file of a missing file is FileNotFoundError", not isinstance(err, AssertionError), str(err))
        src = tempfile.mkdtemp(prefix="ar-swerex-src-")
        os.makedirs(os.path.join(src, "pkg"))
        with open(os.path.join(src, "pkg", "a.txt"), "w") as f:
            f.write("A")
        with open(os.path.join(src, "top.txt"), "w") as f:
            f.write("T")
        target = os.path.join(work, "uploaded")
        await rt.upload(UploadRequest(source_path=src, target_path=target))
        ok = open(os.path.join(target, "pkg", "a.txt")).read() == "A" and open(os.path.join(target, "top.txt")).read() == "T"
        check("upload of a directory (a zip with unzip)", ok, str(os.listdir(target)))
        single = os.path.join(work, "one", "copy.txt")
        await rt.upload(UploadRequest(source_path=os.path.join(src, "top.txt"), target_path=single))
        check("upload of a file", open(single).read() == "T")
        shutil.rmtree(src)

        start = time.monotonic()
        obs = await run(rt, "yes 0123456789abcdefghijklmnopqrstuvwxyz | head -c 50000000; echo; echo done-flood", timeout=120)
        took = time.monotonic() - start
        check("a 50 MB flood returns folded", len(obs.output) < 200_000 and obs.output.rstrip().endswith("done-flood"), f"{len(obs.output)} chars")
        check("the fold names the spill file", "sed -n" in obs.output, obs.output[:300])
        print(f"     (50 MB flood answered in {took:.2f}s)")

        await run(rt, "sleep 1000 & nohup sleep 1001 >/dev/null 2>&1 & setsid sleep 1002 >/dev/null 2>&1 < /dev/null &", timeout=10)
        time.sleep(0.5)
        obs = await run(rt, "pgrep -f '^sleep 100[012]$' | sed 's/^/pid=/'; jobs -r | wc -l", timeout=10)
        pids = [int(p) for p in re.findall(r"pid=(\d+)", obs.output)]
        check("background, nohup and setsid processes run", len(pids) == 3 and all(alive(p) for p in pids), repr(obs.output))
        check("background jobs live on to the next command", obs.output.strip().endswith("2"), repr(obs.output))
        await rt.create_session(CreateBashSessionRequest(session="second", startup_timeout=10))
        obs = await run(rt, "sleep 1003 & echo pid=$!", session="second", timeout=10)
        second_pid = int(re.findall(r"pid=(\d+)", obs.output)[0])
        await rt.close_session(CloseBashSessionRequest(session="second"))
        time.sleep(0.5)
        check("close_session kills what the session started", not alive(second_pid), str(second_pid))
        err = await raises(SessionDoesNotExistError, run(rt, "true", session="second"))
        check("a closed session does not exist", not isinstance(err, AssertionError), str(err))

        await rt.close()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(alive(p) for p in pids):
            time.sleep(0.1)
        check("close kills background, nohup and setsid processes", not any(alive(p) for p in pids), str([p for p in pids if alive(p)]))
        check("the server keeps serving after close", bool(await rt.is_alive(timeout=5)))
        await rt.create_session(CreateBashSessionRequest(startup_timeout=10))
        obs = await run(rt, "echo again", timeout=10)
        check("a new session after close", obs.output == "again\n", repr(obs))
        err = await raises(Exception, rt.create_session(CreateBashSessionRequest(session="slow", startup_source=[write_slow(work)], startup_timeout=0.5)))
        check("a create_session past its startup_timeout fails", not isinstance(err, AssertionError), str(err))
        err = await raises(SessionDoesNotExistError, run(rt, "true", session="slow"))
        check("a failed create_session leaves no session", not isinstance(err, AssertionError), str(err))
        await rt.close()
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
        check("the server exits 0 on SIGTERM", server.returncode == 0, str(server.returncode))


def write_slow(work):
    path = os.path.join(work, "slow.sh")
    with open(path, "w") as f:
        f.write("sleep 5\n")
    return path


if __name__ == "__main__":
    link = sys.argv[1]
    work = tempfile.mkdtemp(prefix="ar-swerex-")
    asyncio.run(main(link, work))
    print(f"{len(PASSED)} passed, {len(FAILURES)} failed")
    sys.exit(1 if FAILURES else 0)
