//! The permission chain: every layer's decisive and pass-through behaviour,
//! modified input, the preset table, merging, inheritance and the dry run.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use car_runtime::permission::{
    CanUseDecision, DecidedBy, HookDecision, PermissionChain, PermissionConfig, Preset, Risk, RuleSpec, ToolDefinition,
    Verdict, compile_permission_preset,
};
use serde_json::{Value, json};

fn tool(name: &str, risk: Option<Risk>, needs_approval: bool) -> ToolDefinition {
    let t = ToolDefinition::new(name, "", json!({})).unwrap().with_needs_approval(needs_approval);
    match risk {
        Some(r) => t.with_risk(r),
        None => t,
    }
}

fn cfg(v: Value) -> PermissionConfig {
    PermissionConfig::from_value(v).unwrap()
}

fn chain(v: Value) -> PermissionChain {
    PermissionChain::from_json(&v).unwrap()
}

const RISKS: [Option<Risk>; 6] =
    [Some(Risk::Read), Some(Risk::Write), Some(Risk::Network), Some(Risk::Execute), Some(Risk::Destructive), None];

#[test]
fn preset_table_every_row() {
    use Verdict::{Allow as A, Ask as Q, Deny as D};
    // Rows: read, write, network, execute, destructive, undeclared.
    let table: [(&str, [Verdict; 6]); 3] =
        [("strict", [A, Q, Q, Q, D, Q]), ("standard", [A, A, Q, Q, Q, Q]), ("open", [A, A, A, A, A, A])];
    for (preset, row) in table {
        let c = chain(json!({"preset": preset}));
        for (risk, want) in RISKS.iter().zip(row) {
            let e = c.evaluate(&tool("t", *risk, false), &json!({}));
            assert_eq!(e.verdict, want, "{preset} x {risk:?}");
            let by = match want {
                A => DecidedBy::Default,
                Q => DecidedBy::AskRule,
                D => DecidedBy::DenyRule,
            };
            assert_eq!(e.decided_by, by, "{preset} x {risk:?}");
            // needs_approval: an allow cell emits no rule, so the default asks.
            let e = c.evaluate(&tool("t", *risk, true), &json!({}));
            let want = if want == A { Q } else { want };
            assert_eq!(e.verdict, want, "{preset} x {risk:?} with needs_approval");
        }
    }
}

#[test]
fn preset_compilation_is_public_and_exact() {
    let strict = serde_json::to_value(compile_permission_preset("strict").unwrap()).unwrap();
    assert_eq!(
        strict,
        json!({"deny": [{"risk": ["destructive"]}], "ask": [{"risk": ["write", "network", "execute", "undeclared"]}]})
    );
    let standard = serde_json::to_value(compile_permission_preset("standard").unwrap()).unwrap();
    assert_eq!(standard, json!({"deny": [], "ask": [{"risk": ["network", "execute", "destructive", "undeclared"]}]}));
    let open = serde_json::to_value(compile_permission_preset("open").unwrap()).unwrap();
    assert_eq!(open, json!({"deny": [], "ask": []}));
    for bad in ["Strict", "lenient", ""] {
        let e = compile_permission_preset(bad).unwrap_err();
        assert_eq!(e.code(), "unknown_preset");
        assert!(e.to_string().contains(&format!("`{bad}`")));
        assert_eq!(PermissionChain::from_json(&json!({"preset": bad})).unwrap_err().code(), "unknown_preset");
    }
    assert_eq!(Preset::parse("open").unwrap(), Preset::Open);
}

#[test]
fn preset_rules_come_after_the_users_own() {
    let c = chain(json!({"preset": "strict", "deny": [{"tool": "wipe"}]}));
    let e = c.evaluate(&tool("wipe", Some(Risk::Destructive), false), &json!({}));
    assert_eq!(e.verdict, Verdict::Deny);
    assert_eq!(
        e.rule,
        Some(RuleSpec { tool: Some(car_runtime::permission::OneOrMany::One("wipe".into())), ..Default::default() })
    );
    assert_eq!(c.deny_rules().len(), 2);
    assert_eq!(serde_json::to_value(&c.deny_rules()[1]).unwrap(), json!({"risk": ["destructive"]}));
}

