#!/usr/bin/env python3
"""Whole-process benchmark of the release `apply_patch` against `git apply`.

Why: apply_patch reads, matches and rewrites files in one process, all or
nothing; `git apply` is the baseline a user would reach for. Both apply the
same change, given as a Codex patch and as the equivalent unified diff, in
the same run, each run on a fresh copy of the input tree (copying is not
timed). Three cases: a 1-file add, a 5,000-line file with 200 hunks, and
1,000 files changed by one patch. Prints medians (ms) and the ratio
apply_patch / git apply; exits non-zero if a result tree is wrong.

usage: benches/apply_patch.py [--runs N] [--binary PATH]
  (default binary: target/dist/agent-reach; build it with
   `./install.sh --build-only` first)
"""

import argparse
import difflib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def codex_update(path, old, new, context=3):
    """A Codex `*** Update File` section turning lines `old` into `new`."""
    out = [f"*** Update File: {path}"]
    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    for group in matcher.get_grouped_opcodes(context):
        out.append("@@")
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                out += [" " + l for l in old[i1:i2]]
            else:
                out += ["-" + l for l in old[i1:i2]]
                out += ["+" + l for l in new[j1:j2]]
    return out


def unified(path, old, new, context=3):
    lines = difflib.unified_diff(
        [l + "\n" for l in old], [l + "\n" for l in new],
        f"a/{path}", f"b/{path}", n=context)
    return "".join(lines)


def case_add():
    body = [f"new line {i}" for i in range(50)]
    codex = ["*** Begin Patch", "*** Add File: added.txt"] + ["+" + l for l in body] + ["*** End Patch"]
    diff = (f"diff --git a/added.txt b/added.txt\nnew file mode 100644\n--- /dev/null\n+++ b/added.txt\n"
            f"@@ -0,0 +1,{len(body)} @@\n" + "".join("+" + l + "\n" for l in body))
    return {}, {"added.txt": body}, "\n".join(codex) + "\n", diff


def case_big_file():
    old = [f"line {i}: some typical source text = value_{i};" for i in range(5000)]
    new = list(old)
    for hunk in range(200):
        i = hunk * 25 + 12
        new[i] = f"line {i}: changed text = other_{i};"
    codex = ["*** Begin Patch"] + codex_update("big.txt", old, new) + ["*** End Patch"]
    return {"big.txt": old}, {"big.txt": new}, "\n".join(codex) + "\n", unified("big.txt", old, new)


def case_many_files():
    before, after, codex, diff = {}, {}, ["*** Begin Patch"], []
    for n in range(1000):
        path = f"src/mod{n // 100}/file{n}.txt"
        old = [f"// file {n}", "fn main() {", f"    let x = {n};", "    println!(x);", "}"]
        new = list(old)
        new[2] = f"    let x = {n} + 1;"
        before[path], after[path] = old, new
        codex += codex_update(path, old, new)
        diff.append(unified(path, old, new))
    codex.append("*** End Patch")
    return before, after, "\n".join(codex) + "\n", "".join(diff)


def write_tree(root, tree):
    for path, lines in tree.items():
        full = os.path.join(root, path)
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w") as f:
            f.write("".join(l + "\n" for l in lines))


def check_tree(root, tree, label):
    for path, lines in tree.items():
        with open(os.path.join(root, path)) as f:
            if f.read() != "".join(l + "\n" for l in lines):
                sys.exit(f"{label}: wrong result in {path}")


def run_once(argv, stdin_path, template, expected, label):
    """One timed run on a fresh copy of `template`; returns milliseconds."""
    work = tempfile.mkdtemp(prefix="ap-bench-")
    try:
        shutil.rmtree(work)
        shutil.copytree(template, work, symlinks=True)
        with open(stdin_path, "rb") as stdin:
            started = time.perf_counter()
            done = subprocess.run(argv, cwd=work, stdin=stdin,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            elapsed = (time.perf_counter() - started) * 1000
        if done.returncode != 0:
            sys.exit(f"{label} failed ({done.returncode}): {done.stderr.decode()}")
        if expected is not None:
            check_tree(work, expected, label)
        return elapsed
    finally:
        shutil.rmtree(work, ignore_errors=True)


def time_pair(ours, theirs, runs):
    """Medians of both commands, runs interleaved so load drift hits both."""
    a, b = [], []
    for _ in range(runs):
        a.append(ours())
        b.append(theirs())
    return statistics.median(a), statistics.median(b)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21)
    parser.add_argument("--binary", default=os.path.join(ROOT, "target/dist/agent-reach"))
    args = parser.parse_args()
    if not os.access(args.binary, os.X_OK):
        sys.exit(f"no executable at {args.binary}: run `./install.sh --build-only` first")
    git = shutil.which("git")
    if not git:
        sys.exit("git not found: it is the baseline")
    scratch = tempfile.mkdtemp(prefix="ap-bench-data-")
    try:
        link = os.path.join(scratch, "apply_patch")
        os.symlink(os.path.abspath(args.binary), link)
        empty = os.path.join(scratch, "empty")
        os.makedirs(empty)
        help_path = os.path.join(scratch, "nothing")
        open(help_path, "w").close()
        startup = statistics.median(
            run_once([link, "--help"], help_path, empty, None, "apply_patch --help")
            for _ in range(args.runs))
        print(f"process start floor (apply_patch --help): {startup:.2f} ms")
        print(f"{'case':<28}{'apply_patch ms':>16}{'git apply ms':>14}{'ratio':>8}")
        for name, make in [("1-file add", case_add),
                           ("5,000 lines, 200 hunks", case_big_file),
                           ("1,000 files, one patch", case_many_files)]:
            before, after, codex, diff = make()
            template = os.path.join(scratch, "template")
            shutil.rmtree(template, ignore_errors=True)
            os.makedirs(template)
            write_tree(template, before)
            codex_path = os.path.join(scratch, "patch.txt")
            diff_path = os.path.join(scratch, "patch.diff")
            with open(codex_path, "w") as f:
                f.write(codex)
            with open(diff_path, "w") as f:
                f.write(diff)
            ours, theirs = time_pair(
                lambda: run_once([link], codex_path, template, after, f"apply_patch {name}"),
                lambda: run_once([git, "apply", "-"], diff_path, template, after, f"git apply {name}"),
                args.runs)
            print(f"{name:<28}{ours:>16.2f}{theirs:>14.2f}{ours / theirs:>8.2f}")
        print(f"(medians of {args.runs} interleaved runs each; ratio < 1 means apply_patch is faster)")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
