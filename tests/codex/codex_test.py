#!/usr/bin/env python3
"""The real Codex CLI (the pinned npm release) driven by a scripted model
(mock_model.py) with agent-reach as its exec-server, over WebSocket
(CODEX_EXEC_SERVER_URL) and over stdio ($CODEX_HOME/environments.toml).
Asserts on what the model receives back from each tool call, on the files
apply_patch changed, on /proc after the turn, and on the stdio traffic
(recorded with `tee` on both pipes); checks that Codex's
read-only sandbox holds; then times one
`exec_command` of `true` through agent-reach and through Codex's own local
execution, same model, same run.

Usage: codex_test.py CODEX_BIN AGENT_REACH_BIN WORKDIR
"""

import json
import os
import re
import socket
import subprocess
import sys
import time

CODEX, AGENT_REACH, WORK = sys.argv[1:4]
HERE = os.path.dirname(os.path.abspath(__file__))
ESCAPEE = b"sleep\x00777.125\x00"
FAILURES = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        FAILURES.append(what)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def escapees():
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if f.read() == ESCAPEE:
                        found.append(int(pid))
            except OSError:
                pass
    return found


def patch(body):
    return "apply_patch <<'EOF'\n*** Begin Patch\n" + body + "*** End Patch\nEOF\n"


# The scripted turns: one request of Codex each, one tool call each.
SCRIPT = [
    [{"call": "exec_command", "args": {"cmd": "echo via-reach; echo S=$AGENT_REACH_SESSION; pwd"}}],
    [{"call": "exec_command", "args": {"cmd": "echo hi; exit 3"}}],
    [{"call": "exec_command", "args": {"cmd": "setsid sleep 777.125 > /dev/null 2>&1 & echo bg"}}],
    [{"call": "exec_command", "args": {"cmd": "read line; echo got:$line", "tty": True, "yield_time_ms": 500}}],
    [{"call": "write_stdin", "args": {"session_id": "$session_id", "chars": "hello\n", "yield_time_ms": 2000}}],
    [{"call": "exec_command", "args": {"cmd": "seq 1 200000; echo flood-end"}}],
    [{"call": "exec_command", "args": {"cmd": patch("*** Add File: hello.txt\n+hello one\n")}}],
    [{"call": "exec_command", "args": {"cmd": patch("*** Update File: hello.txt\n@@\n-hello one\n+hello two\n")}}],
    [{"call": "exec_command", "args": {"cmd": patch("*** Add File: sub/dir/inner.txt\n+inner\n")}}],
    [{"say": "done"}],
]


def start_model(case, script):
    with open(f"{case}/script.json", "w") as f:
        json.dump(script, f)
    port_file = f"{case}/model.port"
    model = subprocess.Popen(
        [sys.executable, f"{HERE}/mock_model.py", f"{case}/script.json", f"{case}/model.jsonl", port_file]
    )
    for _ in range(100):
        if os.path.exists(port_file):
            break
        time.sleep(0.05)
    with open(port_file) as f:
        return model, int(f.read())


def codex_home(case, model_port, environments=None):
    home = f"{case}/codex-home"
    os.makedirs(home, exist_ok=True)
    with open(f"{home}/config.toml", "w") as f:
        f.write(
            'model = "mock-model"\nmodel_provider = "mock"\n'
            "[model_providers.mock]\n"
            f'name = "mock"\nbase_url = "http://127.0.0.1:{model_port}/v1"\n'
            'wire_api = "responses"\nrequest_max_retries = 0\nstream_max_retries = 0\n'
        )
    if environments:
        with open(f"{home}/environments.toml", "w") as f:
            f.write(environments)
    return home


def run_codex(case, home, project, extra_env, sandbox="workspace-write"):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CODEX_", "OPENAI_"))}
    env.update({"CODEX_HOME": home, **extra_env})
    started = time.monotonic()
    done = subprocess.run(
        [CODEX, "exec", "-s", sandbox, "--skip-git-repo-check", "--color", "never", "go"],
        cwd=project, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=240,
    )
    with open(f"{case}/codex.out", "w") as f:
        f.write(done.stdout + "\n--- stderr ---\n" + done.stderr)
    return done, time.monotonic() - started


