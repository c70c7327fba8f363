"""The sandbox under `shell` through the Python binding (issue #26): the
same kernel-enforced profile the core tests exercise, reached from Python."""
import contextlib
import json
import os
import shutil
import tempfile

import car_runtime as car


@contextlib.contextmanager
def _workspace():
    """A scratch directory with `root/.car` and `outside`: (root, outside)."""
    base = tempfile.mkdtemp(prefix="car-py-sandbox-")
    try:
        root, outside = os.path.join(base, "root"), os.path.join(base, "outside")
        os.makedirs(os.path.join(root, ".car"))
        os.makedirs(outside)
        yield root, outside
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _shell(rt, command, timeout_ms=None, **kw):
    params = {"command": command}
    if timeout_ms is not None:
        params["timeout_ms"] = timeout_ms  # the shell's own timeout (the sandbox's)
    p = {"id": "p", "actions": [{"id": "s", "type": "tool_call", "tool": "shell",
                                 "parameters": params, "max_retries": 0, **kw}]}
    out = json.loads(rt.execute_proposal(p, lambda call: {"host": True}))
    return out["results"][0]


def test_shell_runs_under_workspace_write_by_default():
    with _workspace() as (root, outside):
        rt = car.CarRuntime()
        rt.register_shell_tool(root)
        # Inside the root: written.
        r = _shell(rt, "echo in > inside.txt")
        assert r["status"] == "succeeded", r
        assert open(os.path.join(root, "inside.txt")).read() == "in\n"
        # Outside the root: the kernel refuses it, whatever admission allowed.
        target = os.path.join(outside, "escape.txt")
        r = _shell(rt, f"echo out > {target}")
        assert r["status"] == "failed", r
        assert "Permission denied" in r["error"], r
        assert not os.path.exists(target)
        # A variable of the host environment is not inherited.
        os.environ["CAR_PY_SANDBOX_SECRET"] = "hunter2"
        try:
            r = _shell(rt, "echo \"[$CAR_PY_SANDBOX_SECRET]\"")
            assert r["status"] == "succeeded", r
            assert r["output"]["stdout"] == "[]\n", r
        finally:
            del os.environ["CAR_PY_SANDBOX_SECRET"]
        # Every run is in the event log with its profile.
        ev = json.loads(rt.event_query(json.dumps({"kinds": ["SandboxRun"]})))
        assert ev["count"] >= 3
        assert {e["data"]["profile"] for e in ev["events"]} == {"workspace-write"}


def test_the_document_picks_the_profile_and_a_bad_one_changes_nothing():
    base = tempfile.mkdtemp(prefix="car-py-sandbox-")
    try:
        rt = car.CarRuntime()
        rt.register_shell_tool(base)
        rt.set_permissions({"sandbox": {"tools": {"shell": "read-only"}}})
        r = _shell(rt, "echo x > f.txt")
        assert r["status"] == "failed" and "Permission denied" in r["error"], r
        assert not os.path.exists(os.path.join(base, "f.txt"))
        try:
            rt.set_permissions({"sandbox": {"default": "nope"}})
            raise AssertionError("an unknown profile must be refused")
        except Exception as e:  # noqa: BLE001 - the binding's input error
            assert "nope" in str(e)
        r = _shell(rt, "echo x > f.txt")
        assert r["status"] == "failed", "the read-only document is still in force"
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _echo_server():
    """A server on the host's loopback answering each line with `echo:LINE`."""
    import socket
    import threading
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()

    def serve():
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            with c, c.makefile("rw") as f:
                for line in f:
                    f.write("echo:" + line)
                    f.flush()

    threading.Thread(target=serve, daemon=True).start()
    return srv


