//! 100 policy-file rules of mixed kinds (tool lists, parameter substrings,
//! allowlists, ten regexes, a rate limit) checked against generated actions.
//! Target: under 2 µs median per action.

use std::hint::black_box;

use car_runtime::ir::Action;
use car_runtime::policy::{
    JsonlLedger, PermissionGate, PermissionTier, PolicyEngine, classify, evaluate_axes, parse_policy_text,
};
use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Map, Value, json};

fn rules() -> String {
    let mut t = String::new();
    // 40 denied tools, 10 keywords.
    let tools: Vec<String> = (0..40).map(|i| format!("\"denied_tool_{i}\"")).collect();
    t += &format!("deny_tool = [{}]\n", tools.join(", "));
    let kws: Vec<String> = (0..10).map(|i| format!("\"FORBIDDEN-{i}\"")).collect();
    t += &format!("deny_keyword = [{}]\n", kws.join(", "));
    // 20 parameter substrings, 9 exact values.
    for i in 0..20 {
        t += &format!("[[deny_tool_param]]\ntool = \"tool_{}\"\nparam = \"url\"\ncontains = \"169.254.{i}\"\n", i % 10);
    }
    for i in 0..9 {
        t += &format!("[[deny_tool_param]]\ntool = \"tool_{i}\"\nparam = \"mode\"\nequals = \"danger-{i}\"\n");
    }
    // 10 allowlists.
    for i in 0..10 {
        t += &format!(
            "[[allow_tool_param]]\ntool = \"deploy_{i}\"\nparam = \"target\"\nallow = [\"staging\", \"preview\"]\n"
        );
    }
    // 10 regexes.
    for i in 0..10 {
        t += &format!(
            "[[deny_tool_param_matching]]\ntool = \"tool_{i}\"\nparam = \"body\"\nmatches = \"sk-[A-Za-z0-9]{{20,}}|AKIA[0-9A-Z]{{16}}|x{i}y\"\n"
        );
    }
    // 1 rate limit (a short window so the bench does not fill it).
    t += "[[rate_limit_tool]]\ntool = \"tool_3\"\nmax_calls = 100000\ninterval_secs = 0.001\n";
    t
}

fn actions() -> Vec<Action> {
    let mut out = Vec::new();
    for i in 0..64 {
        let tool = match i % 4 {
            0 => format!("tool_{}", i % 10),
            1 => format!("deploy_{}", i % 10),
            2 => format!("other_tool_{i}"),
            _ => format!("denied_tool_{}", i % 50),
        };
        let mut a = Action::tool_call(tool);
        let mut p = Map::new();
        p.insert("url".into(), json!(format!("https://api.example.com/v1/items/{i}?page=2&sort=desc")));
        p.insert(
            "body".into(),
            json!(format!("{{\"name\": \"item {i}\", \"note\": \"a moderately long request body of ordinary text\"}}")),
        );
        p.insert("mode".into(), json!(if i % 7 == 0 { "danger-3" } else { "safe" }));
        p.insert("target".into(), json!(if i % 3 == 0 { "prod" } else { "staging" }));
        p.insert("count".into(), json!(i));
        a.parameters = p.into();
        out.push(a);
    }
    out
}

fn bench(c: &mut Criterion) {
    let set = parse_policy_text(&rules(), "bench.toml").expect("bench rules parse");
    assert_eq!(set.rule_count(), 100);
    let mut engine = PolicyEngine::new();
    engine.apply_policy_set(&set);
    let actions = actions();
    let state: Map<String, Value> = Map::new();
    let mut i = 0usize;
    c.bench_function("policy_check_100_rules_per_action", |b| {
        b.iter(|| {
            i = (i + 1) % actions.len();
            black_box(engine.check(black_box(&actions[i]), &state))
        })
    });
    let mut k = 0usize;
    c.bench_function("flatten_per_action", |b| {
        b.iter(|| {
            k = (k + 1) % actions.len();
            black_box(classify::flatten(black_box(&actions[k])))
        })
    });
    let flat: Vec<_> = actions.iter().map(classify::flatten).collect();
    c.bench_function("classify_flat_per_action", |b| {
        let rc = classify::RiskClassifier::default();
        b.iter(|| {
            k = (k + 1) % actions.len();
            black_box(rc.classify_flat(black_box(&flat[k])))
        })
    });
    c.bench_function("reversibility_flat_per_action", |b| {
        b.iter(|| {
            k = (k + 1) % actions.len();
            black_box(classify::classify_reversibility_flat(black_box(&flat[k])))
        })
    });
    let mut j = 0usize;
    c.bench_function("evaluate_axes_per_action", |b| {
        b.iter(|| {
            j = (j + 1) % actions.len();
            black_box(evaluate_axes(black_box(&actions[j])))
        })
    });
    // The daemon's tier check at `proposal.submit` for a one-action proposal,
    // with the approvals ledger path set but no ledger file yet.
    let dir = std::env::temp_dir().join(format!("car-bench-ledger-{}", std::process::id()));
    let gate = PermissionGate::new().with_ledger(Box::new(JsonlLedger::new(dir.join("approvals.jsonl"))));
    c.bench_function("admit_tier_per_one_action_proposal", |b| {
        b.iter(|| {
            j = (j + 1) % actions.len();
            black_box(gate.admit_tier(black_box(std::slice::from_ref(&actions[j])), PermissionTier::SandboxEdit))
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