def outputs(case):
    """call_id -> the output the model received for it."""
    found = {}
    with open(f"{case}/model.jsonl") as f:
        for line in f:
            body = json.loads(line)["body"]
            for item in body.get("input", []) if isinstance(body, dict) else []:
                if item.get("type") in ("function_call_output", "custom_tool_call_output"):
                    out = item.get("output")
                    found[item["call_id"]] = out if isinstance(out, str) else json.dumps(out)
    return found


def serve_ws(case, project):
    port = free_port()
    server = subprocess.Popen(
        [AGENT_REACH, "serve", "--root", project, "--listen", f"codex-exec=127.0.0.1:{port}",
         "--log-file", f"{case}/serve.log"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            time.sleep(0.05)
    return server, port


def scenario(name):
    case = os.path.join(WORK, name)
    project = os.path.join(case, "project")
    os.makedirs(project)
    project = os.path.realpath(project)
    model, model_port = start_model(case, SCRIPT)
    server = None
    try:
        if name == "ws":
            server, port = serve_ws(case, project)
            home = codex_home(case, model_port)
            done, _ = run_codex(case, home, project, {"CODEX_EXEC_SERVER_URL": f"ws://127.0.0.1:{port}"})
        else:
            # The server's traffic recorded on its way: `tee` on both pipes.
            record = f'tee {case}/traffic-in.jsonl | "$0" "$@" | tee {case}/traffic-out.jsonl'
            args = ["-c", record, AGENT_REACH, "serve", "--stdio", "codex-exec", "--root", project,
                    "--log-file", case + "/serve.log"]
            environments = (
                'default = "reach"\ninclude_local = false\n\n[[environments]]\nid = "reach"\n'
                f'program = "/bin/sh"\nargs = {json.dumps(args)}\n'
            )
            home = codex_home(case, model_port, environments)
            done, _ = run_codex(case, home, project, {})
        left = escapees()
        print(f"== {name}: codex exit {done.returncode}")
        check(done.returncode == 0, f"{name}: codex exec succeeded (see {case}/codex.out)")
        got = outputs(case)
        out = lambda turn: got.get(f"call{turn}_0", "")
        check("via-reach\n" in out(0) and re.search(r"S=ar-\S+", out(0)) and project in out(0),
              f"{name}: the command ran through agent-reach in the project: {out(0)!r}")
        check("exited with code 3" in out(1) and "hi" in out(1), f"{name}: exit code 3 reached the model: {out(1)!r}")
        check("bg" in out(2) and "exited with code 0" in out(2), f"{name}: the escapee's parent returned: {out(2)!r}")
        check(not left, f"{name}: the setsid escapee is gone from /proc after the turn: {left}")
        check("session ID" in out(3), f"{name}: the reading command yielded a session: {out(3)!r}")
        check("got:hello" in out(4), f"{name}: write_stdin reached it: {out(4)!r}")
        check("exited with code 0" in out(5) and "flood-end" in out(5), f"{name}: the flood ended: {out(5)[-300:]!r}")
        check("Success" in out(6) and "Success" in out(7) and "Success" in out(8),
              f"{name}: apply_patch succeeded: {[out(6), out(7), out(8)]!r}")
        if name == "stdio":
            traffic(case, project)
        read = lambda rel: open(os.path.join(project, rel)).read() if os.path.exists(os.path.join(project, rel)) else None
        check(read("hello.txt") == "hello two\n", f"{name}: hello.txt was added then changed: {read('hello.txt')!r}")
        check(read("sub/dir/inner.txt") == "inner\n", f"{name}: a file in a missing directory was added: {read('sub/dir/inner.txt')!r}")
    finally:
        for proc in (server, model):
            if proc:
                proc.terminate()
                proc.wait(timeout=10)


def traffic(case, project):
    """What went over stdio: Codex's messages and ours, one per line, none
    with a "jsonrpc" field; apply_patch's write into a missing directory
    got -32004, then Codex created the directory and wrote again."""
    def lines(path):
        with open(path) as f:
            return [json.loads(line) for line in f if line.strip()]
    sent, answered = lines(f"{case}/traffic-in.jsonl"), lines(f"{case}/traffic-out.jsonl")
    check(all("jsonrpc" not in m for m in sent + answered), "stdio: no message carries a jsonrpc field")
    inner = f"file://{project}/sub/dir/inner.txt"
    writes = [m["id"] for m in sent if m.get("method") == "fs/writeFile" and m["params"]["path"] == inner]
    replies = {m.get("id"): m for m in answered if "id" in m}
    codes = [replies.get(i, {}).get("error", {}).get("code") for i in writes]
    made = [m for m in sent if m.get("method") == "fs/createDirectory"]
    check(len(writes) == 2 and codes == [-32004, None] and made,
          f"stdio: the write into sub/dir got -32004, then createDirectory, then it landed: {codes} {len(made)}")
    started = [m for m in sent if m.get("method") == "process/start"]
    closed = [m for m in answered if m.get("method") == "process/closed"]
    check(len(started) >= 5 and len(closed) == len(started),
          f"stdio: every process Codex started was closed: {len(started)} started, {len(closed)} closed")


def read_only():
    """`codex exec -s read-only`: Codex's sandbox is honoured by ours."""
    case = os.path.join(WORK, "read-only")
    project = os.path.join(case, "project")
    os.makedirs(project)
    project = os.path.realpath(project)
    script = [[{"call": "exec_command", "args": {"cmd": "touch made-here; echo touch=$?"}}], [{"say": "done"}]]
    model, model_port = start_model(case, script)
    server = None
    try:
        server, port = serve_ws(case, project)
        home = codex_home(case, model_port)
        done, _ = run_codex(case, home, project, {"CODEX_EXEC_SERVER_URL": f"ws://127.0.0.1:{port}"}, "read-only")
        out = outputs(case).get("call0_0", "")
        check(done.returncode == 0, f"read-only: codex exec succeeded (see {case}/codex.out)")
        check("touch=1" in out and not os.path.exists(os.path.join(project, "made-here")),
              f"read-only: Codex's read-only sandbox held in agent-reach's: {out!r}")
    finally:
        for proc in (server, model):
            if proc:
                proc.terminate()
                proc.wait(timeout=10)


def tool_turn(case):
    """Seconds from the model's request that got the tool call to the
    request carrying its output: the turn as the model sees it."""
    with open(f"{case}/model.jsonl") as f:
        at = [json.loads(line)["at"] for line in f]
    return at[1] - at[0] if len(at) > 1 else None


BENCH_ROUNDS = 5


def bench_once(mode, round_no):
    script = [[{"call": "exec_command", "args": {"cmd": "true"}}], [{"say": "done"}]]
    case = os.path.join(WORK, f"bench-{mode}-{round_no}")
    os.makedirs(os.path.join(case, "project"))
    project = os.path.realpath(os.path.join(case, "project"))
    model, model_port = start_model(case, script)
    server = None
    try:
        home = codex_home(case, model_port)
        extra = {}
        if mode == "agent-reach":
            server, port = serve_ws(case, project)
            extra = {"CODEX_EXEC_SERVER_URL": f"ws://127.0.0.1:{port}"}
        done, total = run_codex(case, home, project, extra)
        check(done.returncode == 0, f"benchmark {mode} #{round_no}: codex exec succeeded")
        return tool_turn(case), total
    finally:
        for proc in (server, model):
            if proc:
                proc.terminate()
                proc.wait(timeout=10)


def benchmark():
    """One `exec_command` of `true` per run, through agent-reach (over
    WebSocket) and through Codex's local execution, alternating, same
    model: the medians of Codex's own wall time of the tool call and of the
    whole `codex exec`."""
    runs = {"agent-reach": [], "local": []}
    for round_no in range(BENCH_ROUNDS):
        for mode in runs:
            runs[mode].append(bench_once(mode, round_no))
    median = lambda xs: sorted(xs)[len(xs) // 2]
    for mode, got in runs.items():
        turns = [t for t, _ in got if t is not None]
        print(f"benchmark {mode}: exec_command `true`: median {median(turns):.4f} s per tool-call turn "
              f"(as the model sees it), median whole codex exec {median([w for _, w in got]):.3f} s ({BENCH_ROUNDS} runs)")
    ar = median([t for t, _ in runs["agent-reach"] if t is not None])
    local = median([t for t, _ in runs["local"] if t is not None])
    print(f"benchmark: difference {ar - local:+.4f} s per exec_command (agent-reach minus local)")


for name in ("ws", "stdio"):
    scenario(name)
read_only()
benchmark()
if FAILURES:
    print(f"{len(FAILURES)} check(s) failed")
    sys.exit(1)
print("every check passed")
