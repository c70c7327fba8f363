"""Isolation on the daemon (issue #23): the operator's document
(`$CAR_HOME/permissions.toml`) sets it for every session; `tools.execute`
carries the tool context (`cwd` inside the worktree, `isolation`), the result
carries the patch, and a session cannot change it over the wire."""

import asyncio
import os
import shutil
import subprocess
import tempfile

from client import Client
from test_server import Daemon, proposal, run, tool_call

OP = "operator-token-isolation-0123456789"


def git(d, *args):
    return subprocess.run(["git", "-C", d, *args], check=True, capture_output=True, text=True).stdout


def make_repo():
    d = tempfile.mkdtemp(prefix="car-srv-wt-")
    git(d, "init", "-q", "-b", "main")
    git(d, "config", "user.email", "t@example.com")
    git(d, "config", "user.name", "t")
    with open(os.path.join(d, "a.txt"), "w") as f:
        f.write("one\n")
    git(d, "add", "-A")
    git(d, "commit", "-q", "-m", "first")
    return d


def daemon_with(isolation_toml, cwd):
    home = tempfile.mkdtemp(prefix="car-srv-wt-home-")
    with open(os.path.join(home, "permissions.toml"), "w") as f:
        f.write(isolation_toml)
    return Daemon(env={"CAR_AUTH_TOKEN": OP}, home=home, cwd=cwd)


async def client(url, tools, handler):
    c = await Client.connect(url)
    assert (await c.call("session.auth", {"token": OP}))["ok"] is True
    await c.call("tools.register", tools)
    c.handlers["tools.execute"] = handler
    return c


def test_a_worktree_session_gets_the_tree_as_cwd_and_the_patch():
    repo = make_repo()
    d = daemon_with('[isolation]\nkind = "worktree"\n', cwd=repo)
    try:
        seen = []

        async def execute(params):
            seen.append(params)
            with open(os.path.join(params["cwd"], "from_client.txt"), "w") as f:
                f.write("ws\n")
            return "ok"

        async def go():
            c = await client(d.url, [{"name": "edit"}], execute)
            res = await c.call("proposal.submit", {"proposal": proposal([tool_call("e", "edit")], "wt-1")})
            assert res["results"][0]["status"] == "succeeded", res
            [patch] = res["artifacts"]
            assert patch["kind"] == "patch" and patch["files"] == ["from_client.txt"], patch
            assert "+ws" in patch["patch"]
            # A session cannot turn isolation off (or on) over the wire.
            r = await c.request("admission.configure", {"config": {"isolation": "none"}})
            assert "isolation" in r["error"]["message"], r
            await c.close()

        run(go())
        [call] = seen
        assert "car-worktrees" in call["cwd"] and call["isolation"]["kind"] == "worktree"
        assert not os.path.exists(os.path.join(repo, "from_client.txt"))
        assert git(repo, "status", "--porcelain") == ""
    finally:
        d.__exit__(None, None, None)
        shutil.rmtree(d.home, ignore_errors=True)
        shutil.rmtree(repo, ignore_errors=True)


def test_readonly_isolation_denies_a_write_tool_of_a_session():
    # The operator declares the tools' risk; readonly denies what writes.
    d = daemon_with('isolation = "readonly"\n[[tools]]\nname = "look"\nrisk = "read"\n'
                    '[[tools]]\nname = "save"\nrisk = "write"\n', cwd=None)
    try:
        ran = []

        async def execute(params):
            ran.append(params["tool"])
            return "ok"

        async def go():
            c = await client(d.url, [{"name": "look"}, {"name": "save"}], execute)
            res = await c.call("proposal.submit", {"proposal": proposal([
                tool_call("l", "look"), tool_call("s", "save", failure_behavior="skip")], "ro-1")})
            by = {r["action_id"]: r for r in res["results"]}
            assert by["l"]["status"] == "succeeded" and by["s"]["status"] == "rejected", res
            assert ran == ["look"]
            await c.close()

        run(go())
    finally:
        d.__exit__(None, None, None)
        shutil.rmtree(d.home, ignore_errors=True)
