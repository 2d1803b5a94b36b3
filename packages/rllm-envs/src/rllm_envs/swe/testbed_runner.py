"""Runs inside an SWE container: one job of steps on the repository, one JSON reply.

The host sends this file and the job (JSON on stdin) through the sandbox server, which runs it
as the sandbox user with /scratch as its working directory and kills every process of that user
afterwards. Standard library only (it runs on whatever python3 the image has, isolated: ``-I -S``).

Steps, in order, each optional::

    {"workdir": "/testbed",
     "reverse": ["gold.patch"],        # git apply -R (the image holds the fixed tree)
     "apply": ["agent.patch", ...],    # git apply (stops at the first that does not apply)
     "remove": ["tests/test_x.py"],    # files deleted (hidden tests)
     "clean": true,                    # __pycache__, .pytest_cache, *.pyc removed
     "git_init": {"date": "...", "name": "...", "email": "...", "message": "..."},
     "diff_names": "<commit>",         # paths changed since <commit> (after git add -A)
     "diff": {"base": "<commit>", "paths": [...]},   # the binary diff of those paths
     "test": {"command": "...", "timeout": 60, "report": true, "log_bytes": 20000}}

Patch files are relative to /scratch (the host writes them there with the job).
"""

import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

SCRATCH = "/scratch"


def git(args, workdir, env, stdin=None, timeout=120):
    return subprocess.run(
        ["git", *args],
        cwd=workdir,
        env=env,
        input=stdin,
        capture_output=True,
        timeout=timeout,
    )


def failed(reply, step, completed):
    text = (completed.stderr or completed.stdout or b"").decode("utf-8", "replace")
    reply["error"] = {"step": step, "message": text.strip()[-4000:]}
    return reply


def apply_patches(names, workdir, env, reverse, reply):
    for name in names:
        path = os.path.join(SCRATCH, name)
        if os.path.getsize(path) == 0:
            continue
        args = ["apply", "--whitespace=nowarn"]
        if reverse:
            args.append("-R")
        completed = git([*args, path], workdir, env)
        if completed.returncode != 0:
            return failed(reply, ("reverse:" if reverse else "apply:") + name, completed)
        reply.setdefault("applied", []).append(name)
    return None


def remove_files(paths, workdir):
    removed = []
    for relative in paths:
        path = os.path.normpath(os.path.join(workdir, relative))
        if not path.startswith(workdir.rstrip("/") + "/"):
            continue
        if os.path.isfile(path) or os.path.islink(path):
            os.unlink(path)
            removed.append(relative)
    return removed


def clean_caches(workdir):
    for root, dirs, files in os.walk(workdir):
        for name in list(dirs):
            if name in ("__pycache__", ".pytest_cache"):
                shutil.rmtree(os.path.join(root, name), ignore_errors=True)
                dirs.remove(name)
            elif name == ".git" and root == workdir:
                dirs.remove(name)
        for name in files:
            if name.endswith((".pyc", ".pyo")):
                os.unlink(os.path.join(root, name))


def git_init(spec, workdir, env, reply):
    shutil.rmtree(os.path.join(workdir, ".git"), ignore_errors=True)
    env = dict(env)
    env.update(
        GIT_AUTHOR_NAME=spec["name"],
        GIT_AUTHOR_EMAIL=spec["email"],
        GIT_AUTHOR_DATE=spec["date"],
        GIT_COMMITTER_NAME=spec["name"],
        GIT_COMMITTER_EMAIL=spec["email"],
        GIT_COMMITTER_DATE=spec["date"],
    )
    for step, args in (
        ("git init", ["init", "-q", "-b", "main"]),
        ("git add", ["add", "-A"]),
        ("git commit", ["commit", "-q", "--no-verify", "-m", spec["message"]]),
    ):
        completed = git(args, workdir, env)
        if completed.returncode != 0:
            return failed(reply, step, completed)
    completed = git(["rev-parse", "HEAD"], workdir, env)
    if completed.returncode != 0:
        return failed(reply, "git rev-parse", completed)
    reply["head"] = completed.stdout.decode().strip()
    return None


def diff_names(base, workdir, env, reply):
    completed = git(["add", "-A"], workdir, env)
    if completed.returncode != 0:
        return failed(reply, "git add", completed)
    completed = git(["diff", "--cached", "--no-renames", "--name-only", "-z", base], workdir, env)
    if completed.returncode != 0:
        return failed(reply, "git diff --name-only", completed)
    reply["paths"] = [
        p for p in completed.stdout.decode("utf-8", "surrogateescape").split("\0") if p
    ]
    return None


def diff(spec, workdir, env, reply):
    if not spec["paths"]:
        reply["patch"] = ""
        return None
    env = dict(env, GIT_LITERAL_PATHSPECS="1")
    completed = git(
        ["diff", "--cached", "--no-renames", "--binary", "--full-index", "--no-color"]
        + ["--no-ext-diff", "--no-textconv", spec["base"], "--", *spec["paths"]],
        workdir,
        env,
    )
    if completed.returncode != 0:
        return failed(reply, "git diff", completed)
    reply["patch"] = base64.b64encode(completed.stdout).decode()
    return None


def run_tests(spec, workdir, env, reply):
    folder = tempfile.mkdtemp(prefix="report-", dir=SCRATCH)
    report = os.path.join(folder, "report.xml")
    log_path = os.path.join(folder, "log.txt")
    command = spec["command"].replace("{report}", report)
    started = time.monotonic()
    timed_out = False
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            ["bash", "-c", command],
            cwd=workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            exit_code = process.wait(timeout=spec["timeout"])
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(process.pid, 9)
            exit_code = process.wait()
    result = {"exit_code": exit_code, "timed_out": timed_out, "seconds": time.monotonic() - started}
    with open(log_path, "rb") as log:
        data = log.read()
    keep = spec.get("log_bytes", 20000)
    result["log"] = (
        data.decode("utf-8", "replace")
        if len(data) <= 4 * keep
        else (
            data[:keep].decode("utf-8", "replace")
            + "\n[... log cut ...]\n"
            + data[-3 * keep :].decode("utf-8", "replace")
        )
    )
    if spec.get("report") and os.path.isfile(report):
        with open(report, "rb") as handle:
            result["report"] = handle.read(64 << 20).decode("utf-8", "replace")
    reply["test"] = result
    return None


def main():
    job = json.loads(sys.stdin.read())
    workdir = os.path.normpath(job.get("workdir", "/testbed"))
    env = dict(os.environ)
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL="/dev/null", GIT_TERMINAL_PROMPT="0")
    reply = {}
    steps = (
        ("reverse", lambda v: apply_patches(v, workdir, env, True, reply)),
        ("apply", lambda v: apply_patches(v, workdir, env, False, reply)),
        ("remove", lambda v: reply.__setitem__("removed", remove_files(v, workdir))),
        ("clean", lambda v: clean_caches(workdir) if v else None),
        ("git_init", lambda v: git_init(v, workdir, env, reply)),
        ("diff_names", lambda v: diff_names(v, workdir, env, reply)),
        ("diff", lambda v: diff(v, workdir, env, reply)),
        ("test", lambda v: run_tests(v, workdir, env, reply)),
    )
    for name, step in steps:
        if name in job:
            try:
                step(job[name])
            except Exception as error:  # reported, not raised: the host decides what it means
                reply["error"] = {"step": name, "message": f"{type(error).__name__}: {error}"}
            if "error" in reply:
                break
    sys.stdout.write(json.dumps(reply))


if __name__ == "__main__":
    main()
