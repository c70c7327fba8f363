"""Run traces on the daemon (issue #23): `runs.*` kept under
`$CAR_HOME/runs`, an agent's runs are its own (the server assigns the agent
id, and an agent lists and reads only its runs), and the events methods
`events.cost_by_agent`, `metrics.summary`, `events.truncate`."""

import shutil

from client import Client
from test_server import Daemon, proposal, run, tool_call

OP = "operator-token-runs-0123456789"
AGENT = "agent-token-runs-0123456789"


async def connect(url, auth):
    c = await Client.connect(url)
    assert (await c.call("session.auth", auth))["ok"] is True
    return c


def test_runs_over_the_wire_are_kept_and_an_agent_sees_only_its_own():
    d = Daemon("--agent-token", f"a1={AGENT}", env={"CAR_AUTH_TOKEN": OP})
    try:
        async def go():
            agent = await connect(d.url, {"token": AGENT, "agent_id": "a1"})
            await agent.call("tools.register", [{"name": "t"}])
            agent.handlers["tools.execute"] = lambda params: "ok"
            # The agent claims another id: the server assigns its own.
            started = await agent.call("runs.start", {"intent": "do it", "agent_id": "someone-else"})
            assert started["agent_id"] == "a1"
            rid = started["run_id"]
            await agent.call("runs.record_model_turn", {
                "run_id": rid, "turn_index": 1, "model_id": "m",
                "token_usage": {"input_tokens": 5, "output_tokens": 2, "cost_usd": 0.1}})
            res = await agent.call("proposal.submit", {"proposal": proposal([tool_call("a", "t")], "rp-1")})
            assert res["results"][0]["status"] == "succeeded", res
            assert (await agent.call("runs.complete", {"run_id": rid, "outcome": {"status": "success"}}))["ok"] is True
            trace = await agent.call("runs.get_trace", {"run_id": rid})
            assert trace["run"]["proposals"] == ["rp-1"] and trace["run"]["status"] == "success"
            assert await agent.call("events.cost_by_agent") == [
                {"agent": "a1", "calls": 1, "tokens_in": 5, "tokens_out": 2, "cost_usd": 0.1}]
            m = await agent.call("metrics.summary")
            assert m["actions"]["succeeded"] == 1 and m["runs"]["completed"] == 1

            # The operator's run, started on another connection.
            op = await connect(d.url, {"token": OP})
            mine = await op.call("runs.start", {"intent": "operator work", "agent_id": "ops"})
            # The operator lists every run of the daemon (kept on disk);
            # the agent lists only its own, and cannot read the other.
            assert {r["run_id"] for r in (await op.call("runs.list"))["runs"]} == {rid, mine["run_id"]}
            assert [r["run_id"] for r in (await agent.call("runs.list"))["runs"]] == [rid]
            r = await agent.request("runs.get_trace", {"run_id": mine["run_id"]})
            assert "error" in r and "no run" in r["error"]["message"], r
            r = await agent.request("runs.start", {})
            assert "intent" in r["error"]["message"], r
            t = await agent.call("events.truncate", {"max_events": 1})
            assert t["remaining"] == 1
            await agent.close()
            await op.close()

        run(go())
        import os
        assert len(os.listdir(os.path.join(d.home, "runs"))) == 2
    finally:
        d.__exit__(None, None, None)
        shutil.rmtree(d.home, ignore_errors=True)


def test_a_strict_session_refuses_an_unknown_field_and_runs_nothing():
    d = Daemon(env={"CAR_AUTH_TOKEN": OP})
    try:
        async def go():
            ran = []
            c = await connect(d.url, {"token": OP})
            await c.call("tools.register", [{"name": "t"}])
            c.handlers["tools.execute"] = lambda params: ran.append(params["action_id"]) or "ok"
            typo = proposal([tool_call("a", "t"), {**tool_call("b", "t"), "dependecies": ["a"]}], "typo")
            # Default: accepted (the spec's stability rule), and verify warns.
            res = await c.call("proposal.submit", {"proposal": typo})
            assert [r["status"] for r in res["results"]] == ["succeeded", "succeeded"]
            r = await c.request("session.init", {"client_id": "s", "strict_fields": "yes"})
            assert "strict_fields must be a boolean" in r["error"]["message"]
            await c.call("session.init", {"client_id": "s", "strict_fields": True})
            ran.clear()
            r = await c.request("proposal.submit", {"proposal": typo})
            assert r["error"]["code"] == -32602 and "dependecies" in r["error"]["message"], r
            assert ran == []
            await c.close()

        run(go())
    finally:
        d.__exit__(None, None, None)
        shutil.rmtree(d.home, ignore_errors=True)