#[test]
fn hooks_are_decisive_in_order() {
    for (verdict, want) in [("allow", Verdict::Allow), ("deny", Verdict::Deny), ("ask", Verdict::Ask)] {
        // A decisive hook stops the chain before a deny rule and later hooks.
        let c =
            chain(json!({"hooks": [{"tool": "t", "verdict": verdict}, {"verdict": "deny"}], "deny": [{"tool": "t"}]}));
        let e = c.evaluate(&tool("t", None, true), &json!({"x": 1}));
        assert_eq!((e.verdict, e.decided_by, e.rule), (want, DecidedBy::Hook, None), "{verdict}");
    }
    // A hook with no verdict passes through.
    let c = chain(json!({"hooks": [{"tool": "other", "verdict": "allow"}], "deny": [{"tool": "t"}]}));
    let e = c.evaluate(&tool("t", None, false), &json!({}));
    assert_eq!((e.verdict, e.decided_by), (Verdict::Deny, DecidedBy::DenyRule));
}

#[test]
fn closure_hooks_pass_modify_and_panics_deny() {
    let seen = Arc::new(AtomicUsize::new(0));
    let s2 = seen.clone();
    let c = PermissionChain::from_config(
        &cfg(json!({"deny": [{"tool": "shell", "argv": "rm **"}]}))
            .with_hook(|_, _| HookDecision::Pass)
            .with_hook(|name, input| {
                if name == "shell" && input["command"] == "ls" {
                    HookDecision::ModifiedInput(json!({"command": "rm -rf /"}))
                } else {
                    HookDecision::Pass
                }
            })
            .with_hook(move |_, input| {
                // Later hooks see the modified input.
                if input["command"] == "rm -rf /" {
                    s2.fetch_add(1, Ordering::SeqCst);
                }
                HookDecision::Pass
            }),
    )
    .unwrap();
    let e = c.evaluate(&tool("shell", Some(Risk::Execute), false), &json!({"command": "ls"}));
    assert_eq!(seen.load(Ordering::SeqCst), 1);
    // The deny rule evaluated the modified input, and the dry run reports it.
    assert_eq!((e.verdict, e.decided_by), (Verdict::Deny, DecidedBy::DenyRule));
    assert_eq!(e.input, json!({"command": "rm -rf /"}));

    let c = PermissionChain::from_config(&PermissionConfig::default().with_hook(|_, _| panic!("bad hook"))).unwrap();
    let e = c.evaluate(&tool("t", Some(Risk::Read), false), &json!({}));
    assert_eq!((e.verdict, e.decided_by), (Verdict::Deny, DecidedBy::Hook));
    assert!(e.reason.contains("panicked"));
}

#[test]
fn static_modified_input_reaches_later_layers_and_the_result() {
    let c = chain(json!({
        "hooks": [{"tool": "shell", "modified_input": {"command": "git push --force"}}],
        "ask": [{"tool": "shell", "argv": "git push **"}]
    }));
    let e = c.evaluate(&tool("shell", None, false), &json!({"command": "git status"}));
    assert_eq!((e.verdict, e.decided_by), (Verdict::Ask, DecidedBy::AskRule));
    assert_eq!(e.input, json!({"command": "git push --force"}));
    // And reaches the default unchanged when nothing else decides.
    let c = chain(json!({"hooks": [{"modified_input": {"safe": true}}]}));
    let e = c.evaluate(&tool("t", Some(Risk::Read), false), &json!({"safe": false}));
    assert_eq!((e.verdict, e.decided_by, e.input), (Verdict::Allow, DecidedBy::Default, json!({"safe": true})));
}

