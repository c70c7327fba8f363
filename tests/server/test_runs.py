"""Run traces on the daemon (issue #23): `runs.*` kept under
`$CAR_HOME/runs`, an agent's runs are its own (the server assigns the agent
id, and an agent lists and reads only its runs), and the events methods
`events.cost_by_agent`, `metrics.summary`, `events.truncate`."""

import asyncio
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


def test_runs_subscribe_streams_every_connections_trace_records_an_agent_only_its_own():
    d = Daemon("--agent-token", f"a1={AGENT}", "--agent-token", f"a2={AGENT}-two", env={"CAR_AUTH_TOKEN": OP})
    try:
        async def events_of(c, n, timeout=5):
            for _ in range(int(timeout / 0.02)):
                got = [m["params"] for m in c.notifications if m["method"] == "runs.trace.event"]
                if len(got) >= n:
                    return got
                await asyncio.sleep(0.02)
            return [m["params"] for m in c.notifications if m["method"] == "runs.trace.event"]

        async def go():
            op = await connect(d.url, {"token": OP})
            a1 = await connect(d.url, {"token": AGENT, "agent_id": "a1"})
            a2 = await connect(d.url, {"token": f"{AGENT}-two", "agent_id": "a2"})
            assert (await op.call("runs.subscribe", {})) == {"subscribed": True, "run_id": None}
            assert (await a2.call("runs.subscribe", {}))["subscribed"] is True
            rid = (await a1.call("runs.start", {"intent": "ship it"}))["run_id"]
            assert (await a1.call("runs.subscribe", {"run_id": rid}))["run_id"] == rid
            await a1.call("runs.record_model_turn", {"run_id": rid, "model_id": "m",
                                                     "token_usage": {"input_tokens": 3, "output_tokens": 1}})
            other = (await a1.call("runs.start", {"intent": "another"}))["run_id"]
            await a1.call("runs.complete", {"run_id": rid, "outcome": {"status": "success", "summary": "done"}})
            # The operator sees every record of every connection, in order.
            seen = await events_of(op, 4)
            assert [(e["run_id"], e["kind"]) for e in seen] == [
                (rid, "started"), (rid, "turn"), (other, "started"), (rid, "completed")], seen
            assert all(e["agent_id"] == "a1" for e in seen)
            assert seen[0]["record"]["intent"] == "ship it" and seen[1]["record"]["token_usage"]["input_tokens"] == 3
            assert seen[3]["record"]["outcome"]["summary"] == "done" and seen[3]["timestamp"]
            # a1 subscribed to one run after its start: that run's later records only.
            mine = await events_of(a1, 2)
            assert [(e["run_id"], e["kind"]) for e in mine] == [(rid, "turn"), (rid, "completed")], mine
            # a2 sees nothing of a1's runs; its own run it sees.
            r2 = (await a2.call("runs.start", {"intent": "mine"}))["run_id"]
            theirs = await events_of(a2, 1)
            assert [(e["run_id"], e["agent_id"]) for e in theirs] == [(r2, "a2")], theirs
            # Unsubscribed: no more records.
            assert await op.call("runs.unsubscribe", {}) == {"subscribed": False, "was_subscribed": True}
            assert await op.call("runs.unsubscribe", {}) == {"subscribed": False, "was_subscribed": False}
            before = len(await events_of(op, 0, 0))
            await a2.call("runs.complete", {"run_id": r2, "outcome": {"status": "failed"}})
            await asyncio.sleep(0.2)
            assert len(await events_of(op, 0, 0)) == before
            r = await op.request("runs.subscribe", {"run_id": 7})
            assert r["error"]["code"] == -32602, r
            for c in (op, a1, a2):
                await c.close()

        run(go())
    finally:
        d.__exit__(None, None, None)
        shutil.rmtree(d.home, ignore_errors=True)
