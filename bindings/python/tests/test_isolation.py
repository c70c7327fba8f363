"""Worktree and readonly isolation (issue #23), set through the admission
document: a proposal's tools run in a git worktree of the host repository,
the result carries the patch, and the host tree is untouched."""
import json
import os
import subprocess
import tempfile

import pytest

import car_runtime as car


def git(d, *args):
    return subprocess.run(["git", "-C", d, *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture()
def repo():
    d = tempfile.mkdtemp(prefix="car-py-wt-")
    git(d, "init", "-q", "-b", "main")
    git(d, "config", "user.email", "t@example.com")
    git(d, "config", "user.name", "t")
    with open(os.path.join(d, "a.txt"), "w") as f:
        f.write("one\n")
    git(d, "add", "-A")
    git(d, "commit", "-q", "-m", "first")
    yield d
    subprocess.run(["rm", "-rf", d])


def runtime(root, isolation):
    rt = car.CarRuntime()
    rt.register_agent_basics(root)
    rt.register_tool("probe")
    rt.set_permissions(json.dumps({"isolation": isolation}))
    return rt


def test_a_python_tool_gets_the_tree_as_cwd_and_the_result_carries_the_patch(repo):
    rt = runtime(repo, {"kind": "worktree"})
    seen = []

    def tool(call_json):
        call = json.loads(call_json)
        seen.append(call)
        # The tool works where it is told: inside the tree.
        with open(os.path.join(call["cwd"], "from_python.txt"), "w") as f:
            f.write("py\n")
        return "{}"

    out = json.loads(rt.execute_proposal(json.dumps({"id": "p", "actions": [
        {"id": "w", "type": "tool_call", "tool": "write_file", "parameters": {"path": "a.txt", "content": "two\n"}},
        {"id": "x", "type": "tool_call", "tool": "probe", "parameters": {}},
    ]}), tool))
    assert [r["status"] for r in out["results"]] == ["succeeded", "succeeded"], out
    [call] = seen
    assert "car-worktrees" in call["cwd"] and call["isolation"]["kind"] == "worktree"
    [patch] = out["artifacts"]
    assert patch["kind"] == "patch" and sorted(patch["files"]) == ["a.txt", "from_python.txt"]
    assert "+two" in patch["patch"] and "+py" in patch["patch"]
    assert open(os.path.join(repo, "a.txt")).read() == "one\n"
    assert git(repo, "status", "--porcelain") == ""
    assert not os.path.exists(call["cwd"]), "the tree is removed"
    # The parsed result carries it too.
    obj = rt.execute_proposal_obj({"id": "p2", "actions": [
        {"id": "x", "type": "tool_call", "tool": "probe", "parameters": {}}]}, tool)
    assert obj["artifacts"][0]["files"] == ["from_python.txt"]


def test_outside_a_repository_nothing_runs_and_the_error_is_a_configuration_error():
    d = tempfile.mkdtemp(prefix="car-py-nogit-")
    rt = runtime(d, {"kind": "worktree"})
    calls = []
    with pytest.raises(car.CarConfigError) as e:
        rt.execute_proposal(json.dumps({"id": "p", "actions": [
            {"id": "x", "type": "tool_call", "tool": "probe", "parameters": {}}]}), lambda c: calls.append(c) or "{}")
    assert e.value.code == "isolation_not_git"
    assert calls == []


def test_readonly_isolation_denies_writes(repo):
    rt = runtime(repo, "readonly")
    out = json.loads(rt.execute_proposal(json.dumps({"id": "p", "actions": [
        {"id": "r", "type": "tool_call", "tool": "read_file", "parameters": {"path": "a.txt"}},
        {"id": "w", "type": "tool_call", "tool": "write_file", "parameters": {"path": "a.txt", "content": "x"},
         "failure_behavior": "skip"},
    ]}), lambda c: "{}"))
    assert [r["status"] for r in out["results"]] == ["succeeded", "rejected"], out
    assert open(os.path.join(repo, "a.txt")).read() == "one\n"
    with pytest.raises(car.CarConfigError, match="`container` is not `none`, `readonly` or `worktree`"):
        rt.set_permissions(json.dumps({"isolation": "container"}))