#[test]
fn deny_and_ask_rules_decide_or_pass() {
    let c = chain(json!({
        "deny": [{"tool": ["a", "b"]}, {"risk": "destructive"}],
        "ask": [{"tool": "c"}, {"risk": ["network", "undeclared"]}]
    }));
    let cases = [
        (tool("a", Some(Risk::Read), false), Verdict::Deny, DecidedBy::DenyRule),
        (tool("b", Some(Risk::Read), false), Verdict::Deny, DecidedBy::DenyRule),
        (tool("z", Some(Risk::Destructive), false), Verdict::Deny, DecidedBy::DenyRule),
        (tool("c", Some(Risk::Read), false), Verdict::Ask, DecidedBy::AskRule),
        (tool("z", Some(Risk::Network), false), Verdict::Ask, DecidedBy::AskRule),
        (tool("z", None, false), Verdict::Ask, DecidedBy::AskRule),
        (tool("z", Some(Risk::Write), false), Verdict::Allow, DecidedBy::Default),
        (tool("z", Some(Risk::Write), true), Verdict::Ask, DecidedBy::Default),
    ];
    for (t, v, by) in cases {
        let e = c.evaluate(&t, &json!({}));
        assert_eq!((e.verdict, e.decided_by), (v, by), "{} {:?}", t.name, t.risk);
        assert_eq!(e.rule.is_some(), by != DecidedBy::Default);
    }
    // Deny wins over ask for the same call.
    let c = chain(json!({"ask": [{"tool": "a"}], "deny": [{"tool": "a"}]}));
    assert_eq!(c.evaluate(&tool("a", None, false), &json!({})).verdict, Verdict::Deny);
    // A named-only tool is undeclared.
    assert_eq!(chain(json!({"ask": [{"risk": "undeclared"}]})).evaluate_named("x", &json!({})).verdict, Verdict::Ask);
}

#[test]
fn can_use_tool_slot() {
    let base = cfg(json!({"ask": [{"tool": "asked"}]}));
    let c = PermissionChain::from_config(&base.clone().with_can_use_tool(|name, input| match name {
        "deploy_service" if input["service"] == "docs-preview" => CanUseDecision::Allow,
        "deploy_service" => CanUseDecision::Deny,
        "rewrite" => CanUseDecision::ModifiedInput(json!({"rewritten": true})),
        _ => CanUseDecision::Pass,
    }))
    .unwrap();
    let deploy = tool("deploy_service", Some(Risk::Execute), true);
    // Explicit allow is decisive even for a needs_approval tool.
    let e = c.evaluate(&deploy, &json!({"service": "docs-preview"}));
    assert_eq!((e.verdict, e.decided_by), (Verdict::Allow, DecidedBy::CanUseTool));
    let e = c.evaluate(&deploy, &json!({"service": "api"}));
    assert_eq!((e.verdict, e.decided_by), (Verdict::Deny, DecidedBy::CanUseTool));
    // Modified input continues to the default and is reported.
    let e = c.evaluate(&tool("rewrite", None, true), &json!({}));
    assert_eq!((e.verdict, e.decided_by, e.input), (Verdict::Ask, DecidedBy::Default, json!({"rewritten": true})));
    // Pass falls to the default.
    let e = c.evaluate(&tool("other", Some(Risk::Read), false), &json!({}));
    assert_eq!((e.verdict, e.decided_by), (Verdict::Allow, DecidedBy::Default));
    // The rule layers come first: an ask rule is never overridden.
    let e = c.evaluate(&tool("asked", None, false), &json!({}));
    assert_eq!((e.verdict, e.decided_by), (Verdict::Ask, DecidedBy::AskRule));
    // A panic denies.
    let c = PermissionChain::from_config(&base.with_can_use_tool(|_, _| panic!("boom"))).unwrap();
    let e = c.evaluate(&tool("t", Some(Risk::Read), false), &json!({}));
    assert_eq!((e.verdict, e.decided_by), (Verdict::Deny, DecidedBy::CanUseTool));
}

#[test]
fn can_use_tool_substitution_still_faces_the_deny_rules() {
    let c = PermissionChain::from_config(
        &cfg(json!({"deny": [{"tool": "shell", "argv": "rm **"}]}))
            .with_can_use_tool(|_, _| CanUseDecision::ModifiedInput(json!({"command": "rm -rf /"}))),
    )
    .unwrap();
    let e = c.evaluate(&tool("shell", None, false), &json!({"command": "ls"}));
    assert_eq!((e.verdict, e.decided_by), (Verdict::Deny, DecidedBy::DenyRule));
}

#[test]
fn static_can_use_tool_from_json() {
    let c = chain(json!({"can_use_tool": {"tool": "deploy_service", "verdict": "allow"}}));
    let e = c.evaluate(&tool("deploy_service", Some(Risk::Execute), true), &json!({}));
    assert_eq!((e.verdict, e.decided_by), (Verdict::Allow, DecidedBy::CanUseTool));
    let e = c.evaluate(&tool("other", Some(Risk::Execute), true), &json!({}));
    assert_eq!((e.verdict, e.decided_by), (Verdict::Ask, DecidedBy::Default));
    let e = PermissionChain::from_json(&json!({"can_use_tool": {"verdict": "ask"}})).unwrap_err();
    assert_eq!(e.code(), "invalid_permission_hook");
}

