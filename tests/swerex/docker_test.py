"""SWE-ReX's DockerDeployment, unchanged, starting the image given as argv[1]
(agent-reach's `swerex-remote` inside). Every failed check is printed; the
exit code is the number of failures."""

import asyncio
import sys

from swerex.deployment.docker import DockerDeployment
from swerex.runtime.abstract import (
    BashAction,
    Command,
    CreateBashSessionRequest,
    ReadFileRequest,
    WriteFileRequest,
)
from swerex.exceptions import NonZeroExitCodeError

FAILURES = []


def check(name, ok, detail=""):
    print(("ok   " if ok else "FAIL ") + name + ("" if ok else f": {detail}"))
    if not ok:
        FAILURES.append(name)


async def main(image):
    deployment = DockerDeployment(image=image, pull="never", startup_timeout=60)
    await deployment.start()
    try:
        rt = deployment.runtime
        check("is_alive", (await rt.is_alive()).is_alive)
        await rt.create_session(CreateBashSessionRequest())
        r = await rt.run_in_session(BashAction(command="cd /tmp && export X=carried"))
        r = await rt.run_in_session(BashAction(command='echo "$X in $(pwd)"'))
        check("a session carries state", r.output.strip() == "carried in /tmp", r)
        try:
            await rt.run_in_session(BashAction(command="false", check="raise"))
            check("check=raise raises", False, "no exception")
        except NonZeroExitCodeError:
            check("check=raise raises NonZeroExitCodeError", True)
        r = await rt.execute(Command(command="uname -s; echo $0", shell=True))
        check("execute runs in the container", r.exit_code == 0 and r.stdout.startswith("Linux\n"), r)
        await rt.write_file(WriteFileRequest(path="/tmp/note.txt", content="from the host\n"))
        got = await rt.read_file(ReadFileRequest(path="/tmp/note.txt"))
        check("write_file then read_file", got.content == "from the host\n", got)
        r = await rt.execute(Command(command=["/usr/local/bin/agent-reach", "--version"]))
        check("the server is agent-reach", r.stdout.startswith("agent-reach "), r)
    finally:
        await deployment.stop()
    print(f"{len(FAILURES)} failed" if FAILURES else "all checks passed")
    return min(len(FAILURES), 100)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1])))
