//! `car run` end to end: the example plans, every exit code, denials and
//! asks under `--no-input`, path escapes, malformed inputs, state files,
//! `--json`, and an interactive approval through a pseudo terminal.

use crate::cli_common;
use std::path::Path;

use cli_common::{car, examples, repo};
use serde_json::Value;

const WS: &str = "workspace";

fn run(ex: &Path, plan: &str, extra: &[&str]) -> cli_common::Run {
    let plan = format!("plans/{plan}.json");
    let mut args = vec!["run", plan.as_str(), "--root", WS];
    args.extend_from_slice(extra);
    car(ex, &args)
}

#[test]
fn release_notes_runs_and_writes_the_notes() {
    let ex = examples();
    let r = run(&ex, "release-notes", &["--no-input"]);
    assert_eq!(r.code, 0, "{}", r.all());
    // The plan shows the diff before anything runs, then progress and the summary.
    let plan_at = r.stdout.find("+# Dashboard 1.2.0").expect("diff preview");
    let run_at = r.stdout.find("Running:").unwrap();
    assert!(plan_at < run_at);
    assert!(r.stdout.contains("ok       write-notes (write_file)"), "{}", r.stdout);
    assert!(r.stdout.contains("Summary: 5 succeeded, 0 failed, 0 denied, 0 skipped"), "{}", r.stdout);
    assert!(r.stdout.contains("tool_calls         3"), "{}", r.stdout);
    let notes = std::fs::read_to_string(ex.join("workspace/RELEASE_NOTES.md")).unwrap();
    assert!(notes.starts_with("# Dashboard 1.2.0\n"));
    // A second run changes nothing and says so.
    let r = run(&ex, "release-notes", &["--no-input"]);
    assert_eq!(r.code, 0);
    assert!(r.stdout.contains("(no change)"), "{}", r.stdout);
}