#[test]
fn argv_rules_use_the_shell_matcher() {
    let c = chain(json!({
        "deny": [{"tool": "shell", "argv": "rm **"}],
        "ask": [{"tool": "shell", "argv": "git push **"}]
    }));
    let shell = tool("shell", Some(Risk::Read), false);
    let cases = [
        ("ls -la", Verdict::Allow, DecidedBy::Default),
        ("ls && /bin/rm -rf /", Verdict::Deny, DecidedBy::DenyRule),
        ("FOO=1 rm x", Verdict::Deny, DecidedBy::DenyRule),
        ("bash -c 'rm -rf /'", Verdict::Deny, DecidedBy::DenyRule),
        ("git push origin main", Verdict::Ask, DecidedBy::AskRule),
        // Unmatchable: the deny rule cannot be ruled out.
        ("$(echo rm) -rf /", Verdict::Ask, DecidedBy::DenyRule),
        ("echo 'unbalanced", Verdict::Ask, DecidedBy::DenyRule),
        ("ls\0", Verdict::Ask, DecidedBy::DenyRule),
        ("bash -c 'rm -rf \"$HOME\"'", Verdict::Ask, DecidedBy::DenyRule),
        ("bash -c 'git push'", Verdict::Ask, DecidedBy::AskRule),
    ];
    for (cmd, v, by) in cases {
        let e = c.evaluate(&shell, &json!({"command": cmd}));
        assert_eq!((e.verdict, e.decided_by), (v, by), "{cmd:?}");
    }
    // No command string: fail closed.
    let e = c.evaluate(&shell, &json!({"cmd": "rm -rf /"}));
    assert_eq!(e.verdict, Verdict::Ask);
    // Other tools are not concerned.
    let e = c.evaluate(&tool("fs_read", Some(Risk::Read), false), &json!({"command": "rm -rf /"}));
    assert_eq!(e.verdict, Verdict::Allow);
}

#[test]
fn domain_rules_enforced_for_fetch_advisory_elsewhere() {
    let c = chain(json!({
        "deny": [{"domains": ["evil.example", "*.tracker.example"]}],
        "ask": [{"tool": ["http_fetch", "shell"], "domains": ["ask.example"]}]
    }));
    let fetch = tool("http_fetch", Some(Risk::Network), false);
    let cases = [
        ("https://evil.example/x", Verdict::Deny),
        ("https://EVIL.example./x", Verdict::Deny),
        ("https://user@evil.example:8443/", Verdict::Deny),
        ("https://evil.example@good.example/", Verdict::Allow),
        ("https://a.b.tracker.example/", Verdict::Deny),
        ("https://tracker.example/", Verdict::Allow),
        ("https://nottracker.example/", Verdict::Allow),
        ("https://ask.example/", Verdict::Ask),
        ("https://good.example/?next=https://evil.example", Verdict::Allow),
        ("not a url", Verdict::Ask),
        ("https://évil.example/", Verdict::Ask),
    ];
    for (url, want) in cases {
        let e = c.evaluate(&fetch, &json!({"url": url}));
        assert_eq!(e.verdict, want, "{url}");
        assert!(e.advisory.is_empty());
    }
    assert_eq!(c.evaluate(&fetch, &json!({})).verdict, Verdict::Ask, "no url: fail closed");

    // Any other tool: reported, never enforced.
    let shell = tool("shell", Some(Risk::Read), false);
    let e = c.evaluate(&shell, &json!({"command": "curl https://evil.example/a && curl https://ask.example"}));
    assert_eq!((e.verdict, e.decided_by), (Verdict::Allow, DecidedBy::Default));
    let adv = serde_json::to_value(&e.advisory).unwrap();
    assert_eq!(
        adv,
        json!([
            {"layer": "deny", "rule": {"domains": ["evil.example", "*.tracker.example"]}, "host": "evil.example"},
            {"layer": "ask", "rule": {"tool": ["http_fetch", "shell"], "domains": ["ask.example"]}, "host": "ask.example"}
        ])
    );
}

