"""Suspended proposals from Python (``on_ask = "suspend"``): an ask nobody
answered settles the proposal as ``suspended``; ``resume_proposal`` runs the
rest exactly once, from a new runtime over the same approvals directory too
(a restarted process); the errors carry their codes."""
import asyncio

import pytest

import car_runtime as car

RELEASE = {"id": "rel", "actions": [
    {"id": "build", "type": "tool_call", "tool": "build"},
    {"id": "gate", "type": "tool_call", "tool": "gate", "parameters": {"env": "prod"}, "dependencies": ["build"]},
    {"id": "notify", "type": "tool_call", "tool": "notify", "dependencies": ["gate"]},
]}


def runtime(tmp_path):
    rt = car.CarRuntime()
    for t in ("build", "gate", "notify"):
        rt.register_tool(t)
    rt.set_permissions({"ask": [{"tool": "gate"}], "on_ask": "suspend"}, str(tmp_path))
    return rt


def statuses(out):
    return {r["action_id"]: r["status"] for r in out["results"]}


def test_suspend_then_resume_in_a_new_runtime_runs_each_action_once(tmp_path):
    ran = []
    tool = lambda tool, params: ran.append(tool) or {"ok": tool}
    out = runtime(tmp_path).execute_proposal_obj(RELEASE, tool)
    assert out["status"] == "suspended", out
    assert statuses(out) == {"build": "succeeded", "gate": "proposed", "notify": "proposed"}
    sid = out["suspension"]["id"]
    key = out["suspension"]["pending"][0]["approval_key"]

    rt = runtime(tmp_path)  # a restarted process
    assert [s["id"] for s in rt.suspended_proposals_obj()["suspended"]] == [sid]
    again = rt.resume_proposal_obj(sid, tool)
    assert again["status"] == "suspended" and again["suspension"]["id"] == sid
    rt.approval_resolve(key, "allow", "reviewed")
    done = rt.resume_proposal_obj(sid, tool)
    assert "status" not in done, done
    assert statuses(done) == {"build": "succeeded", "gate": "succeeded", "notify": "succeeded"}
    assert ran == ["build", "gate", "notify"]
    assert rt.suspended_proposals_obj() == {"suspended": []}

    with pytest.raises(car.CarNotFoundError) as e:
        rt.resume_proposal(sid, tool)
    assert e.value.code == "suspension_not_found"
    with pytest.raises(car.CarInputError):
        rt.resume_proposal("../etc", tool)


def test_resume_is_awaitable_and_an_async_tool_is_awaited(tmp_path):
    rt = runtime(tmp_path)
    ran = []

    async def tool(tool, params):
        await asyncio.sleep(0)
        ran.append(tool)
        return {"ok": tool}

    async def go():
        out = await rt.execute_proposal_obj_async(RELEASE, tool)
        sid = out["suspension"]["id"]
        rt.approval_resolve(out["suspension"]["pending"][0]["approval_key"], "deny", "not today")
        return await rt.resume_proposal_obj_async(sid, tool)

    done = asyncio.run(go())
    assert statuses(done) == {"build": "succeeded", "gate": "rejected", "notify": "skipped"}, done
    assert "not today" in done["results"][1]["error"]
    assert ran == ["build"]