def test_a_host_loopback_server_is_refused_with_network_off_and_reached_through_loopback_ports():
    base = tempfile.mkdtemp(prefix="car-py-sandbox-")
    srv = _echo_server()
    try:
        port = srv.getsockname()[1]
        cmd = ("python3 -c \"import socket; s=socket.create_connection(('127.0.0.1',%d),timeout=5); "
               "s.sendall(b'ping\\n'); print(s.makefile().readline().strip())\"" % port)
        rt = car.CarRuntime()
        rt.register_shell_tool(base)
        r = _shell(rt, cmd)  # workspace-write: network off
        assert r["status"] == "failed", r
        assert "Permission denied" in r["error"] or "Network is unreachable" in r["error"], r
        rt.set_permissions({"sandbox": {"default": "fwd", "profiles": {
            "fwd": {"network": "loopback", "loopback_ports": [port]}}}})
        r = _shell(rt, cmd)
        assert r["status"] == "succeeded", r
        assert r["output"]["stdout"] == "echo:ping\n", r
        evs = json.loads(rt.event_query(json.dumps({"kinds": ["SandboxRun"]})))["events"]
        ev = next(e["data"] for e in evs if e["data"]["network"] == "loopback")
        assert ev["loopback_ports"] == [port] and ev["forwarded_connections"] == 1, ev
    finally:
        srv.close()
        shutil.rmtree(base, ignore_errors=True)


def _gone(pid):
    """True when the process is gone or a zombie waiting for its reaper."""
    try:
        stat = open(f"/proc/{pid}/stat").read()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def test_symlinks_own_files_background_processes_and_fork_loops_are_bounded():
    """The rest of the issue's cases through Python: a symlink out of the
    root cannot be written through, the runtime's own `.car/` files cannot be
    changed, `sleep 60 &` under a 1 s timeout leaves no process behind, and a
    fork loop is stopped by the process limit."""
    with _workspace() as (root, outside):
        perms = os.path.join(root, ".car", "permissions.toml")
        with open(perms, "w") as f:
            f.write("# the operator's\n")
        victim = os.path.join(outside, "victim.txt")
        with open(victim, "w") as f:
            f.write("original\n")
        os.symlink(victim, os.path.join(root, "link"))
        rt = car.CarRuntime()
        rt.register_shell_tool(root)
        r = _shell(rt, "echo pwned > link")
        assert r["status"] == "failed" and "Permission denied" in r["error"], r
        assert open(victim).read() == "original\n"
        # Spelled so no text check sees `.car`: the kernel refuses it.
        for cmd in ["d=.ca; echo evil >> ${d}r/permissions.toml", "d=.ca; rm -f ${d}r/permissions.toml"]:
            r = _shell(rt, cmd)
            assert r["status"] == "failed", (cmd, r)
        assert open(perms).read() == "# the operator's\n"
        r = _shell(rt, "sleep 60 & echo $! > bg.pid; sleep 60", timeout_ms=1000)
        assert r["status"] == "failed" and r["error"].startswith("sandbox timeout:"), r
        pid = open(os.path.join(root, "bg.pid")).read().strip()
        assert _gone(pid), f"sleep {pid} was left behind"
        rt.set_permissions({"sandbox": {"default": "small", "profiles": {"small": {"limits": {"processes": 16}}}}})
        r = _shell(rt, "i=0; while [ $i -lt 200 ]; do sleep 2 & i=$((i+1)); done; echo $i", timeout_ms=20000)
        assert r["status"] == "failed" and r["error"].startswith("sandbox limit:"), r
        assert "`processes` limit" in r["error"], r


def test_constructs_the_matcher_asks_about_run_harmlessly_when_allowed():
    """Nothing configured asks here, so these run: a command substitution in
    arithmetic and wrappers the matcher cannot read through still cannot
    write outside the root."""
    with _workspace() as (root, outside):
        a, b = os.path.join(outside, "arith"), os.path.join(outside, "wrapped")
        rt = car.CarRuntime()
        rt.register_shell_tool(root)
        for cmd in [f"echo $(( $(echo 1 > {a}; echo 2) + 1 ))", f"env sh -c 'echo x > {b}'",
                    f"timeout 5 sh -c 'echo x > {b}'"]:
            r = _shell(rt, cmd)
            assert r["status"] in ("succeeded", "failed"), (cmd, r)  # it ran
        assert not os.path.exists(a) and not os.path.exists(b)
        ev = json.loads(rt.event_query(json.dumps({"kinds": ["SandboxRun"]})))
        assert ev["count"] == 3, ev