#[test]
fn clean_build_denies_and_refuses_the_ask_under_no_input() {
    let ex = examples();
    let r = run(&ex, "clean-build", &["--no-input"]);
    assert_eq!(r.code, 1, "{}", r.all());
    assert!(r.stdout.contains("[deny ] wipe-build"), "{}", r.stdout);
    assert!(r.stdout.contains("[ask  ] remove-objects"), "{}", r.stdout);
    let denied = r.stdout.lines().find(|l| l.contains("DENIED   wipe-build")).expect("wipe-build denied");
    assert!(denied.contains("denied by deny-rule") && denied.contains(r#""argv":"rm -rf **""#), "{denied}");
    let refused = r.stdout.lines().find(|l| l.contains("DENIED   remove-objects")).expect("ask refused");
    assert!(
        refused.contains("was denied: refused by --no-input")
            && refused.contains(r#"ask-rule {"tool":"shell","argv":"rm **"}"#),
        "{refused}"
    );
    assert!(r.stdout.contains("Summary: 3 succeeded, 0 failed, 2 denied"), "{}", r.stdout);
    // Nothing denied ran.
    assert!(ex.join("workspace/build/obj/app.o").exists());
    assert!(ex.join("workspace/build/CLEANED").exists());
}

#[test]
fn clean_build_with_yes_runs_the_ask_but_never_the_deny() {
    let ex = examples();
    let r = run(&ex, "clean-build", &["--yes"]);
    assert_eq!(r.code, 1, "the deny still fails the run: {}", r.all());
    assert!(r.stdout.contains("remove-objects approved by --yes"), "{}", r.stdout);
    assert!(!ex.join("workspace/build/obj/app.o").exists());
    assert!(ex.join("workspace/build/cache.txt").exists(), "rm -rf build was denied");
}

#[test]
fn deploy_under_no_input_runs_nothing() {
    let ex = examples();
    let r = run(&ex, "deploy", &["--no-input"]);
    assert_eq!(r.code, 1, "{}", r.all());
    assert!(r.stdout.contains("compensation on abort: shell `sh scripts/rollback.sh 1.2.0`"), "{}", r.stdout);
    assert!(r.stdout.contains("DENIED   deploy"), "{}", r.stdout);
    assert!(r.stdout.contains("skipped  run-tests"), "{}", r.stdout);
    assert!(!ex.join("workspace/dist").exists());
}

#[test]
fn deploy_with_yes_ships_and_saves_the_state() {
    let ex = examples();
    std::fs::write(ex.join("state.json"), r#"{"deployed.version": "1.1.0", "team": "web"}"#).unwrap();
    let r = run(&ex, "deploy", &["--yes", "--state", "state.json"]);
    assert_eq!(r.code, 0, "{}", r.all());
    assert_eq!(std::fs::read_to_string(ex.join("workspace/deployed/current")).unwrap(), "dashboard version 1.2.0\n");
    let state: Value = serde_json::from_str(&std::fs::read_to_string(ex.join("state.json")).unwrap()).unwrap();
    assert_eq!(state, serde_json::json!({"deployed.version": "1.2.0", "team": "web"}));
}

#[test]
fn a_failed_smoke_test_compensates_the_deploy() {
    let ex = examples();
    std::fs::write(ex.join("workspace/scripts/smoke.sh"), "#!/bin/sh\necho unhealthy >&2\nexit 1\n").unwrap();
    std::fs::write(ex.join("state.json"), r#"{"deployed.version": "1.1.0"}"#).unwrap();
    let r = run(&ex, "deploy", &["--yes", "--state", "state.json"]);
    assert_eq!(r.code, 1, "{}", r.all());
    assert!(r.stdout.contains("FAILED   smoke-test"), "{}", r.stdout);
    assert!(r.stdout.contains("undone   deploy (shell): compensation ran"), "{}", r.stdout);
    assert!(r.stdout.lines().any(|l| l.contains("ok       deploy") && l.contains("(compensated)")), "{}", r.stdout);
    assert!(!ex.join("workspace/deployed/current").exists(), "rollback.sh removed it");
    let state: Value = serde_json::from_str(&std::fs::read_to_string(ex.join("state.json")).unwrap()).unwrap();
    assert_eq!(state["deployed.version"], "1.1.0", "the aborted run left the state as it was");
}

#[test]
fn inspect_config_is_denied_by_policy_and_json_has_the_result() {
    let ex = examples();
    let r = run(&ex, "inspect-config", &["--no-input", "--json"]);
    assert_eq!(r.code, 1, "{}", r.all());
    let result: Value = serde_json::from_str(&r.stdout).expect("stdout is the ProposalResult alone");
    let statuses: Vec<&str> =
        result["results"].as_array().unwrap().iter().map(|x| x["status"].as_str().unwrap()).collect();
    assert_eq!(statuses, ["succeeded", "rejected", "succeeded", "succeeded"]);
    assert!(result["results"][1]["error"].as_str().unwrap().contains("deny_tool_param_matching:read_file.path"));
    assert_eq!(result["results"][3]["output"]["result"], 8081.0);
    assert_eq!(result["cost"]["actions_rejected"], 1);
    // The plan and the summary went to stderr.
    assert!(r.stderr.contains("policy deny_tool_param_matching:read_file.path"), "{}", r.stderr);
    assert!(r.stderr.contains("Summary: 3 succeeded"), "{}", r.stderr);
}

#[test]
fn without_a_terminal_asks_are_denied_and_nothing_waits() {
    let ex = examples();
    let r = run(&ex, "clean-build", &[]);
    assert_eq!(r.code, 1);
    assert!(r.stdout.contains("stdin is not a terminal"), "{}", r.stdout);
    assert!(r.stdout.contains("no terminal to ask"), "{}", r.stdout);
    assert!(ex.join("workspace/build/obj/app.o").exists());
}

#[test]
fn presets_change_the_verdicts() {
    let ex = examples();
    // strict asks for writes: refused under --no-input.
    let r = run(&ex, "release-notes", &["--no-input", "--preset", "strict"]);
    assert_eq!(r.code, 1, "{}", r.all());
    assert!(r.stdout.contains("[ask  ] write-notes"), "{}", r.stdout);
    assert!(!ex.join("workspace/RELEASE_NOTES.md").exists());
    // open allows the rm that standard asks for; the deny rule still holds.
    let r = run(&ex, "clean-build", &["--no-input", "--preset", "open"]);
    assert!(r.stdout.contains("[ask  ] remove-objects"), "ask rules apply under every preset: {}", r.stdout);
    assert!(r.stdout.contains("[deny ] wipe-build"));
    let r = car(&ex, &["run", "plans/clean-build.json", "--preset", "lax"]);
    assert_eq!(r.code, 2, "{}", r.all());
}

#[test]
fn exit_codes() {
    let ex = examples();
    // 0: everything succeeded.
    assert_eq!(run(&ex, "release-notes", &["--no-input"]).code, 0);
    // 1: an action failed.
    std::fs::write(
        ex.join("plans/fails.json"),
        r#"{"actions":[{"id":"bad-math","type":"tool_call","tool":"calculate","parameters":{"expression":"1/"},"max_retries":0}]}"#,
    )
    .unwrap();
    let r = run(&ex, "fails", &["--no-input"]);
    assert_eq!(r.code, 1, "{}", r.all());
    assert!(r.stdout.contains("FAILED   bad-math"), "{}", r.stdout);
    // 2: a malformed plan, named by file and JSON path.
    std::fs::write(
        ex.join("plans/malformed.json"),
        r#"{"actions":[{"id":"x","type":"tool_call","tool":"read_file","failure_behavior":"redo"}]}"#,
    )
    .unwrap();
    let r = run(&ex, "malformed", &["--no-input"]);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr.contains("plans/malformed.json: actions[0].failure_behavior: unknown variant `redo`"),
        "{}",
        r.stderr
    );
    assert!(r.stdout.is_empty(), "nothing planned or run: {}", r.stdout);
    // 2: not JSON at all: the file and the line.
    std::fs::write(ex.join("plans/truncated.json"), "{\"actions\": [\n").unwrap();
    let r = run(&ex, "truncated", &[]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("plans/truncated.json: invalid json") && r.stderr.contains("line 2"), "{}", r.stderr);
    // 2: a missing plan, a missing root.
    let r = car(&ex, &["run", "plans/nope.json"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("plans/nope.json: cannot read"), "{}", r.stderr);
    let r = car(&ex, &["run", "plans/release-notes.json", "--root", "no-such-dir"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("--root") && r.stderr.contains("no-such-dir"), "{}", r.stderr);
    // 2: flags that contradict each other.
    assert_eq!(car(&ex, &["run", "plans/release-notes.json", "--yes", "--no-input"]).code, 2);
}

#[test]
fn path_escapes_are_refused_before_any_io() {
    let ex = examples();
    let outside = cli_common::tmp();
    std::os::unix::fs::symlink(&outside, ex.join("workspace/link")).unwrap();
    std::fs::write(
        ex.join("plans/escape.json"),
        r#"{"actions":[
            {"id":"dotdot","type":"tool_call","tool":"write_file","parameters":{"path":"../escaped.txt","content":"x"},"failure_behavior":"skip","max_retries":0},
            {"id":"via-link","type":"tool_call","tool":"write_file","parameters":{"path":"link/escaped.txt","content":"x"},"failure_behavior":"skip","max_retries":0},
            {"id":"read-up","type":"tool_call","tool":"read_file","parameters":{"path":"../plans/escape.json"},"failure_behavior":"skip","max_retries":0}
        ]}"#,
    )
    .unwrap();
    let r = run(&ex, "escape", &["--no-input"]);
    assert_eq!(r.code, 1, "{}", r.all());
    assert!(r.stdout.contains("cannot preview: path `../escaped.txt` climbs above the root; refused"), "{}", r.stdout);
    for id in ["dotdot", "via-link", "read-up"] {
        let line = r
            .stdout
            .lines()
            .find(|l| l.contains(id) && l.contains("skipped"))
            .unwrap_or_else(|| panic!("{id}: {}", r.stdout));
        assert!(line.contains("refused"), "{line}");
    }
    assert!(!ex.join("escaped.txt").exists());
    assert!(!outside.join("escaped.txt").exists());
}

#[test]
fn a_malformed_policy_file_is_named_with_its_key() {
    let ex = examples();
    std::fs::write(ex.join(".car/policies/zz-bad.toml"), "deny_tools = [\"shell\"]\n").unwrap();
    let r = run(&ex, "release-notes", &["--no-input"]);
    assert_eq!(r.code, 2, "{}", r.all());
    assert!(r.stderr.contains("zz-bad.toml") && r.stderr.contains("deny_tools"), "{}", r.stderr);
    assert!(!ex.join("workspace/RELEASE_NOTES.md").exists(), "nothing ran");
    let r = car(&ex, &["policy", "lint", ".car/policies"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("zz-bad.toml") && r.stderr.contains("deny_tools"), "{}", r.stderr);
    // A value of the wrong type inside a table: file and key path.
    std::fs::write(
        ex.join(".car/policies/zz-bad.toml"),
        "[[rate_limit_tool]]\ntool = \"shell\"\nmax_calls = \"ten\"\ninterval_secs = 1\n",
    )
    .unwrap();
    let r = run(&ex, "release-notes", &["--no-input"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("zz-bad.toml") && r.stderr.contains("max_calls"), "{}", r.stderr);
}

#[test]
fn a_malformed_permissions_file_is_named_with_its_line() {
    let ex = examples();
    std::fs::write(ex.join(".car/permissions.toml"), "[shell]\nallow = [\"ls\"]\nalow = [\"rm\"]\n").unwrap();
    let r = run(&ex, "release-notes", &["--no-input"]);
    assert_eq!(r.code, 2, "{}", r.all());
    assert!(
        r.stderr.contains("permissions.toml") && r.stderr.contains("line 3") && r.stderr.contains("alow"),
        "{}",
        r.stderr
    );
    std::fs::write(ex.join(".car/permissions.toml"), "[shell]\ndeny = [\"rm && ls\"]\n").unwrap();
    let r = run(&ex, "release-notes", &["--no-input"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("permissions.toml") && r.stderr.contains("rm && ls"), "{}", r.stderr);
}

#[test]
fn a_malformed_state_file_is_named() {
    let ex = examples();
    std::fs::write(ex.join("state.json"), "[1, 2]").unwrap();
    let r = run(&ex, "release-notes", &["--no-input", "--state", "state.json"]);
    assert_eq!(r.code, 2, "{}", r.all());
    assert!(r.stderr.contains("state.json"), "{}", r.stderr);
    // A state file that does not exist yet is created.
    std::fs::remove_file(ex.join("state.json")).unwrap();
    let r = run(&ex, "release-notes", &["--no-input", "--state", "state.json"]);
    assert_eq!(r.code, 0, "{}", r.all());
    let state: Value = serde_json::from_str(&std::fs::read_to_string(ex.join("state.json")).unwrap()).unwrap();
    assert_eq!(state["release.version"], "1.2.0");
}

/// Drives `car run` through a pseudo terminal with util-linux `script`
/// (present on every Linux this runs on; no pty crate or unsafe code needed):
/// the prompt appears, `a` approves `shell` for the rest of the run, so the
/// second ask is approved without a prompt.
#[test]
fn interactive_approval_through_a_pseudo_terminal() {
    if std::process::Command::new("script").arg("--version").output().is_err() {
        panic!("util-linux `script` is required for the pseudo-terminal test");
    }
    let ex = examples();
    std::fs::write(
        ex.join("plans/two-asks.json"),
        r#"{"actions":[
            {"id":"rm-app","type":"tool_call","tool":"shell","parameters":{"command":"rm -f build/obj/app.o"},"max_retries":0},
            {"id":"rm-util","type":"tool_call","tool":"shell","dependencies":["rm-app"],"parameters":{"command":"rm -f build/obj/util.o"},"max_retries":0}
        ]}"#,
    )
    .unwrap();
    let drive = |answer: &str| {
        let cmd = format!("{} run plans/two-asks.json --root workspace", env!("CARGO_BIN_EXE_car"));
        let mut child = std::process::Command::new("script")
            .args(["-qec", &cmd, "/dev/null"])
            .current_dir(&ex)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        {
            use std::io::Write;
            let mut stdin = child.stdin.take().unwrap();
            std::thread::sleep(std::time::Duration::from_millis(500));
            stdin.write_all(answer.as_bytes()).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(500));
        }
        let o = child.wait_with_output().unwrap();
        (o.status.code().unwrap_or(-1), String::from_utf8_lossy(&o.stdout).into_owned())
    };

    let (code, out) = drive("n\n");
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("Approve rm-app"), "{out}");
    assert!(out.contains("denied by the user"), "{out}");
    assert!(ex.join("workspace/build/obj/app.o").exists());

    // An answer that is none of y/n/a decides nothing: asked again.
    let (code, out) = drive("maybe\ny\ny\n");
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("`maybe` is not an answer; type y, n or a"), "{out}");
    assert!(out.contains("Approve rm-util"), "the next ask is its own prompt: {out}");
    assert!(!ex.join("workspace/build/obj/app.o").exists(), "approved after the re-ask: {out}");

    let (code, out) = drive("a\n");
    assert_eq!(code, 0, "{out}");
    assert!(out.contains("Approve rm-app"), "{out}");
    assert!(!out.contains("Approve rm-util"), "approved for the session: {out}");
    assert!(out.contains("rm-util approved: `shell` was approved for this run"), "{out}");
    assert!(!ex.join("workspace/build/obj/app.o").exists());
    assert!(!ex.join("workspace/build/obj/util.o").exists());
}

#[test]
fn the_readme_quick_start_command_is_the_one_tested() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    assert!(
        readme.contains(
            "cargo run --release --bin car -- run examples/plans/release-notes.json --root examples/workspace --no-input"
        ),
        "README quick start names the release-notes command"
    );
}

#[test]
fn admission_rejections_are_reported_with_the_verification() {
    let ex = examples();
    std::fs::write(
        ex.join("plans/invalid.json"),
        r#"{"actions":[
            {"id":"no-content","type":"tool_call","tool":"write_file","parameters":{"path":"x.txt"},"failure_behavior":"skip","max_retries":0},
            {"id":"unknown","type":"tool_call","tool":"launch_rocket","parameters":{},"failure_behavior":"skip"},
            {"id":"fine","type":"tool_call","tool":"calculate","parameters":{"expression":"6*7"}}
        ]}"#,
    )
    .unwrap();
    let r = run(&ex, "invalid", &["--no-input"]);
    assert_eq!(r.code, 1, "{}", r.all());
    let verification = r.stdout.find("Verification:").expect("verification findings in the plan");
    assert!(verification < r.stdout.find("Running:").unwrap());
    assert!(
        r.stdout.contains("error   no-content: tool 'write_file': missing required parameter 'content'"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.lines().any(|l| l.starts_with("  REJECTED no-content") && l.contains("content")), "{}", r.stdout);
    assert!(
        r.stdout.lines().any(|l| l.starts_with("  REJECTED unknown") && l.contains("launch_rocket")),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("ok       fine"), "{}", r.stdout);
    assert!(r.stdout.contains("Summary: 1 succeeded, 0 failed, 0 denied, 2 rejected, 0 skipped"), "{}", r.stdout);
    assert!(!ex.join("workspace/x.txt").exists());
}