#[test]
fn engine_first_merge_and_single_can_use_tool_slot() {
    let engine = cfg(json!({"deny": [{"risk": "destructive"}], "hooks": [{"tool": "h", "verdict": "deny"}]}))
        .with_can_use_tool(|_, _| CanUseDecision::Deny);
    let profile = cfg(json!({"preset": "standard", "hooks": [{"tool": "h", "verdict": "allow"}]}))
        .with_can_use_tool(|_, _| CanUseDecision::Allow);
    let c = PermissionChain::compile(&engine, Some(&profile)).unwrap();
    // The engine's hook runs first.
    assert_eq!(c.evaluate(&tool("h", None, false), &json!({})).verdict, Verdict::Deny);
    // Engine deny rule, then the profile preset's ask rule.
    assert_eq!(c.evaluate(&tool("x", Some(Risk::Destructive), false), &json!({})).verdict, Verdict::Deny);
    let e = c.evaluate(&tool("deploy_service", Some(Risk::Execute), true), &json!({"service": "api"}));
    assert_eq!((e.verdict, e.decided_by), (Verdict::Ask, DecidedBy::AskRule));
    assert_eq!(
        serde_json::to_value(&e.rule).unwrap(),
        json!({"risk": ["network", "execute", "destructive", "undeclared"]})
    );
    // The profile's can_use_tool won the slot.
    let e = c.evaluate(&tool("r", Some(Risk::Read), true), &json!({}));
    assert_eq!((e.verdict, e.decided_by), (Verdict::Allow, DecidedBy::CanUseTool));
    // The JSON form `{engine, profile}` merges the same way.
    let j = chain(json!({"engine": {"deny": [{"risk": "destructive"}]}, "profile": {"preset": "standard"}}));
    assert_eq!(j.evaluate(&tool("d", Some(Risk::Execute), false), &json!({})).verdict, Verdict::Ask);
    assert_eq!(j.evaluate(&tool("d", Some(Risk::Destructive), false), &json!({})).decided_by, DecidedBy::DenyRule);
}

#[test]
fn inheritance_only_when_opted_in() {
    let engine = PermissionConfig::default();
    let parent = PermissionChain::from_config(&cfg(json!({"deny": [{"tool": "secret"}]}))).unwrap();
    let no = cfg(json!({"ask": [{"tool": "mine"}]}));
    let child = parent.for_child(&engine, &no).unwrap();
    assert_eq!(child.evaluate(&tool("secret", None, false), &json!({})).verdict, Verdict::Allow);
    assert_eq!(child.evaluate(&tool("mine", None, false), &json!({})).verdict, Verdict::Ask);
    let yes = cfg(json!({"ask": [{"tool": "mine"}], "inherit_permissions": true}));
    let child = parent.for_child(&engine, &yes).unwrap();
    assert_eq!(child.evaluate(&tool("secret", None, false), &json!({})).verdict, Verdict::Deny);
    assert_eq!(child.evaluate(&tool("mine", None, false), &json!({})).verdict, Verdict::Ask);
    // Without inheritance the engine layer still applies.
    let engine = cfg(json!({"deny": [{"tool": "engine_denied"}]}));
    let child = parent.for_child(&engine, &no).unwrap();
    assert_eq!(child.evaluate(&tool("engine_denied", None, false), &json!({})).verdict, Verdict::Deny);
}

#[test]
fn readonly_isolation_denies_write_and_destructive_only() {
    assert!(PermissionChain::new().is_empty());
    assert!(chain(json!({"preset": "open"})).is_empty());
    assert!(!chain(json!({"preset": "standard"})).is_empty());
    let c = PermissionChain::new().with_readonly_isolation();
    assert!(!c.is_empty());
    assert_eq!(c.evaluate(&tool("w", Some(Risk::Write), false), &json!({})).verdict, Verdict::Deny);
    assert_eq!(c.evaluate(&tool("d", Some(Risk::Destructive), false), &json!({})).verdict, Verdict::Deny);
    assert_eq!(c.evaluate(&tool("u", None, false), &json!({})).verdict, Verdict::Allow);
}

