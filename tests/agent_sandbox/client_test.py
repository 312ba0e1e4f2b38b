"""The published agent-sandbox client (k8s-agent-sandbox) against agent-reach.

Two `agent-reach serve` processes on loopback, each over its own temp
workspace:
- sandboxd (`sandboxd-grpc` + `sandboxd-rest`, no token: the SDK's sandboxd
  configs send none), reached as a pod by
  `Sandbox(..., connection_config=SandboxdInClusterConnectionConfig(
  mode="in-cluster-pod-ip", rest_port=..., grpc_port=...), k8s_helper=stub)`
  where the stub's Sandbox has `status.podIPs == ["127.0.0.1"]`;
- python-runtime (token), reached with `SandboxDirectConnectionConfig(api_url=...,
  extra_headers={"Authorization": "Bearer ..."})`.
Every failed check is printed; the exit code is the number of failures.
"""

import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

import grpc

from k8s_agent_sandbox.sandbox import Sandbox
from k8s_agent_sandbox.exceptions import SandboxRequestError
from k8s_agent_sandbox.models import (
    SandboxDirectConnectionConfig,
    SandboxdInClusterConnectionConfig,
)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from grpc_wire import event, read_varint, start_request  # noqa: E402

TOKEN = "client-test-token"
FAILURES = []


def check(name, ok, detail=""):
    print(("ok   " if ok else "FAIL ") + name + ("" if ok else f": {detail}"))
    if not ok:
        FAILURES.append(name)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class StubK8sHelper:
    """The control plane: one Sandbox whose pod is this machine."""

    injected_api_client = None

    def get_sandbox(self, sandbox_id, namespace):
        return {
            "metadata": {"name": sandbox_id, "namespace": namespace},
            "status": {
                "podIPs": ["127.0.0.1"],
                "conditions": [{"type": "Ready", "status": "True"}],
            },
        }

    def delete_sandbox_claim(self, claim_name, namespace):
        pass


def serve(binary, workdir, listens, env_extra):
    args = [binary, "serve", "--root", workdir]
    for listen in listens:
        args += ["--listen", listen]
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": workdir,
        "LANG": "C.UTF-8",
        "AGENT_REACH_HOME": os.path.join(os.path.dirname(workdir), "ar-home"),
    }
    env.update(env_extra)
    return subprocess.Popen(args, env=env, cwd=workdir,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)


def wait_http(url, limit=20):
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.05)
    raise SystemExit(f"no answer from {url}")


def status_of(call):
    try:
        call()
    except SandboxRequestError as e:
        return e.status_code
    except Exception as e:  # noqa: BLE001 - reported as a failed check
        return repr(e)
    return None


def sandboxd_checks(sandbox, workdir):
    run = sandbox.commands.run
    r = run("echo hello; echo oops >&2")
    check("commands.run output", r.stdout == "hello\n" and r.stderr == "oops\n", r)
    r = run("exit 3")
    check("commands.run exit code", r.exit_code == 3, r)
    r = run('echo "$GREETING"', env={"GREETING": "hi there"})
    check("commands.run env", r.stdout == "hi there\n", r)
    os.makedirs(os.path.join(workdir, "sub"), exist_ok=True)
    r = run("pwd", cwd="sub")
    check("commands.run cwd", r.stdout.strip() == os.path.realpath(os.path.join(workdir, "sub")), r)
    started = time.monotonic()
    r = run("sleep 30; touch survived", command_timeout=1)
    check("commands.run timeout", r.timed_out and r.exit_code == 124, r)
    check("commands.run timeout is prompt", time.monotonic() - started < 20)

    files = sandbox.files
    files.write("dir/a.txt", "hello file")
    check("files.write lands in the workspace",
          open(os.path.join(workdir, "dir/a.txt")).read() == "hello file")
    check("files.read", files.read("dir/a.txt") == b"hello file")
    entries = files.list("dir")
    check("files.list", [(e.name, e.type, e.size) for e in entries] == [("a.txt", "file", 10)], entries)
    check("files.exists yes", files.exists("dir/a.txt") is True)
    check("files.exists no", files.exists("dir/none.txt") is False)
    files.write("dir/b.txt", b"\x00\x01binary")
    check("files.read binary", files.read("dir/b.txt") == b"\x00\x01binary")
    check("files.delete non-empty dir is 409", status_of(lambda: files.delete("dir")) == 409)
    files.delete("dir/a.txt")
    check("files.delete", files.exists("dir/a.txt") is False)
    files.delete("dir", recursive=True)
    check("files.delete recursive", not os.path.exists(os.path.join(workdir, "dir")))

    outside = os.path.join(os.path.dirname(workdir), "outside")
    os.makedirs(outside, exist_ok=True)
    with open(os.path.join(outside, "secret"), "w") as f:
        f.write("secret")
    check("escape: read ..", status_of(lambda: files.read("../outside/secret", allow_unsafe_paths=True)) == 403)
    check("escape: write ..", status_of(lambda: files.write("../outside/planted", "x", allow_unsafe_paths=True)) == 403)
    check("escape: list ..", status_of(lambda: files.list("..")) == 403)
    run(f"ln -s {outside} escape")
    check("escape: read through a link", status_of(lambda: files.read("escape/secret")) == 403)
    check("escape: exists through a link", status_of(lambda: files.exists("escape/secret")) == 403)
    check("escape: nothing planted", not os.path.exists(os.path.join(outside, "planted")))
    check("timeout: nothing survived", not os.path.exists(os.path.join(workdir, "survived")))