/// `car plan` (= `car run --dry-run`): the plan and its verdicts, nothing
/// asked or run; exit 1 when some action would be denied; `--format json`
/// prints the plan itself.
#[test]
fn plan_shows_the_verdicts_and_runs_nothing() {
    let ex = examples();
    for args in [
        vec!["plan", "plans/clean-build.json", "--root", WS],
        vec!["run", "plans/clean-build.json", "--root", WS, "--dry-run", "--yes"],
    ] {
        let r = car(&ex, &args);
        assert_eq!(r.code, 1, "a deny: {}", r.all());
        assert!(r.stdout.contains("[deny ] wipe-build"), "{}", r.stdout);
        assert!(r.stdout.contains("Dry run: nothing was asked or run (3 allow, 1 ask, 1 deny)"), "{}", r.stdout);
        assert!(!r.stdout.contains("Running:") && !r.stdout.contains("Approve"), "{}", r.stdout);
        assert!(ex.join("workspace/build/obj/app.o").exists(), "nothing ran");
    }
    let r = car(&ex, &["plan", "plans/release-notes.json", "--root", WS, "--format", "json"]);
    assert_eq!(r.code, 0, "{}", r.all());
    let v: Value = serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {}", r.stdout));
    assert!(v["plan_id"].is_string() && v["items"].is_array(), "{v}");
    assert!(!ex.join("workspace/RELEASE_NOTES.md").exists(), "nothing written");
}