#[test]
fn configuration_errors() {
    let cases = [
        (json!({"deny": [{}]}), "invalid_permission_rule"),
        (json!({"deny": [{"argv": "rm **"}]}), "invalid_permission_rule"),
        (json!({"ask": [{"tool": []}]}), "invalid_permission_rule"),
        (json!({"deny": [{"domains": ["*"]}]}), "invalid_permission_rule"),
        (json!({"deny": [{"tool": ["ok", "deploy service"]}]}), "invalid_permission_rule"),
        (json!({"deny": [{"tool": "shell", "argv": "rm ** -rf"}]}), "invalid_shell_pattern"),
        (json!({"deny": [{"risk": "dangerous"}]}), "invalid_document"),
        (json!({"deny": [{"tool": "x", "allow": true}]}), "invalid_document"),
        (json!({"allow": [{"tool": "x"}]}), "invalid_document"),
        (json!({"hooks": [{"tool": "x"}]}), "invalid_permission_hook"),
        (json!({"hooks": [{"verdict": "allow", "modified_input": {}}]}), "invalid_permission_hook"),
        (json!({"preset": "yolo"}), "unknown_preset"),
        (json!([]), "invalid_argument"),
    ];
    for (v, code) in cases {
        let e = PermissionChain::from_json(&v).unwrap_err();
        assert_eq!(e.code(), code, "{v}");
    }
}

#[test]
fn chain_is_clone_send_sync() {
    fn assert_traits<T: Clone + Send + Sync + 'static>() {}
    assert_traits::<PermissionChain>();
}

#[test]
fn facade_functions() {
    use car_runtime::api::permission as api;
    let out = api::evaluate_permission(
        r#"{"engine": {"deny": [{"risk": "destructive"}]}, "profile": {"preset": "standard"}}"#,
        r#"{"name": "deploy_service", "parameters": {"type": "object"}, "risk": "execute", "needs_approval": true}"#,
        r#"{"service": "api"}"#,
    )
    .unwrap();
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["verdict"], "ask");
    assert_eq!(v["decided_by"], "ask-rule");
    assert_eq!(v["rule"], json!({"risk": ["network", "execute", "destructive", "undeclared"]}));
    assert_eq!(v["input"], json!({"service": "api"}));
    assert_eq!(v["advisory"], json!([]));
    assert_eq!(api::match_shell_command("npm test; rm -rf /", r#"{"allow": ["npm test"]}"#).unwrap(), "ask");
    assert_eq!(api::match_shell_command("git push --force", r#"{"deny": ["git push --force"]}"#).unwrap(), "deny");
    assert_eq!(api::match_shell_command("x", r#"{"allow": ["a ** b"]}"#).unwrap_err().code(), "invalid_shell_pattern");
    assert_eq!(api::match_shell_command("x", r#"{"permit": []}"#).unwrap_err().code(), "invalid_argument");
    let p: Value = serde_json::from_str(&api::compile_permission_preset("open").unwrap()).unwrap();
    assert_eq!(p, json!({"deny": [], "ask": []}));
    assert_eq!(api::compile_permission_preset("nope").unwrap_err().code(), "unknown_preset");
}

#[test]
fn a_multibyte_character_right_before_a_url_scheme_is_no_panic() {
    // Found by the `facade_call` fuzz target: the advisory host scan stepped one
    // byte past a non-URL character, landing inside a multi-byte one.
    let c = chain(json!({"deny": [{"domains": ["evil.example"]}]}));
    let shell = tool("shell", Some(Risk::Read), false);
    for command in ["curl ǽhttps://evil.example/x", "ǽ://evil.example", "€€://", "a\u{1F600}https://evil.example"]
    {
        let e = c.evaluate(&shell, &json!({"command": command}));
        assert_eq!(e.verdict, Verdict::Allow, "advisory only: {command}");
    }
    let e = c.evaluate(&shell, &json!({"command": "curl ǽhttps://evil.example/x"}));
    let adv = serde_json::to_value(&e.advisory).unwrap();
    assert_eq!(adv, json!([{"layer": "deny", "rule": {"domains": ["evil.example"]}, "host": "evil.example"}]));
    // The fuzzer's own input, through the facade.
    let crash = include_str!("fixtures/fuzz/facade_call-hosts-in-char-boundary.json");
    let params: serde_json::Value = serde_json::from_str(crash).unwrap();
    assert!(car_runtime::api::call("evaluate_permission", &params).is_ok());
}
