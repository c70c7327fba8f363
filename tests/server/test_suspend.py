"""Issue #22: runs that wait survive the process.

A session whose admission document says `on_ask = "suspend"` does not wait
for an ask nobody answered: the proposal answers `status: "suspended"` with
a suspension id, and `proposal.resume {id}` later runs the rest, on the same
daemon after a restart (the checkpoint is under `$CAR_HOME/checkpoints`) or
on another daemon of the same database. Every action runs exactly once; only
the agent that submitted it (or an operator) may list and resume it.
"""

import asyncio
import os
import shutil
import signal
import time

from client import Client
from test_approvals import connect
from test_server import Daemon, proposal, run, tool_call
from test_stores import two_hosts

OP = "operator-token-suspend-0123456789"
A1 = "agent-token-suspend-a1-0123456789"
A2 = "agent-token-suspend-a2-0123456789"
SUSPEND = {"ask": [{"tool": "gate"}], "on_ask": "suspend"}


async def agent(url, token, agent_id, ran):
    """An agent session that suspends on asks about `gate`, serving
    `build`, `gate` and `notify` (every call appended to `ran`)."""
    c = await connect(url, auth={"token": token, "agent_id": agent_id}, admission=SUSPEND)
    await c.call("tools.register", [{"name": n} for n in ("build", "gate", "notify")])

    async def execute(params):
        ran.append(params["action_id"])
        return {"ok": params["tool"]}

    c.handlers["tools.execute"] = execute
    return c


async def operator(url):
    c = await Client.connect(url)
    assert (await c.call("session.auth", {"token": OP}))["ok"] is True
    return c


RELEASE = proposal([
    tool_call("build", "build"),
    tool_call("gate", "gate", parameters={"env": "prod"}, dependencies=["build"]),
    tool_call("notify", "notify", dependencies=["gate"]),
], "release-1")


def statuses(res):
    return {r["action_id"]: r["status"] for r in res["results"]}


def test_a_suspended_proposal_outlives_a_restart_and_resumes_once():
    home = f"/tmp/car-suspend-{os.getpid()}-{time.time_ns()}"
    args = ("--agent-token", f"a1={A1}", "--agent-token", f"a2={A2}")
    ran = []
    try:
        with Daemon(*args, env={"CAR_AUTH_TOKEN": OP}, home=home) as d:
            async def first():
                c = await agent(d.url, A1, "a1", ran)
                res = await c.call("proposal.submit", {"proposal": RELEASE})
                assert res["status"] == "suspended", res
                assert statuses(res) == {"build": "succeeded", "gate": "proposed", "notify": "proposed"}
                s = res["suspension"]
                assert [p["action_id"] for p in s["pending"]] == ["gate"] and s["waiting"] == ["notify"]
                listed = await c.call("proposal.suspended", {})
                assert [x["id"] for x in listed["suspended"]] == [s["id"]]
                assert listed["suspended"][0]["owner"] == "agent:a1"
                await c.close()
                return s

            s = run(first())
            assert ran == ["build"]
            d.stop(signal.SIGKILL)

        with Daemon(*args, env={"CAR_AUTH_TOKEN": OP}, home=home) as d:
            async def later():
                # Another agent neither sees nor resumes it.
                other = await agent(d.url, A2, "a2", ran)
                assert (await other.call("proposal.suspended", {}))["suspended"] == []
                r = await other.request("proposal.resume", {"id": s["id"]})
                assert r["error"]["code"] == -32602 and r["error"]["data"]["code"] == "suspension_not_owned", r
                await other.close()
                # The operator sees it and decides the approval it waits for;
                # an agent cannot decide it.
                c = await agent(d.url, A1, "a1", ran)
                key = s["pending"][0]["approval_key"]
                r = await c.request("host.resolve_approval", {"approval_id": key, "resolution": "approve"})
                assert "error" in r, r
                op = await operator(d.url)
                assert [x["id"] for x in (await op.call("proposal.suspended", {}))["suspended"]] == [s["id"]]
                r = await op.call("host.resolve_approval", {"approval_id": key, "resolution": "approve", "reason": "ok"})
                assert r["applied"] is True, r
                res = await c.call("proposal.resume", {"id": s["id"]})
                assert "status" not in res, res
                assert statuses(res) == {"build": "succeeded", "gate": "succeeded", "notify": "succeeded"}
                # Resumed to its end: gone.
                r = await c.request("proposal.resume", {"id": s["id"]})
                assert r["error"]["data"]["code"] == "suspension_not_found", r
                assert (await op.call("proposal.suspended", {}))["suspended"] == []
                for x in (c, op):
                    await x.close()

            run(later())
        assert ran == ["build", "gate", "notify"], "every action ran exactly once across the restart"
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_resume_before_the_approval_suspends_again_and_bad_ids_are_named():
    with Daemon("--agent-token", f"a1={A1}", env={"CAR_AUTH_TOKEN": OP}) as d:
        try:
            async def go():
                ran = []
                c = await agent(d.url, A1, "a1", ran)
                res = await c.call("proposal.submit", {"proposal": RELEASE})
                sid = res["suspension"]["id"]
                again = await c.call("proposal.resume", {"id": sid})
                assert again["status"] == "suspended" and again["suspension"]["id"] == sid, again
                assert ran == ["build"]
                for bad in ("susp-nope", "../etc/passwd"):
                    r = await c.request("proposal.resume", {"id": bad})
                    assert r["error"]["code"] == -32602, r
                r = await c.request("proposal.resume", {})
                assert r["error"]["code"] == -32602 and "id" in r["error"]["message"], r
                await c.close()

            run(go())
        finally:
            shutil.rmtree(d.home, ignore_errors=True)


def test_a_run_suspended_on_one_daemon_is_resumed_on_another_after_a_kill():
    ran_a, ran_b = [], []
    with two_hosts("susp", "--agent-token", f"a1={A1}", token=OP) as (a, b):
        async def go():
            c = await agent(a.url, A1, "a1", ran_a)
            res = await c.call("proposal.submit", {"proposal": RELEASE})
            assert res["status"] == "suspended", res
            sid = res["suspension"]["id"]
            key = res["suspension"]["pending"][0]["approval_key"]
            a.stop(signal.SIGKILL)
            # B's operator lists the suspended run and grants what it waits for.
            op = await operator(b.url)
            assert [x["id"] for x in (await op.call("proposal.suspended", {}))["suspended"]] == [sid]
            r = await op.call("host.resolve_approval", {"approval_id": key, "resolution": "approve", "reason": "ok"})
            assert r["applied"] is True, r
            # Two resumers race on B: one runs it, the other is told it is
            # claimed (or, once the first finished, that it is gone).
            c1 = await agent(b.url, A1, "a1", ran_b)
            c2 = await agent(b.url, A1, "a1", ran_b)
            r1, r2 = await asyncio.gather(c1.request("proposal.resume", {"id": sid}),
                                          c2.request("proposal.resume", {"id": sid}))
            ok = [r for r in (r1, r2) if "result" in r]
            refused = [r for r in (r1, r2) if "error" in r]
            assert len(ok) == 1 and len(refused) == 1, (r1, r2)
            assert refused[0]["error"]["data"]["code"] in ("suspension_claimed", "suspension_not_found"), refused
            assert statuses(ok[0]["result"]) == {"build": "succeeded", "gate": "succeeded", "notify": "succeeded"}
            assert (await op.call("proposal.suspended", {}))["suspended"] == []
            for x in (op, c1, c2):
                await x.close()

        run(go())
    assert ran_a == ["build"] and ran_b == ["gate", "notify"], (ran_a, ran_b)
