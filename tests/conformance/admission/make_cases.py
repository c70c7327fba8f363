#!/usr/bin/env python3
"""Writes cases.json: the admission conformance corpus every front end runs.

Each case: a configuration (the admission document; the CLI runs its TOML
form), optional registered policies, policy files, an approvals ledger and an
approver, a proposal, and per action the expected status and deciding layer (every case has a
`tier`: the daemon's sessions always run with the tier layer on)
(the `layer` of the action's last AdmissionDecided event outside the
`compensation` stage; "none" when no layer recorded a decision), and for a
compensable action what became of its compensation on abort: `compensated`,
`refused` (a compensation_error naming the refusal) or `none`. Tools are stubs registered from `tools`: a call
returns {"ok": true}; a call with `"fail": true` in its parameters fails.
Run it after editing; commit both files.
"""
import json, pathlib

TOOLS = [
    {"name": "shell", "parameters": {"type": "object", "properties": {"command": {"type": "string"}, "fail": {"type": "boolean"}}, "required": ["command"]}},
    {"name": "write_file", "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}}, "required": ["path"]}},
    {"name": "read_file", "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}},
    {"name": "migrate", "parameters": {"type": "object", "properties": {"env": {"type": "string"}}, "required": ["env"]}},
    {"name": "deploy", "parameters": {"type": "object", "properties": {"env": {"type": "string"}}, "required": ["env"]}},
    {"name": "fetch", "parameters": {"type": "object", "properties": {"url": {"type": "string"}}}},
    {"name": "lookup", "parameters": {"type": "object"}},
    {"name": "work", "parameters": {"type": "object", "properties": {"fail": {"type": "boolean"}}}},
]

def tc(id, tool, params=None, **kw):
    a = {"id": id, "type": "tool_call", "tool": tool, "parameters": params or {}}
    a.update(kw)
    return a

def sw(id, key, value, **kw):
    a = {"id": id, "type": "state_write", "parameters": {"key": key, "value": value}}
    a.update(kw)
    return a

def exp(*rows):
    return [{"id": i, "status": s, "layer": l} for (i, s, l) in rows]

SKIP = {"failure_behavior": "skip"}
FAILING = tc("boom", "work", {"fail": True}, max_retries=0)

cases = []
def case(name, config, actions, expected, **extra):
    # Every case runs with the tier layer on, as a daemon session always does
    # (it starts at sandbox_edit); an action no other layer decided is then
    # decided by the tier.
    if "tier" not in config:
        config = dict(config, tier="sandbox_edit")
        expected = [dict(e, layer="tier") if e["layer"] == "none" else e for e in expected]
    c = {"name": name, "config": config, "proposal": {"id": name.replace(" ", "-"), "actions": actions}, "expected": expected}
    c.update(extra)
    cases.append(c)

# --- no layer configured ---
case("nothing configured runs everything", {}, [tc("a", "lookup"), sw("b", "k", 1)],
     exp(("a", "succeeded", "none"), ("b", "succeeded", "none")))
# --- validation, budget, tool ---
case("unknown dependency is refused", {}, [tc("a", "lookup", dependencies=["ghost"], **SKIP), tc("b", "lookup")],
     exp(("a", "rejected", "validation"), ("b", "succeeded", "none")))
case("dependency cycle is refused", {}, [tc("a", "lookup", dependencies=["b"], **SKIP), tc("b", "lookup", dependencies=["a"], **SKIP), tc("c", "lookup")],
     exp(("a", "rejected", "validation"), ("b", "rejected", "validation"), ("c", "succeeded", "none")))
case("budget refuses the whole proposal", {"budget": {"max_actions": 1}}, [tc("a", "lookup"), tc("b", "lookup")],
     exp(("a", "rejected", "budget"), ("b", "rejected", "budget")))
case("budget on tool calls", {"budget": {"max_tool_calls": 2}}, [tc("a", "lookup"), sw("s", "k", 1)],
     exp(("a", "succeeded", "none"), ("s", "succeeded", "none")))
case("unregistered tool is refused", {}, [tc("a", "no_such_tool", **SKIP), tc("b", "lookup")],
     exp(("a", "rejected", "tool"), ("b", "succeeded", "none")))
case("parameters invalid against the schema", {}, [tc("a", "migrate", {"env": 3}, **SKIP), tc("b", "migrate", {"env": "dev"})],
     exp(("a", "rejected", "tool"), ("b", "succeeded", "none")))
# --- policies ---
case("registered deny_tool policy", {}, [tc("a", "migrate", {"env": "dev"}, **SKIP), tc("b", "lookup")],
     exp(("a", "rejected", "policy"), ("b", "succeeded", "none")),
     policies=[{"name": "no_deploy", "rule": "deny_tool", "target": "migrate"}])
case("deny_tool_param policy", {}, [tc("a", "migrate", {"env": "prod"}, **SKIP), tc("b", "migrate", {"env": "dev"})],
     exp(("a", "rejected", "policy"), ("b", "succeeded", "none")),
     policies=[{"name": "no_prod", "rule": "deny_tool_param", "target": "migrate", "key": "env", "pattern": "prod"}])
case("policy file deny_tool", {}, [tc("a", "shell", {"command": "ls"}, **SKIP), tc("b", "lookup")],
     exp(("a", "rejected", "policy"), ("b", "succeeded", "none")),
     policy_files={"base.toml": "deny_tool = [\"shell\"]\n"})
case("policy beats an allow preset", {"preset": "open"}, [tc("a", "migrate", {"env": "dev"}, **SKIP)],
     exp(("a", "rejected", "policy")),
     policies=[{"name": "no_deploy", "rule": "deny_tool", "target": "migrate"}])
# --- tier ---
case("tier escalation refuses the proposal", {"tier": "sandbox_edit"}, [tc("a", "lookup"), tc("b", "shell", {"command": "rm -rf /"})],
     exp(("a", "rejected", "tier"), ("b", "rejected", "tier")))
case("read_only refuses a write", {"tier": "read_only"}, [tc("w", "write_file", {"path": "x", "content": "y"})],
     exp(("w", "rejected", "tier")))
# The classifier has no read-only class of its own: at `read_only` every
# action needs an approval, as on the daemon.
case("read_only refuses even a read", {"tier": "read_only"}, [tc("r", "read_file", {"path": "x"})],
     exp(("r", "rejected", "tier")))
case("full_access needs an approval even when granted", {"tier": "full_access"}, [tc("d", "deploy", {"env": "prod"})],
     exp(("d", "rejected", "tier")))
case("tier escalation with a ledger approval runs", {"tier": "full_access"}, [tc("d", "deploy", {"env": "prod"})],
     exp(("d", "succeeded", "tier")),
     ledger=[{"fingerprint": "tool_call|deploy|{\"env\":\"prod\"}", "required_tier": "full_access", "decision": "approved", "reviewer": "ops", "reason": "reviewed", "decided_at": "2026-01-01T00:00:00Z"}])
case("a rejected operation is refused at any tier", {"tier": "full_access"}, [tc("d", "deploy", {"env": "prod"})],
     exp(("d", "rejected", "tier")),
     ledger=[{"fingerprint": "tool_call|deploy|{\"env\":\"prod\"}", "required_tier": "full_access", "decision": "rejected", "reviewer": "ops", "reason": "no", "decided_at": "2026-01-01T00:00:00Z"}])
case("sandbox tier admits a sandbox write", {"tier": "sandbox_edit"}, [tc("w", "write_file", {"path": "x", "content": "y"})],
     exp(("w", "succeeded", "tier")))
# --- chain: hooks, deny, shell allow, ask, can_use_tool, default ---
case("static hook denies", {"hooks": [{"tool": "lookup", "verdict": "deny"}]}, [tc("a", "lookup", **SKIP), tc("b", "read_file", {"path": "x"})],
     exp(("a", "rejected", "hook"), ("b", "succeeded", "default")))
case("static hook allows before the preset", {"preset": "strict", "hooks": [{"tool": "write_file", "verdict": "allow"}]}, [tc("w", "write_file", {"path": "x"})],
     exp(("w", "succeeded", "hook")))
case("deny rule by tool", {"deny": [{"tool": "migrate"}]}, [tc("d", "migrate", {"env": "dev"}, **SKIP), tc("l", "lookup")],
     exp(("d", "rejected", "deny-rule"), ("l", "succeeded", "default")))
case("deny rule by argv", {"shell": {"deny": ["touch **"]}, "preset": "open"}, [tc("a", "shell", {"command": "touch victim"}, **SKIP), tc("b", "shell", {"command": "ls"})],
     exp(("a", "rejected", "deny-rule"), ("b", "succeeded", "default")))
case("deny rule by risk", {"deny": [{"risk": "write"}]}, [tc("w", "write_file", {"path": "x"}, **SKIP), tc("r", "read_file", {"path": "x"})],
     exp(("w", "rejected", "deny-rule"), ("r", "succeeded", "default")))
case("deny beats a shell allow pattern", {"shell": {"allow": ["touch **"]}, "deny": [{"tool": "shell"}]}, [tc("t", "shell", {"command": "touch marker"}, **SKIP)],
     exp(("t", "rejected", "deny-rule")))
case("shell deny pattern beats a shell allow pattern", {"shell": {"allow": ["touch **"], "deny": ["touch marker"]}}, [tc("t", "shell", {"command": "touch marker"}, **SKIP), tc("u", "shell", {"command": "touch other"})],
     exp(("t", "rejected", "deny-rule"), ("u", "succeeded", "shell-allow")))
case("shell allow lifts the preset ask", {"preset": "standard", "shell": {"allow": ["git status"]}}, [tc("g", "shell", {"command": "git status"}), tc("h", "shell", {"command": "git status; make"}, **SKIP)],
     exp(("g", "succeeded", "shell-allow"), ("h", "rejected", "ask-rule")), approvals=False)
case("a substitution is never shell-allowed", {"preset": "standard", "shell": {"allow": ["echo **"]}}, [tc("e", "shell", {"command": "echo $(touch x)"}, **SKIP)],
     exp(("e", "rejected", "ask-rule")), approvals=False)
case("ask without an approvals store is refused", {"ask": [{"tool": "migrate"}]}, [tc("d", "migrate", {"env": "dev"}, **SKIP), tc("l", "lookup")],
     exp(("d", "rejected", "ask-rule"), ("l", "succeeded", "default")), approvals=False)
case("preset standard asks for execute", {"preset": "standard"}, [tc("s", "shell", {"command": "make"}, **SKIP), tc("r", "read_file", {"path": "x"})],
     exp(("s", "rejected", "ask-rule"), ("r", "succeeded", "default")), approvals=False)
case("preset strict denies destructive", {"preset": "strict", "tools": [{"name": "tidy", "description": "", "parameters": {"type": "object"}, "risk": "destructive"}]},
     [tc("w", "tidy", **SKIP)], exp(("w", "rejected", "deny-rule")), extra_tools=[{"name": "tidy", "parameters": {"type": "object"}}])
case("preset open allows undeclared", {"preset": "open"}, [tc("l", "lookup")], exp(("l", "succeeded", "default")))
case("can_use_tool denies", {"can_use_tool": {"tool": "lookup", "verdict": "deny"}}, [tc("l", "lookup", **SKIP), tc("r", "read_file", {"path": "x"})],
     exp(("l", "rejected", "can_use_tool"), ("r", "succeeded", "default")))
case("can_use_tool allows a needs_approval tool", {"can_use_tool": {"tool": "migrate", "verdict": "allow"}, "tools": [{"name": "migrate", "description": "", "parameters": {"type": "object"}, "needs_approval": True}]},
     [tc("d", "migrate", {"env": "dev"})], exp(("d", "succeeded", "can_use_tool")))
case("needs_approval asks by default", {"tools": [{"name": "migrate", "description": "", "parameters": {"type": "object"}, "needs_approval": True}]},
     [tc("d", "migrate", {"env": "dev"}, **SKIP)], exp(("d", "rejected", "default")), approvals=False)
case("layer order: deny rule before ask rule", {"deny": [{"tool": "migrate"}], "ask": [{"tool": "migrate"}]}, [tc("d", "migrate", {"env": "dev"}, **SKIP)],
     exp(("d", "rejected", "deny-rule")))
case("layer order: hook before deny rule", {"hooks": [{"tool": "migrate", "verdict": "ask"}], "deny": [{"tool": "migrate"}]}, [tc("d", "migrate", {"env": "dev"}, **SKIP)],
     exp(("d", "rejected", "hook")), approvals=False)
case("layer order: policy before chain", {"deny": [{"tool": "migrate"}]}, [tc("d", "migrate", {"env": "dev"}, **SKIP)],
     exp(("d", "rejected", "policy")), policies=[{"name": "no_deploy", "rule": "deny_tool", "target": "migrate"}])
case("layer order: tier before chain", {"tier": "read_only", "preset": "open"}, [tc("w", "write_file", {"path": "x"})],
     exp(("w", "rejected", "tier")))
# --- the data_source / interactive precheck: an ask is a deny ---
LOOKUP_DS = {"name": "lookup", "description": "", "parameters": {"type": "object"}, "kind": "data_source"}
case("an ask for a data_source tool is a deny", {"ask": [{"tool": "lookup"}], "tools": [LOOKUP_DS]}, [tc("l", "lookup", **SKIP), tc("m", "migrate", {"env": "dev"})],
     exp(("l", "rejected", "ask-rule"), ("m", "succeeded", "default")), approver="approve")
case("an interactive tool needing approval is denied, not asked", {"tools": [{"name": "migrate", "description": "", "parameters": {"type": "object"}, "needs_approval": True, "kind": "interactive"}]},
     [tc("d", "migrate", {"env": "dev"}, **SKIP)], exp(("d", "rejected", "default")), approver="approve")
case("a data_source tool no rule asks about runs", {"preset": "standard", "tools": [dict(LOOKUP_DS, risk="read")]}, [tc("l", "lookup")],
     exp(("l", "succeeded", "default")))
case("an undeclared data_source tool the preset asks about is denied", {"preset": "standard", "tools": [LOOKUP_DS]}, [tc("l", "lookup", **SKIP)],
     exp(("l", "rejected", "ask-rule")), approver="approve")
# --- plan mode: only the tools that read are admitted ---
MIGRATE_WRITE = {"name": "migrate", "description": "", "parameters": {"type": "object"}, "risk": "write"}
ASK_HUMAN = {"name": "fetch", "description": "", "parameters": {"type": "object"}, "risk": "read", "kind": "interactive"}
WORK_DS = {"name": "work", "description": "", "parameters": {"type": "object"}, "kind": "data_source"}
case("plan mode admits data_source and read tools only", {"plan_mode": True, "tools": [LOOKUP_DS]},
     [tc("l", "lookup"), tc("r", "read_file", {"path": "x"}), tc("w", "write_file", {"path": "x"}, **SKIP), tc("m", "migrate", {"env": "dev"}, **SKIP)],
     exp(("l", "succeeded", "default"), ("r", "succeeded", "default"), ("w", "rejected", "plan"), ("m", "rejected", "plan")))
case("plan mode refuses write and interactive tools under a preset", {"plan_mode": True, "preset": "open", "tools": [MIGRATE_WRITE, ASK_HUMAN]},
     [tc("d", "migrate", {"env": "dev"}, **SKIP), tc("f", "fetch", {"url": "x"}, **SKIP), tc("r", "read_file", {"path": "x"})],
     exp(("d", "rejected", "plan"), ("f", "rejected", "plan"), ("r", "succeeded", "default")))
case("plan mode comes before the chain's allow", {"plan_mode": True, "can_use_tool": {"tool": "migrate", "verdict": "allow"}},
     [tc("m", "migrate", {"env": "dev"}, **SKIP), tc("l", "lookup", **SKIP)],
     exp(("m", "rejected", "plan"), ("l", "rejected", "plan")))
case("plan mode refuses a shell command whatever it is", {"plan_mode": True, "shell": {"allow": ["ls **"]}},
     [tc("s", "shell", {"command": "ls"}, **SKIP), tc("r", "read_file", {"path": "x"})],
     exp(("s", "rejected", "plan"), ("r", "succeeded", "default")))
case("plan mode refuses a mutating compensation", {"plan_mode": True, "compensate_on_abort": True, "tools": [LOOKUP_DS, WORK_DS]},
     [tc("step", "lookup", reversibility="compensable", compensation={"type": "tool", "tool": "migrate", "parameters": {"env": "prod"}}),
      tc("boom", "work", {"fail": True}, dependencies=["step"], max_retries=0)],
     exp(("step", "succeeded", "default"), ("boom", "failed", "default")),
     compensation={"step": "refused"})
# --- the circuit breaker on repeated denials ---
BREAKER2 = {"max_consecutive_denials": 2, "max_window_denials": 0}
case("the breaker refuses the rest after consecutive denials", {"deny": [{"tool": "migrate"}], "breaker": BREAKER2},
     [tc("d1", "migrate", {"env": "a"}, **SKIP), tc("d2", "migrate", {"env": "b"}, **SKIP), tc("l", "lookup", **SKIP), tc("r", "read_file", {"path": "x"}, **SKIP)],
     exp(("d1", "rejected", "deny-rule"), ("d2", "rejected", "deny-rule"), ("l", "rejected", "breaker"), ("r", "rejected", "breaker")))
case("an allowed action restarts the consecutive count", {"deny": [{"tool": "migrate"}], "breaker": BREAKER2},
     [tc("d1", "migrate", {"env": "a"}, **SKIP), tc("l1", "lookup"), tc("d2", "migrate", {"env": "b"}, **SKIP), tc("l2", "lookup", {"q": 2})],
     exp(("d1", "rejected", "deny-rule"), ("l1", "succeeded", "default"), ("d2", "rejected", "deny-rule"), ("l2", "succeeded", "default")))
case("the breaker's window counts denials that are not consecutive", {"deny": [{"tool": "migrate"}], "breaker": {"max_consecutive_denials": 0, "max_window_denials": 2, "window_secs": 300}},
     [tc("d1", "migrate", {"env": "a"}, **SKIP), tc("l1", "lookup"), tc("d2", "migrate", {"env": "b"}, **SKIP), tc("l2", "lookup", {"q": 2}, **SKIP)],
     exp(("d1", "rejected", "deny-rule"), ("l1", "succeeded", "default"), ("d2", "rejected", "deny-rule"), ("l2", "rejected", "breaker")))
# --- ask approvals ---
NO_WIRE_APPROVALS = "ask approvals over the wire are issue #19: the daemon has no approvals store yet"
case("ask approved by the approver", {"ask": [{"tool": "migrate"}], "approval_timeout_ms": 5000}, [tc("d", "migrate", {"env": "dev"})],
     exp(("d", "succeeded", "approval")), approver="approve", daemon_skip=NO_WIRE_APPROVALS)
case("ask denied by the approver", {"ask": [{"tool": "migrate"}], "approval_timeout_ms": 5000}, [tc("d", "migrate", {"env": "dev"}, **SKIP), tc("l", "lookup")],
     exp(("d", "rejected", "approval"), ("l", "succeeded", "default")), approver="deny", daemon_skip=NO_WIRE_APPROVALS)
case("ask times out", {"ask": [{"tool": "migrate"}], "approval_timeout_ms": 300}, [tc("d", "migrate", {"env": "dev"}, **SKIP)],
     exp(("d", "rejected", "approval")), approver="timeout", daemon_skip=NO_WIRE_APPROVALS)
case("ask with no approver attached is refused", {"ask": [{"tool": "migrate"}]}, [tc("d", "migrate", {"env": "dev"}, **SKIP)],
     exp(("d", "rejected", "approval")), daemon_skip=NO_WIRE_APPROVALS)
case("approval does not override a deny", {"ask": [{"tool": "migrate"}], "deny": [{"tool": "migrate"}]}, [tc("d", "migrate", {"env": "dev"}, **SKIP)],
     exp(("d", "rejected", "deny-rule")), approver="approve")
# --- dispatch ---
case("precondition fails at dispatch", {}, [tc("a", "lookup", preconditions=[{"key": "ready", "operator": "eq", "value": True}], **SKIP), tc("b", "lookup")],
     exp(("a", "rejected", "dispatch"), ("b", "succeeded", "none")))
case("inspector egress allowlist denies at dispatch", {"inspectors": {"egress_allowlist": ["example.com"]}},
     [tc("a", "fetch", {"url": "https://evil.test/x"}, **SKIP), tc("b", "fetch", {"url": "https://api.example.com/x"})],
     exp(("a", "rejected", "inspector"), ("b", "succeeded", "none")))
case("inspector repetition limit", {"inspectors": {"repetition_limit": 1}},
     [tc("a", "lookup", {"q": 1}), tc("b", "lookup", {"q": 1}, dependencies=["a"], **SKIP)],
     exp(("a", "succeeded", "none"), ("b", "rejected", "inspector")))
case("trace rule denial is rejected", {}, [tc("d", "migrate", {"env": "dev"}, **SKIP), tc("l", "lookup")],
     exp(("d", "rejected", "trace"), ("l", "succeeded", "none")),
     policy_files={"trace.toml": "[[trace_rule]]\ntool = \"migrate\"\nrequire_before = [\"work\"]\n"})
# --- compensation passes admission ---
case("a denied action_ref compensation never runs", {"shell": {"deny": ["touch **"]}, "compensate_on_abort": True, "preset": "open"},
     [tc("evil", "shell", {"command": "touch victim"}, **SKIP),
      tc("step", "lookup", reversibility="compensable", compensation={"type": "action_ref", "action_id": "evil"}),
      tc("boom", "work", {"fail": True}, dependencies=["step"], max_retries=0)],
     exp(("evil", "rejected", "deny-rule"), ("step", "succeeded", "default"), ("boom", "failed", "default")),
     compensation={"step": "refused"})
case("a denied tool compensation never runs", {"deny": [{"tool": "migrate"}], "compensate_on_abort": True},
     [tc("step", "lookup", reversibility="compensable", compensation={"type": "tool", "tool": "migrate", "parameters": {"env": "prod"}}),
      tc("boom", "work", {"fail": True}, dependencies=["step"], max_retries=0)],
     exp(("step", "succeeded", "default"), ("boom", "failed", "default")),
     compensation={"step": "refused"})
case("an allowed compensation runs", {"compensate_on_abort": True, "preset": "open"},
     [tc("step", "lookup", reversibility="compensable", compensation={"type": "tool", "tool": "lookup", "parameters": {"undo": True}}),
      tc("boom", "work", {"fail": True}, dependencies=["step"], max_retries=0)],
     exp(("step", "succeeded", "default"), ("boom", "failed", "default")),
     compensation={"step": "compensated"})
case("compensation is off unless configured", {"deny": [{"tool": "migrate"}]},
     [tc("step", "lookup", reversibility="compensable", compensation={"type": "tool", "tool": "lookup", "parameters": {}}),
      tc("boom", "work", {"fail": True}, dependencies=["step"], max_retries=0)],
     exp(("step", "succeeded", "default"), ("boom", "failed", "default")),
     compensation={"step": "none"})
# --- retries are capped ---
case("retries are capped by the configuration", {"retry_cap": 1, "retry_backoff_ms": 0},
     [tc("r", "work", {"fail": True}, failure_behavior="retry", max_retries=4294967295)],
     exp(("r", "failed", "none")), cost={"retries": 1})

out = {"tools": TOOLS, "cases": cases}
path = pathlib.Path(__file__).with_name("cases.json")
path.write_text(json.dumps(out, indent=1) + "\n")
print(f"{len(cases)} cases -> {path}")
