"""`process.exec("true")` through Daytona's published Python SDK against
agent-reach's `daytona` listener, beside the same command through the
`python-runtime` listener's `/execute` of the same server (a plain HTTP
POST) and a bare fork+exec of `true` (posix_spawn and wait), in
interleaved blocks so a change of machine load hits all three alike;
per-call medians.

Usage: python benches/daytona_exec.py AGENT_REACH_BIN [--calls 200]
Run by benches/daytona.sh, which makes the venv.
"""

import argparse
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from daytona import Daytona, DaytonaConfig

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "common"))
from loopback import fork_exec_calls, free_port, interleaved, stop, timed, wait_for  # noqa: E402

TOKEN = "bench-token"
BLOCK = 25




def sdk_calls(sandbox, n):
    return timed(n, lambda: sandbox.process.exec("true"), lambda r: r.exit_code == 0)


def runtime_calls(conn, n):
    body = json.dumps({"command": "true"})
    headers = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}

    def call():
        conn.request("POST", "/execute", body=body, headers=headers)
        return json.loads(conn.getresponse().read())

    return timed(n, call, lambda answer: answer["exit_code"] == 0)


def main(args):
    work = tempfile.mkdtemp(prefix="ar-daytona-bench-")
    token_file = os.path.join(work, "token")
    with open(os.open(token_file, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
        f.write(TOKEN + "\n")
    root = os.path.join(work, "root")
    os.mkdir(root)
    daytona_port, runtime_port = free_port(), free_port()
    server = subprocess.Popen(
        [args.bin, "serve", "--root", root, "--token-file", token_file,
         "--listen", f"daytona=127.0.0.1:{daytona_port}",
         "--listen", f"python-runtime=127.0.0.1:{runtime_port}",
         "--log-file", os.path.join(work, "serve.log")],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    try:
        wait_for(daytona_port)
        wait_for(runtime_port)
        sandbox = Daytona(DaytonaConfig(api_key=TOKEN, api_url=f"http://127.0.0.1:{daytona_port}/api")).get("agent-reach")
        conn = http.client.HTTPConnection("127.0.0.1", runtime_port)
        sdk_calls(sandbox, 5)
        runtime_calls(conn, 5)
        samples = interleaved(args.calls, BLOCK, {
            "daytona SDK process.exec": lambda n: sdk_calls(sandbox, n),
            "python-runtime /execute": lambda n: runtime_calls(conn, n),
            "bare fork+exec": fork_exec_calls,
        })
        for name, times in samples.items():
            print(f"{name} ('true') x{args.calls}: median {statistics.median(times) * 1000:.2f} ms")
    finally:
        stop(server)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("bin")
    parser.add_argument("--calls", type=int, default=200)
    main(parser.parse_args())
