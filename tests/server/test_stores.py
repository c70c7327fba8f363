"""Issue #22: the daemon's durable audit log.

- Default: every event of every connection is appended to
  `$CAR_HOME/events.jsonl`, one hash chain across connections and restarts,
  checked with `car events verify`.
- `--store postgres://...` (CAR_STORE_URL): the events go to PostgreSQL in
  batches, and a proposal answers only once its completion event is durable.
  Needs CAR_TEST_PG_URL (scripts/test starts a throwaway cluster); skipped
  without it, a failure under CI=true.
"""

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import time

import pytest

from client import Client
from test_approvals import ASK_ECHO
from test_approvals import connect as approvals_connect
from test_approvals import submitter as approvals_submitter
from test_server import BIN, Daemon, proposal, run, tool_call

OP = "operator-token-stores-0123456789"
AGENT = "agent-token-stores-0123456789"
CAR = os.path.join(os.path.dirname(BIN), "car")


async def submit(url, pid, key):
    c = await Client.connect(url)
    assert (await c.call("session.auth", {"token": OP}))["ok"] is True
    p = proposal([{"id": "w", "type": "state_write", "parameters": {"key": key, "value": 1}}], pid=pid)
    res = await c.call("proposal.submit", {"proposal": p})
    assert res["results"][0]["status"] == "succeeded", res
    await c.close()


def records(path):
    """The complete records of the audit file. Read while the daemon writes
    it, the last line can be a record still being written (no newline yet):
    it is left for the next read, as a tailing reader must."""
    with open(path) as f:
        return [json.loads(line) for line in f if line.endswith("\n")]