/// Issue #25: `car run` refuses a plan with a repeated key inside
/// `parameters` (it used to run the last value), as the daemon refuses the
/// frame, naming the key; nothing runs.
#[test]
fn a_plan_with_a_repeated_parameter_key_is_refused_and_nothing_runs() {
    let ex = examples();
    let plan = r#"{"id":"p","actions":[{"id":"w","type":"tool_call","tool":"write_file",
        "parameters":{"path":"out/dup.txt","content":"a","path":"out/other.txt"}}]}"#;
    std::fs::write(ex.join("dup.json"), plan).unwrap();
    let r = car(&ex, &["run", "dup.json", "--root", "workspace", "--yes"]);
    assert_eq!(r.code, 2, "{}", r.all());
    assert!(r.stderr.contains("duplicate key `path`"), "{}", r.all());
    assert!(!ex.join("workspace/out/dup.txt").exists() && !ex.join("workspace/out/other.txt").exists());
    let r = car(&ex, &["verify", "dup.json"]);
    assert_ne!(r.code, 0, "{}", r.all());
    assert!(r.all().contains("duplicate key `path`"), "{}", r.all());
    let _ = std::fs::remove_dir_all(&ex);
}

#[test]
fn suspend_then_resume_ships_once_the_approval_is_answered() {
    let ex = examples();
    let home = ex.join("home");
    std::fs::create_dir_all(&home).unwrap();
    let home_s = home.to_str().unwrap();
    // Every run of the tests script is counted.
    std::fs::write(ex.join("workspace/scripts/test.sh"), "#!/bin/sh\necho ran >> tests.log\n").unwrap();
    let env = [("CAR_HOME", home_s)];
    let r = cli_common::car_env(&ex, &["run", "plans/deploy.json", "--root", WS, "--suspend"], &env);
    assert_eq!(r.code, 3, "{}", r.all());
    assert!(r.stdout.contains("Summary: 2 succeeded, 0 failed, 0 denied, 0 skipped, 3 waiting"), "{}", r.stdout);
    assert!(!ex.join("workspace/deployed/current").exists(), "nothing shipped while suspended");
    let id = r.stdout.lines().find_map(|l| l.strip_prefix("Suspended: ")).expect("the suspension id").to_string();
    let key = r
        .stdout
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("deploy waits for approval ")
                .and_then(|l| l.split(':').take(2).collect::<Vec<_>>().join(":").into())
        })
        .expect("the approval key");
    // Resumed before anyone answered: suspended again, nothing shipped.
    let again = cli_common::car_env(&ex, &["run", "--resume", &id, "--root", WS], &env);
    assert_eq!(again.code, 3, "{}", again.all());
    let ok = cli_common::car_env(&ex, &["approvals", "resolve", "--dir", home_s, &key, "allow"], &[]);
    assert_eq!(ok.code, 0, "{}", ok.all());
    let done = cli_common::car_env(&ex, &["run", "--resume", &id, "--root", WS, "--json"], &env);
    assert_eq!(done.code, 0, "{}", done.all());
    let v: Value = serde_json::from_str(&done.stdout).unwrap();
    assert!(v.get("status").is_none(), "{v}");
    assert_eq!(std::fs::read_to_string(ex.join("workspace/deployed/current")).unwrap(), "dashboard version 1.2.0\n");
    assert_eq!(std::fs::read_to_string(ex.join("workspace/tests.log")).unwrap(), "ran\n", "the tests ran once");
    // Gone once resumed to its end; a plan and --resume together are refused.
    let gone = cli_common::car_env(&ex, &["run", "--resume", &id, "--root", WS], &env);
    assert_eq!(gone.code, 2, "{}", gone.all());
    assert!(gone.stderr.contains(&id), "{}", gone.stderr);
    let both = cli_common::car_env(&ex, &["run", "plans/deploy.json", "--resume", &id], &env);
    assert_eq!(both.code, 2, "{}", both.all());
}

#[test]
fn a_run_leaves_no_placeholder_of_the_runtimes_files_in_the_root() {
    // A sandboxed shell run mounts the runtime's own file names read-only
    // over empty placeholders; the process removes them before it exits.
    let ex = examples();
    let r = run(&ex, "deploy", &["--yes"]);
    assert_eq!(r.code, 0, "{}", r.all());
    for name in ["approvals.jsonl", "tier-approvals.jsonl", "events.jsonl", ".car"] {
        assert!(!ex.join(WS).join(name).exists(), "{name} was left in the root");
    }
}
