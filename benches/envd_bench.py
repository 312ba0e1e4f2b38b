"""The envd door against its baselines, all on one `serve` with both the
`envd` and the `sandboxd-grpc` listeners, measured in interleaved blocks
so a change of machine load hits each alike:

1. round trip of `true`: E2B's published Python SDK `commands.run("true")`,
   sandboxd-grpc's unary `Execute` through grpcio, and a bare fork+exec
   (posix_spawn and wait); per-call medians;
2. a 1 GiB stdout stream (`yes | head -c 1G`): envd's `Start` read as the
   SDK reads it (Connect over HTTP/1.1, `application/connect+proto`
   envelopes, here with the standard library so that no SDK callback sits
   in the loop), sandboxd-grpc's `Start` through grpcio, and the pipeline
   into `cat`; MiB/s medians and envd's share of the gRPC rate;
3. the server's RSS per live process: `--live N` background `sleep`s
   started through the SDK, RSS before and after.

Usage: python benches/envd_bench.py AGENT_REACH_BIN [--calls 200]
       [--bytes 1073741824] [--runs 5] [--live 100]
Run by benches/envd.sh, which makes the venv.
"""

import argparse
import http.client
import os
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time

import grpc
from e2b import Sandbox

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "common"))
sys.path.insert(0, os.path.join(HERE, "common"))
from grpc_wire import event, field, start_request  # noqa: E402
from loopback import fork_exec_calls, free_port, interleaved, stop, timed, wait_for  # noqa: E402

BLOCK = 25