def test_every_connection_appends_to_one_chain_that_survives_a_restart():
    home = f"/tmp/car-stores-{os.getpid()}-{time.time_ns()}"
    try:
        with Daemon(env={"CAR_AUTH_TOKEN": OP}, home=home) as d:

            async def two():
                await asyncio.gather(submit(d.url, "pa", "a"), submit(d.url, "pb", "b"))

            run(two())
            # Answered: the completion events are on disk.
            recs = records(os.path.join(home, "events.jsonl"))
            assert sorted(r["proposal_id"] for r in recs if r["kind"] == "ProposalCompleted") == ["pa", "pb"]
            assert d.stop() == 0
        with Daemon(env={"CAR_AUTH_TOKEN": OP}, home=home) as d:
            run(submit(d.url, "pc", "c"))
            d.stop()
        path = os.path.join(home, "events.jsonl")
        recs = records(path)
        assert [r["id"] for r in recs] == list(range(1, len(recs) + 1))
        assert sum(r["kind"] == "ProposalCompleted" for r in recs) == 3
        out = subprocess.run([CAR, "events", "verify", path, "--json"], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["verified"] is True
        # A torn last record (a write cut short) is reported at start and skipped.
        with open(path, "a") as f:
            f.write('{"id": 999, "kind": "Sta')
        with Daemon(env={"CAR_AUTH_TOKEN": OP}, home=home) as d:
            run(submit(d.url, "pd", "d"))
            d.stop()
            assert "torn record" in d.text()
        out = subprocess.run([CAR, "events", "verify", path], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr + out.stdout
        # Tampered: the daemon refuses to start rather than extend a broken chain.
        text = open(path).read().replace('"pa"', '"px"', 1)
        open(path, "w").write(text)
        with pytest.raises(RuntimeError, match="fails verification"):
            Daemon(env={"CAR_AUTH_TOKEN": OP}, home=home)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_the_shared_event_log_needs_a_store():
    async def go(url):
        c = await Client.connect(url)
        assert (await c.call("session.auth", {"token": OP}))["ok"] is True
        r = await c.request("events.query", {"store": True})
        assert r["error"]["data"]["code"] == "store_not_configured", r
        await c.close()
        # An agent never reads the shared log (only its own session's).
        c = await Client.connect(url)
        assert (await c.call("session.auth", {"token": AGENT, "agent_id": "a1"}))["ok"] is True
        for m in ("events.query", "events.chain.verify"):
            r = await c.request(m, {"store": True})
            assert r["error"]["data"]["code"] == "forbidden", r
        assert "count" in await c.call("events.query", {})
        await c.close()

    with Daemon("--agent-token", f"a1={AGENT}", env={"CAR_AUTH_TOKEN": OP}) as d:
        try:
            run(go(d.url))
        finally:
            shutil.rmtree(d.home, ignore_errors=True)


def test_concurrent_connections_each_reply_finds_its_events_in_the_one_chain():
    """Batched writes: many proposals from several connections share a batch
    (one write, one sync); each reply still comes only once all of its
    proposal's events are in the file, and the chain stays one."""
    home = f"/tmp/car-stores-batch-{os.getpid()}-{time.time_ns()}"
    path = os.path.join(home, "events.jsonl")
    try:
        with Daemon(env={"CAR_AUTH_TOKEN": OP}, home=home) as d:

            async def connection(n):
                c = await Client.connect(d.url)
                assert (await c.call("session.auth", {"token": OP}))["ok"] is True
                for i in range(15):
                    pid = f"c{n}-p{i}"
                    p = proposal([{"id": "w", "type": "state_write", "parameters": {"key": pid, "value": i}}], pid=pid)
                    res = await c.call("proposal.submit", {"proposal": p})
                    assert res["results"][0]["status"] == "succeeded", res
                    mine = [r["kind"] for r in records(path) if r["proposal_id"] == pid]
                    assert mine and mine[-1] == "ProposalCompleted", (pid, mine)
                    assert "StateChanged" in mine, (pid, mine)
                count = await c.call("events.count")
                await c.close()
                return count

            async def all_at_once():
                return await asyncio.gather(*(connection(n) for n in range(8)))

            counts = run(all_at_once())
            assert d.stop() == 0
        recs = records(path)
        # Every event of every connection's log, once, in one chain.
        assert len(recs) == sum(counts)
        assert [r["id"] for r in recs] == list(range(1, len(recs) + 1))
        assert sum(r["kind"] == "ProposalCompleted" for r in recs) == 8 * 15
        out = subprocess.run([CAR, "events", "verify", path, "--json"], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["records"] == len(recs)
    finally:
        shutil.rmtree(home, ignore_errors=True)


def pg_url():
    url = os.environ.get("CAR_TEST_PG_URL")
    if not url:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true and CAR_TEST_PG_URL is not set")
        pytest.skip("CAR_TEST_PG_URL is not set (scripts/test starts a throwaway PostgreSQL)")
    return url


def psql(url, sql):
    out = subprocess.run(["psql", url, "-At", "-c", sql], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_two_daemons_share_the_postgres_event_log():
    url = pg_url()
    schema = f"srv_{os.getpid()}_{time.time_ns() % 1000000}"
    homes = [f"/tmp/car-stores-pg-{i}-{os.getpid()}" for i in "ab"]
    try:
        env = lambda w: {"CAR_AUTH_TOKEN": OP, "CAR_STORE_URL": url, "CAR_STORE_SCHEMA": schema, "CAR_STORE_WRITER": w}
        with Daemon(env=env("host-a"), home=homes[0]) as a, Daemon(env=env("host-b"), home=homes[1]) as b:
            run(submit(a.url, "on-a", "ka"))
            # Answered only once durable: the row is there now.
            assert psql(url, f"SELECT count(*) FROM {schema}.car_events WHERE kind = 'ProposalCompleted' AND proposal_id = 'on-a'") == "1"
            run(submit(b.url, "on-b", "kb"))
            assert psql(url, f"SELECT count(*) FROM {schema}.car_events WHERE kind = 'ProposalCompleted' AND proposal_id = 'on-b'") == "1"
            writers = psql(url, f"SELECT string_agg(DISTINCT writer, ',' ORDER BY writer) FROM {schema}.car_events")
            assert writers == "host-a,host-b"
            # Each writer's chain is gap-free; no file was written.
            for w in ("host-a", "host-b"):
                seqs = psql(url, f"SELECT string_agg(seq::text, ',' ORDER BY seq) FROM {schema}.car_events WHERE writer = '{w}'")
                assert seqs.split(",") == [str(i) for i in range(1, len(seqs.split(",")) + 1)]
            assert not os.path.exists(os.path.join(homes[0], "events.jsonl"))

            # A's operator reads B's events from the store, and every chain verifies.
            async def read():
                c = await Client.connect(a.url)
                assert (await c.call("session.auth", {"token": OP}))["ok"] is True
                mine = await c.call("events.query", {"proposal_id": "on-b"})
                assert mine["count"] == 0, "the connection's own log holds only its session"
                shared = await c.call("events.query", {"store": True, "proposal_id": "on-b", "kinds": ["ProposalCompleted"]})
                assert shared["source"] == "store" and shared["count"] == 1, shared
                assert shared["events"][0]["proposal_id"] == "on-b"
                both = await c.call("events.query", {"store": True, "kinds": ["ProposalCompleted"]})
                assert {e["proposal_id"] for e in both["events"]} == {"on-a", "on-b"}
                assert (await c.call("events.chain.verify", {"store": True}))["verified"] > 0
                await c.close()

            run(read())
            # The table refuses updates.
            out = subprocess.run(["psql", url, "-c", f"UPDATE {schema}.car_events SET kind = 'X'"], capture_output=True, text=True)
            assert out.returncode != 0 and "append-only" in out.stderr
        # A newer schema than the binary knows refuses to start.
        psql(url, f"UPDATE {schema}.car_schema SET version = 99")
        with pytest.raises(RuntimeError, match="newer than this binary"):
            Daemon(env=env("host-c"), home=homes[0])
    finally:
        psql(url, f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        for h in homes:
            shutil.rmtree(h, ignore_errors=True)


# --- approvals shared across daemons ---------------------------------------------

async def authed(url):
    """An operator connection whose session asks about `echo`."""
    return await approvals_connect(url, auth={"token": OP}, admission=ASK_ECHO)


async def echo_submitter(url):
    """`authed` serving `echo` (its calls' parameters in `c.ran`)."""
    return await approvals_submitter(url, auth={"token": OP})


async def pending_ids(c, want, timeout=20):
    """Polls `host.approvals` until at least `want` approvals are pending."""
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while loop.time() < end:
        ids = [a["approval_id"] for a in (await c.call("host.approvals"))["approvals"]]
        if len(ids) >= want:
            return ids
        await asyncio.sleep(0.02)
    raise AssertionError(f"fewer than {want} approvals pending: {ids}")


def pg_daemons(schema, url, homes, *args, token=OP, extra_env=None):
    env = lambda w: {"CAR_AUTH_TOKEN": token, "CAR_STORE_URL": url, "CAR_STORE_SCHEMA": schema, "CAR_STORE_WRITER": w,
                     **(extra_env or {})}
    return Daemon(*args, env=env("host-a"), home=homes[0]), Daemon(*args, env=env("host-b"), home=homes[1])


@contextlib.contextmanager
def two_hosts(prefix, *args, token=OP, extra_env=None):
    """Daemons A and B (with these arguments and operator token) sharing one
    fresh schema of the test database; both stopped, the schema dropped and
    their homes removed afterwards."""
    url = pg_url()
    schema = f"{prefix}_{os.getpid()}_{time.time_ns() % 1000000}"
    homes = [f"/tmp/car-stores-{prefix}-{i}-{os.getpid()}" for i in "ab"]
    a, b = pg_daemons(schema, url, homes, *args, token=token, extra_env=extra_env)
    try:
        yield a, b
    finally:
        for d in (a, b):
            d.__exit__(None, None, None)
        psql(url, f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        for h in homes:
            shutil.rmtree(h, ignore_errors=True)


def test_an_approval_asked_on_one_daemon_is_granted_through_another():
    with two_hosts("appr") as (a, b):
        async def go():
            approver = await authed(b.url)
            assert (await approver.call("host.subscribe", {}))["subscribed"] is True
            s = await echo_submitter(a.url)
            pending = asyncio.create_task(
                s.request("proposal.submit", {"proposal": proposal([tool_call("e1", parameters={"msg": "hi"})], "x-1")}))
            # B's approver is told of A's request, and B lists it.
            loop = asyncio.get_running_loop()
            end = loop.time() + 20
            note = None
            while note is None and loop.time() < end:
                note = next((n for n in approver.notifications if n["method"] == "host.event"
                             and n["params"]["type"] == "approval.requested"), None)
                await asyncio.sleep(0.02)
            assert note is not None, approver.notifications
            key = note["params"]["approval"]["approval_id"]
            assert key.startswith("echo:") and note["params"]["approval"]["tool"] == "echo"
            assert await pending_ids(approver, 1) == [key]
            assert not pending.done(), "A's action waits while the approval is pending"
            r = await approver.call("host.resolve_approval", {"approval_id": key, "resolution": "approve", "reason": "ok"})
            assert r["applied"] is True and r["reviewer"].startswith("car-server:operator:")
            res = (await pending)["result"]
            assert res["results"][0]["status"] == "succeeded", res
            assert s.ran == [{"msg": "hi"}]
            # Used up: the same call asks again (and a deny through B refuses it on A).
            again = asyncio.create_task(
                s.request("proposal.submit", {"proposal": proposal([tool_call("e1", parameters={"msg": "hi"})], "x-2")}))
            [key2] = await pending_ids(approver, 1)
            assert key2 == key
            await approver.call("host.resolve_approval", {"approval_id": key, "resolution": "deny", "reason": "not twice"})
            err = (await again)["error"]
            assert err["code"] == -32003 and err["data"]["code"] == "approval_denied", err
            assert err["data"]["approvals"] == [{"approval_id": key, "action_id": "e1", "status": "denied"}]
            assert s.ran == [{"msg": "hi"}]

            # 100 racing approve (through A) / deny (through B) pairs: each
            # approval closes exactly once, and A's action follows the winner.
            n = int(os.environ.get("RACE_N", "100"))
            approver_a = await authed(a.url)
            acts = [tool_call(f"r{i}", parameters={"i": i}, failure_behavior="skip") for i in range(n)]
            race = asyncio.create_task(s.request("proposal.submit", {"proposal": proposal(acts, "race")}, timeout=120))
            decided = {}
            while len(decided) < n:
                fresh = [k for k in await pending_ids(approver, 1) if k not in decided]
                pairs = []
                for j, k in enumerate(fresh):
                    calls = [approver_a.request("host.resolve_approval", {"approval_id": k, "resolution": "approve"}),
                             approver.request("host.resolve_approval", {"approval_id": k, "resolution": "deny"})]
                    pairs.append(asyncio.gather(*(calls if j % 2 else calls[::-1])))
                for k, outs in zip(fresh, await asyncio.gather(*pairs)):
                    applied = [o["result"] for o in outs if o.get("result", {}).get("applied") is True]
                    assert len(applied) == 1, outs
                    # The loser changed nothing: not applied, or already closed.
                    for o in outs:
                        assert o.get("result", {}).get("applied") is not None \
                            or o["error"]["data"]["code"] == "approval_not_pending", o
                    decided[k] = applied[0]["decision"]
            res = (await race).get("error", {}).get("data", {}).get("result") or (await race)["result"]
            by_id = {r["action_id"]: r["status"] for r in res["results"]}
            allowed = sum(d == "allow" for d in decided.values())
            assert sum(st == "succeeded" for st in by_id.values()) == allowed
            assert sum(st == "rejected" for st in by_id.values()) == n - allowed
            assert len([p for p in s.ran if "i" in p]) == allowed
            assert 0 < allowed < n, "both sides won some races"
            for c in (approver, approver_a, s):
                await c.close()

            # A tier escalation asked on A is decided on A (its ledger):
            # B refuses to decide it, A's approver can.
            s = await echo_submitter(a.url)
            await s.call("session.init", {"client_id": "tier", "admission": {}})
            await s.call("tools.register", [{"name": "deploy"}])
            approver_b = await authed(b.url)
            approver_a = await authed(a.url)
            assert (await approver_a.call("host.subscribe", {}))["subscribed"] is True
            act = tool_call("d1", "deploy", parameters={"target": "prod", "api_token": "s3cret"})
            tier = asyncio.create_task(s.request("proposal.submit", {"proposal": proposal([act], "tier-x")}, timeout=60))
            [tkey] = [k for k in await pending_ids(approver_b, 1) if k.startswith("tier:")]
            r = await approver_b.request("host.resolve_approval", {"approval_id": tkey, "resolution": "approve"})
            assert r["error"]["data"]["code"] == "approval_elsewhere", r
            r = await approver_a.call("host.resolve_approval", {"approval_id": tkey, "resolution": "approve"})
            assert r["applied"] is True
            res = (await tier)["result"]
            assert res["results"][0]["status"] == "succeeded", res
            for c in (s, approver_a, approver_b):
                await c.close()

            # A pending approval outlives `kill -9` of the daemon that asked.
            s = await echo_submitter(a.url)
            asyncio.create_task(
                s.request("proposal.submit", {"proposal": proposal([tool_call("k1", parameters={"k": 9})], "kill")}))
            approver = await authed(b.url)
            [orphan] = await pending_ids(approver, 1)
            a.stop(signal.SIGKILL)
            assert await pending_ids(approver, 1) == [orphan]
            r = await approver.call("host.resolve_approval", {"approval_id": orphan, "resolution": "deny"})
            assert r["applied"] is True
            await approver.close()

        run(go())


# --- rate windows shared across connections and daemons -----------------------------

async def rated_client(url, starts, limit):
    c = await Client.connect(url)
    assert (await c.call("session.auth", {"token": OP}))["ok"] is True
    await c.call("tools.register", [{"name": "rated", "rate_limit": limit}])

    async def execute(params):
        starts.append(time.monotonic())
        return "ok"

    c.handlers["tools.execute"] = execute
    return c


def max_in_window(starts, window):
    """The most starts within any `window` seconds."""
    t = sorted(starts)
    return max(sum(1 for u in t[i:] if u - s < window) for i, s in enumerate(t))


def run_rated(urls, per_client=20, limit=None):
    """Clients (one per url) each submit `per_client` calls of a tool limited to
    10 calls per half second; returns the starts the tool saw."""
    limit = limit or {"max_calls": 10, "interval_secs": 0.5}
    starts = []

    async def go():
        clients = [await rated_client(u, starts, limit) for u in urls]
        subs = [c.request("proposal.submit", {"proposal": proposal(
            [tool_call(f"c{i}", "rated", parameters={"i": i}) for i in range(per_client)], f"rate-{n}")}, timeout=60)
            for n, c in enumerate(clients)]
        for r in await asyncio.gather(*subs):
            assert all(x["status"] == "succeeded" for x in r["result"]["results"]), r
        for c in clients:
            await c.close()

    run(go())
    return starts


def check_window(starts, n):
    assert len(starts) == n
    # 10 per half second, with 50 ms for the callback's trip to the client.
    assert max_in_window(starts, 0.45) <= 10, sorted(s - min(starts) for s in starts)
    # And it did wait: 40 calls at 10 per half second take at least 1.5 s.
    assert max(starts) - min(starts) >= 1.4


def test_a_rate_limit_holds_across_the_connections_of_a_daemon():
    with Daemon(env={"CAR_AUTH_TOKEN": OP}) as d:
        try:
            check_window(run_rated([d.url, d.url]), 40)
        finally:
            shutil.rmtree(d.home, ignore_errors=True)


def test_a_rate_limit_holds_across_daemons_sharing_a_store():
    with two_hosts("rate") as (a, b):
        check_window(run_rated([a.url, b.url]), 40)


def test_a_waiting_action_survives_a_postgres_restart():
    """PostgreSQL is down for 2.5 s while an action on A waits for its
    approval: the waiter stays (it retries until its deadline, looking at
    least once a second, so it meets the outage), B's grant after the
    restart reaches it, and the action runs once."""
    pg_url()
    pgdir = os.environ.get("CAR_TEST_PG_DIR")
    if not pgdir:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true and CAR_TEST_PG_DIR is not set")
        pytest.skip("CAR_TEST_PG_DIR is not set (scripts/test sets it with its cluster)")
    script = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "pg-cluster.sh")
    with two_hosts("restart") as (a, b):
        async def go():
            s = await echo_submitter(a.url)
            pending = asyncio.create_task(s.request(
                "proposal.submit", {"proposal": proposal([tool_call("e1", parameters={"r": 1})], "restart")}, timeout=60))
            approver = await authed(b.url)
            [key] = await pending_ids(approver, 1)
            restarted = await asyncio.get_running_loop().run_in_executor(
                None, lambda: subprocess.run([script, "restart", pgdir, "2.5"], capture_output=True, text=True))
            assert restarted.returncode == 0, restarted.stderr
            assert not pending.done(), "the waiter is still there"
            # B's pool reconnects; its grant reaches A's waiter.
            loop = asyncio.get_running_loop()
            end = loop.time() + 20
            while True:
                r = await approver.request("host.resolve_approval", {"approval_id": key, "resolution": "approve"})
                if "result" in r or loop.time() > end:
                    break
                await asyncio.sleep(0.2)
            assert r["result"]["applied"] is True, r
            res = (await pending)["result"]
            assert res["results"][0]["status"] == "succeeded", res
            assert s.ran == [{"r": 1}]
            await s.close()
            await approver.close()

        run(go())


# --- state shared across daemons (--shared-state) ----------------------------------

def test_shared_state_gives_one_winner_per_round_of_same_read_version_writes():
    with two_hosts("state", "--shared-state") as (a, b):
        async def go():
            ca, cb = await authed(a.url), await authed(b.url)
            assert await ca.call("state.set", {"key": "counter", "value": 0}) == "ok"
            # B reads what A wrote: one state for every connection of both.
            assert await cb.call("state.get", {"key": "counter"}) == 0
            assert "counter" in await cb.call("state.keys", {})
            rounds = int(os.environ.get("STATE_ROUNDS", "50"))
            version = 1
            for r in range(rounds):
                def write(who):
                    return {"proposal": proposal([{"id": "w", "type": "state_write",
                                                   "parameters": {"key": "counter", "value": f"{who}-{r}"},
                                                   "assumptions": [{"key": "counter", "read_version": version}]}],
                                                 f"{who}-{r}")}
                ra, rb = await asyncio.gather(ca.call("proposal.submit", write("a")),
                                              cb.call("proposal.submit", write("b")))
                won = [x for x in (ra, rb) if x["results"][0]["status"] == "succeeded"]
                assert len(won) == 1, (r, ra, rb)
                lost = rb if won[0] is ra else ra
                assert lost["results"][0]["error"].startswith("conflict:"), lost
                winner = "a" if won[0] is ra else "b"
                assert await ca.call("state.get", {"key": "counter"}) == f"{winner}-{r}"
                assert await cb.call("state.get", {"key": "counter"}) == f"{winner}-{r}"
                version += 1
            for c in (ca, cb):
                await c.close()

        run(go())


def test_shared_state_needs_a_store():
    with pytest.raises(RuntimeError, match="needs a shared store"):
        Daemon("--shared-state", env={"CAR_AUTH_TOKEN": OP})


# --- the sweeper: a run whose daemon died is rolled back (--shared-state) ------------

async def tools_client(url, handler):
    """An operator session serving `hang` and `slow` with `handler`."""
    c = await Client.connect(url)
    assert (await c.call("session.auth", {"token": OP}))["ok"] is True
    await c.call("server.handshake", {"protocol_version": 3})
    await c.call("session.init", {"client_id": "sweep-test"})
    await c.call("tools.register", [{"name": "hang"}, {"name": "slow"}])
    c.handlers["tools.execute"] = handler
    return c


async def until(f, want, timeout=20):
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    got = None
    while loop.time() < end:
        got = await f()
        if got == want:
            return got
        await asyncio.sleep(0.05)
    raise AssertionError(f"still {got!r}, not {want!r}")


def test_the_writes_of_a_run_whose_daemon_died_are_rolled_back_by_a_sweeper():
    fast = {"CAR_CHECKPOINT_LEASE_MS": "1500", "CAR_SWEEP_INTERVAL_MS": "200"}
    with two_hosts("sweep", "--shared-state", extra_env=fast) as (a, b):
        async def go():
            async def hang(params):
                await asyncio.sleep(3600)

            async def slow(params):
                await asyncio.sleep(3.5)  # longer than the lease: renewed meanwhile
                return "ok"

            ca = await tools_client(a.url, hang)
            cb = await tools_client(b.url, slow)
            assert await ca.call("state.set", {"key": "base", "value": "before"}) == "ok"
            run_on_a = proposal([
                {"id": "w1", "type": "state_write", "parameters": {"key": "base", "value": "mid-run"}},
                {"id": "w2", "type": "state_write", "parameters": {"key": "fresh", "value": "x"}, "dependencies": ["w1"]},
                tool_call("h", "hang", dependencies=["w2"]),
            ], "dies-mid-run")
            asyncio.create_task(ca.request("proposal.submit", {"proposal": run_on_a}, timeout=3600))
            await until(lambda: cb.call("state.get", {"key": "fresh"}), "x")
            assert await cb.call("state.get", {"key": "base"}) == "mid-run"
            a.stop(signal.SIGKILL)
            # B's sweeper takes the dead run over once its lease runs out.
            await until(lambda: cb.call("state.get", {"key": "base"}), "before")
            assert await cb.call("state.get", {"key": "fresh"}) is None
            # The sweeper restores the keys, then records its event, which the
            # store's sink writes moments later.
            async def swept_count():
                return (await cb.call("events.query", {"store": True, "kinds": ["ProposalSwept"]}))["count"]
            await until(swept_count, 1)
            swept = await cb.call("events.query", {"store": True, "kinds": ["ProposalSwept"]})
            assert [e["data"]["restored"] for e in swept["events"]] == [["base", "fresh"]], swept
            assert swept["events"][0]["proposal_id"] == "dies-mid-run"
            # A live run longer than the lease is not swept: its lease is renewed.
            live = proposal([
                {"id": "w", "type": "state_write", "parameters": {"key": "live", "value": 1}},
                tool_call("s", "slow", dependencies=["w"]),
            ], "alive")
            res = await cb.call("proposal.submit", {"proposal": live})
            assert [r["status"] for r in res["results"]] == ["succeeded", "succeeded"], res
            await asyncio.sleep(0.5)
            assert await cb.call("state.get", {"key": "live"}) == 1
            again = await cb.call("events.query", {"store": True, "kinds": ["ProposalSwept"]})
            assert again["count"] == 1, again
            await cb.close()

        run(go())


# --- `always` decisions shared across daemons ---------------------------------------

def test_an_always_decision_on_one_daemon_answers_the_asks_of_another():
    with two_hosts("always") as (a, b):
        async def go():
            approver = await authed(b.url)
            assert (await approver.call("host.subscribe", {}))["subscribed"] is True
            s = await echo_submitter(a.url)
            first = asyncio.create_task(
                s.request("proposal.submit", {"proposal": proposal([tool_call("e1", parameters={"n": 1})], "al-1")}))
            [key] = await pending_ids(approver, 1)
            r = await approver.call("host.resolve_approval",
                                    {"approval_id": key, "resolution": "approve", "scope": "always", "reason": "trusted"})
            assert r["applied"] is True and r["scope"] == "always"
            assert (await first)["result"]["results"][0]["status"] == "succeeded"
            # The rule lives in the store, not in B's home.
            assert not os.path.exists(os.path.join(b.home, "always-rules.jsonl"))
            # A later call on A with another input: answered by the rule, nobody asked.
            res = await s.call("proposal.submit", {"proposal": proposal([tool_call("e2", parameters={"n": 2})], "al-2")})
            assert res["results"][0]["status"] == "succeeded", res
            assert s.ran == [{"n": 1}, {"n": 2}]
            assert (await approver.call("host.approvals"))["approvals"] == []
            # A deny rule of the session still wins over the always-allow.
            d = await approvals_connect(a.url, auth={"token": OP}, admission={"deny": [{"tool": "echo"}]})
            await d.call("tools.register", [{"name": "echo"}])
            res = await d.call("proposal.submit", {"proposal": proposal([tool_call("e3")], "al-3")})
            assert res["results"][0]["status"] == "rejected" and "deny-rule" in res["results"][0]["error"], res
            for c in (s, approver, d):
                await c.close()

        run(go())


# --- the tier ledger shared across daemons -------------------------------------------

def test_a_tier_decision_recorded_on_one_daemon_holds_on_every_daemon():
    """`permission.approve` on B admits the operation on A; a later
    `permission.reject` on B refuses it on A again; A's
    `permission.evaluate` agrees each time. The records live in the store
    and in each recording daemon's own file."""
    with two_hosts("tier") as (a, b):
        async def go():
            ran = []

            async def execute(params):
                ran.append(params["tool"])
                return {"ok": True}

            s = await Client.connect(a.url)
            assert (await s.call("session.auth", {"token": OP}))["ok"] is True
            await s.call("session.init", {"client_id": "tier-shared"})
            await s.call("tools.register", [{"name": "deploy"}])
            s.handlers["tools.execute"] = execute
            op = await Client.connect(b.url)
            assert (await op.call("session.auth", {"token": OP}))["ok"] is True
            deploy = tool_call("d", "deploy", parameters={"target": f"prod-{time.time_ns()}"})

            async def submitted(pid):
                res = await s.call("proposal.submit", {"proposal": proposal([deploy], pid)})
                return res["results"][0]

            async def evaluated():
                rows = (await s.call("permission.evaluate", {"proposal": proposal([deploy])}))["decisions"]
                return rows[0]["decision"]

            # (A submission now would wait for an escalation approval: a
            # shared store always has someone who could approve.)
            assert await evaluated() == "needs_approval"
            rec = await op.call("permission.approve", {"action": deploy, "reason": "release 7"})
            assert rec["reviewer"].startswith("car-server:operator:"), rec
            assert await evaluated() == "allow"
            assert (await submitted("t2"))["status"] == "succeeded"
            assert ran == ["deploy"]
            await op.call("permission.reject", {"action": deploy, "reason": "rolled back"})
            assert await evaluated() == "deny"
            third = await submitted("t3")
            assert third["status"] == "rejected" and ran == ["deploy"], third
            # B wrote its file too; A's has nothing of its own.
            with open(os.path.join(b.home, "tier-approvals.jsonl")) as f:
                assert [json.loads(line)["decision"] for line in f] == ["approved", "rejected"]
            assert not os.path.exists(os.path.join(a.home, "tier-approvals.jsonl"))
            for c in (s, op):
                await c.close()

        run(go())