def start_checks(grpc_port):
    """`Start` through grpcio, the transport of the published client: the
    streaming call it does not make, spoken with its own HTTP/2 stack."""
    channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
    start = channel.unary_stream("/process.v1.ProcessService/Start",
                                 request_serializer=lambda b: b, response_deserializer=lambda b: b)

    events = [event(m) for m in start(start_request("/bin/sh", "-c",
                                               "echo out; echo err >&2; head -c 3000000 /dev/zero; exit 5"),
                                       timeout=30)]
    kinds = [k for k, _ in events]
    out = b"".join(p for k, p in events if k == 2)
    err = b"".join(p for k, p in events if k == 3)
    exit_code = read_varint(events[-1][1], 1)[0] if events and events[-1][1] else 0
    check("grpcio Start: init first, exit last", kinds[:1] == [1] and kinds[-1:] == [4], kinds[:3])
    check("grpcio Start: the output whole", out == b"out\n" + b"\0" * 3000000 and err == b"err\n",
          (len(out), err))
    check("grpcio Start: the exit code", exit_code == 5, events[-1:])
    started = time.monotonic()
    try:
        for _ in start(start_request("/bin/sh", "-c", "sleep 30"), timeout=1):
            pass
        code = None
    except grpc.RpcError as e:
        code = e.code()
    check("grpcio Start: past the deadline is DEADLINE_EXCEEDED",
          code == grpc.StatusCode.DEADLINE_EXCEEDED and time.monotonic() - started < 10, code)
    try:
        list(start(start_request("/no/such/program"), timeout=10))
        code = None
    except grpc.RpcError as e:
        code = e.code()
    check("grpcio Start: a missing program is NOT_FOUND", code == grpc.StatusCode.NOT_FOUND, code)
    channel.close()


def runtime_checks(sandbox, bare, workdir):
    r = sandbox.commands.run("echo hi; echo err >&2; exit 2")
    check("runtime run", (r.stdout, r.stderr, r.exit_code, r.timed_out) == ("hi\n", "err\n", 2, False), r)
    r = sandbox.commands.run("echo $((6*7)) | tr 4 X")
    check("runtime run is a shell line", r.stdout == "X2\n", r)
    r = sandbox.commands.run("sleep 30", command_timeout=1)
    check("runtime run timeout", r.timed_out and r.exit_code == 124, r)
    files = sandbox.files
    files.write("data/in.csv", "1,2\n")
    check("runtime files.write", open(os.path.join(workdir, "data/in.csv")).read() == "1,2\n")
    check("runtime files.read", files.read("data/in.csv") == b"1,2\n")
    check("runtime files.list", [e.name for e in files.list("data")] == ["in.csv"])
    check("runtime files.exists", files.exists("data/in.csv") and not files.exists("data/no"))
    check("runtime escape refused", status_of(lambda: files.read("../x", allow_unsafe_paths=True)) == 403)
    check("runtime without the token is 401", status_of(lambda: bare.commands.run("true")) == 401)


def main():
    binary = os.path.abspath(sys.argv[1])
    procs = []
    with tempfile.TemporaryDirectory(prefix="ar-agent-sandbox") as tmp:
        try:
            d_work = os.path.join(tmp, "d", "workspace")
            r_work = os.path.join(tmp, "r", "workspace")
            os.makedirs(d_work)
            os.makedirs(r_work)
            rest, grpc_port, runtime = free_port(), free_port(), free_port()
            procs.append(serve(binary, d_work, [f"sandboxd-rest=127.0.0.1:{rest}",
                                                f"sandboxd-grpc=127.0.0.1:{grpc_port}"], {}))
            procs.append(serve(binary, r_work, [f"python-runtime=127.0.0.1:{runtime}"],
                               {"AGENT_REACH_TOKEN": TOKEN}))
            wait_http(f"http://127.0.0.1:{rest}/v1/health")
            wait_http(f"http://127.0.0.1:{runtime}/")
            sandboxd = Sandbox(
                "claim-1", "sandbox-1",
                connection_config=SandboxdInClusterConnectionConfig(
                    mode="in-cluster-pod-ip", rest_port=rest, grpc_port=grpc_port),
                k8s_helper=StubK8sHelper(),
            )
            sandboxd_checks(sandboxd, d_work)
            start_checks(grpc_port)
            sandboxd.close_connection()
            direct = lambda headers: Sandbox(  # noqa: E731
                "claim-2", "sandbox-2",
                connection_config=SandboxDirectConnectionConfig(
                    api_url=f"http://127.0.0.1:{runtime}", extra_headers=headers),
                k8s_helper=StubK8sHelper(),
            )
            runtime_checks(direct({"Authorization": f"Bearer {TOKEN}"}), direct({}), r_work)
        finally:
            for p in procs:
                p.terminate()
            for p in procs:
                try:
                    p.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    p.kill()
    print(f"{len(FAILURES)} failed" if FAILURES else "all checks passed")
    sys.exit(min(len(FAILURES), 100))


if __name__ == "__main__":
    main()