def rss_kib(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise SystemExit(f"no VmRSS for {pid}")


def sdk_calls(sandbox, n):
    return timed(n, lambda: sandbox.commands.run("true"), lambda r: r.exit_code == 0)


def execute_calls(execute, n):
    request = start_request("true")
    # ExecuteResponse{exit_code = 1}: a zero exit code is not sent.
    return timed(n, lambda: execute(request, timeout=30),
                 lambda answer: not answer or answer[0] != 0x08 or answer[1] == 0)


def envd_start_request(script):
    """process.StartRequest{process: ProcessConfig{cmd, args}} in a Connect envelope."""
    config = field(1, b"/bin/sh") + field(2, b"-c") + field(2, script.encode())
    message = field(1, config)
    return struct.pack(">BI", 0, len(message)) + message


def envd_stream(port, size):
    """MiB/s of one envd `Start` of `size` stdout bytes, every byte counted."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    began = time.monotonic()
    conn.request("POST", "/process.Process/Start", body=envd_start_request(f"yes | head -c {size}"),
                 headers={"Content-Type": "application/connect+proto", "Connect-Protocol-Version": "1"})
    response = conn.getresponse()
    assert response.status == 200, response.status
    stdout = 0
    ended = False
    while True:
        head = response.read(5)
        if len(head) < 5:
            break
        flags, length = struct.unpack(">BI", head)
        message = response.read(length)
        if flags & 0x02:
            break
        # StartResponse{event: ProcessEvent{data: DataEvent{stdout = 1}}}
        number, process_event = event(message)
        kind, payload = event(process_event) if number == 1 else (0, b"")
        if kind == 2:
            data_kind, data = event(payload)
            if data_kind == 1:
                stdout += len(data)
        elif kind == 3:
            ended = True
    took = time.monotonic() - began
    conn.close()
    if stdout < size or not ended:
        raise SystemExit(f"the envd stream ended after {stdout} of {size} bytes (end event: {ended})")
    return size / took / 2**20


def grpc_stream(start, size):
    began = time.monotonic()
    stdout = 0
    for message in start(start_request("/bin/sh", "-c", f"yes | head -c {size}"), timeout=300):
        number, payload = event(message)
        if number == 2:
            stdout += len(payload)
    took = time.monotonic() - began
    if stdout < size:
        raise SystemExit(f"the gRPC stream ended after {stdout} of {size} bytes")
    return size / took / 2**20


def into_cat(size):
    began = time.monotonic()
    subprocess.run(["/bin/sh", "-c", f"yes | head -c {size} | cat > /dev/null"], check=True)
    return size / (time.monotonic() - began) / 2**20


def main(args):
    work = tempfile.mkdtemp(prefix="ar-envd-bench-")
    root = os.path.join(work, "root")
    os.mkdir(root)
    # Room for the live processes of part 3 (each holds a scheduler slot
    # and a session seat).
    registry = os.path.join(work, "registry.toml")
    with open(registry, "w") as f:
        f.write(f"allow_raw_commands = true\n[scheduler]\nglobal = {args.live + 8}\n")
    envd_port, grpc_port = free_port(), free_port()
    server = subprocess.Popen(
        [args.bin, "serve", "--root", root, "--config", registry, "--max-sessions", str(args.live + 8), "--max-sessions-per-client", str(args.live + 8),
         "--listen", f"envd=127.0.0.1:{envd_port}",
         "--listen", f"sandboxd-grpc=127.0.0.1:{grpc_port}",
         "--log-file", os.path.join(work, "serve.log")],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={"PATH": "/usr/bin:/bin", "HOME": work, "AGENT_REACH_HOME": os.path.join(work, "home")},
    )
    try:
        wait_for(envd_port)
        wait_for(grpc_port)
        sandbox = Sandbox.create(debug=True, sandbox_url=f"http://127.0.0.1:{envd_port}")
        channel = grpc.insecure_channel(f"127.0.0.1:{grpc_port}")
        identity = dict(request_serializer=lambda b: b, response_deserializer=lambda b: b)
        execute = channel.unary_unary("/process.v1.ProcessService/Execute", **identity)
        start = channel.unary_stream("/process.v1.ProcessService/Start", **identity)

        # 1. Round trips.
        sdk_calls(sandbox, 5)
        execute_calls(execute, 5)
        samples = interleaved(args.calls, BLOCK, {
            "e2b SDK commands.run": lambda n: sdk_calls(sandbox, n),
            "sandboxd-grpc Execute": lambda n: execute_calls(execute, n),
            "bare fork+exec": fork_exec_calls,
        })
        medians = {name: statistics.median(t) * 1000 for name, t in samples.items()}
        for name, ms in medians.items():
            print(f"round trip of 'true' x{args.calls}, {name}: median {ms:.2f} ms")
        print(f"  SDK / Execute: {medians['e2b SDK commands.run'] / medians['sandboxd-grpc Execute']:.2f}x, "
              f"SDK / fork+exec: {medians['e2b SDK commands.run'] / medians['bare fork+exec']:.1f}x")

        # 2. Streams.
        rates = {"envd Start": [], "sandboxd-grpc Start": [], "into cat": []}
        for run in range(args.runs):
            rates["envd Start"].append(envd_stream(envd_port, args.bytes))
            rates["sandboxd-grpc Start"].append(grpc_stream(start, args.bytes))
            rates["into cat"].append(into_cat(args.bytes))
            print(f"stream run {run + 1}: " + ", ".join(f"{k} {v[-1]:.0f} MiB/s" for k, v in rates.items()))
        median = {k: statistics.median(v) for k, v in rates.items()}
        print(f"{args.bytes >> 20} MiB stdout x{args.runs}, medians: "
              + ", ".join(f"{k} {v:.0f} MiB/s" for k, v in median.items()))
        print(f"  envd / gRPC Start: {median['envd Start'] / median['sandboxd-grpc Start']:.0%}, "
              f"envd / cat: {median['envd Start'] / median['into cat']:.0%}")

        # 3. RSS per live process.
        time.sleep(1)
        before = rss_kib(server.pid)
        handles = [sandbox.commands.run("sleep 600", background=True) for _ in range(args.live)]
        time.sleep(1)
        after = rss_kib(server.pid)
        print(f"server RSS: {before} KiB idle, {after} KiB with {args.live} live processes: "
              f"{(after - before) / args.live:.0f} KiB each")
        for handle in handles:
            handle.kill()
    finally:
        stop(server)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("bin")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--bytes", type=int, default=1 << 30)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--live", type=int, default=100)
    main(parser.parse_args())
