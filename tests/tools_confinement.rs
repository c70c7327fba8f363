//! The built-in file tools stay inside their root under attack: a symlink
//! flipped under them while they run, a symlink on any component, a hard
//! link to an outside file, and writes to the runtime's own configuration,
//! policies and approvals (protected paths).
#![cfg(unix)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use car_runtime::tools::{Root, execute, preview, protected_path};
use serde_json::{Map, Value, json};

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("car-confine-{name}-{}", uuid::Uuid::new_v4()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn p(v: Value) -> Map<String, Value> {
    v.as_object().cloned().unwrap_or_default()
}

fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let path = e.unwrap().path();
            if path.symlink_metadata().unwrap().is_dir() {
                stack.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out
}

/// Flips `root/flip` between a real directory and a symlink to `outside`
/// until `stop` is set, counting flips in `count`.
fn flipper(
    root: PathBuf,
    outside: PathBuf,
    stop: Arc<AtomicBool>,
    count: Arc<AtomicUsize>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let flip = root.join("flip");
        while !stop.load(Ordering::Relaxed) {
            let _ = std::fs::remove_dir_all(&flip);
            let _ = std::fs::create_dir(&flip);
            std::thread::yield_now();
            let _ = std::fs::remove_dir_all(&flip);
            let _ = std::fs::remove_file(&flip);
            let _ = std::os::unix::fs::symlink(&outside, &flip);
            std::thread::yield_now();
            let _ = std::fs::remove_file(&flip);
            count.fetch_add(2, Ordering::Relaxed);
        }
    })
}

#[test]
fn a_racing_symlink_flipper_never_gets_a_write_or_a_read_outside_the_root() {
    let base = tmp("race");
    let (root_dir, outside) = (base.join("root"), base.join("outside"));
    std::fs::create_dir_all(&root_dir).unwrap();
    std::fs::create_dir_all(outside.join("deep")).unwrap();
    std::fs::write(outside.join("secret.txt"), "SECRET\n").unwrap();
    std::fs::write(outside.join("deep/secret.txt"), "SECRET\n").unwrap();
    let before = files_under(&outside).len();
    let root = Root::new(&root_dir).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicUsize::new(0));
    let flipper = flipper(root_dir.clone(), outside.clone(), stop.clone(), count.clone());

    // At least WRITES attempts, and on until the flipper has flipped MIN_FLIPS
    // times while they ran (a busy 2-core machine schedules it rarely), with
    // a bound so a flipper that never runs fails the test instead of hanging.
    const WRITES: usize = 3_000;
    const MIN_FLIPS: usize = 200;
    const MAX_WRITES: usize = 300_000;
    let (mut written, mut refused, mut leaked_reads) = (0, 0, 0);
    let mut i = 0;
    while i < WRITES || (count.load(Ordering::Relaxed) < MIN_FLIPS && i < MAX_WRITES) {
        i += 1;
        // Alternate a direct child, a nested path whose parents write_file
        // creates, and an edit of a file that may or may not be there.
        let path = match i % 3 {
            0 => format!("flip/w{i}.txt"),
            1 => format!("flip/deep/w{i}.txt"),
            _ => "flip/secret.txt".to_string(),
        };
        let r = if i % 3 == 2 {
            execute(&root, "edit_file", &p(json!({"path": path, "old_text": "SECRET", "new_text": "PWNED"})))
        } else {
            execute(&root, "write_file", &p(json!({"path": path, "content": "x"})))
        };
        if r.is_ok() {
            written += 1
        } else {
            refused += 1
        }
        for (tool, params) in [
            ("read_file", json!({"path": "flip/secret.txt"})),
            ("read_file", json!({"path": "flip/deep/secret.txt"})),
            ("grep_files", json!({"pattern": "SECRET", "path": "flip"})),
            ("grep_files", json!({"pattern": "SECRET"})),
            ("find_files", json!({"pattern": "secret.txt", "path": "flip"})),
            ("list_dir", json!({"path": "flip"})),
        ] {
            if i % 10 != 0 && tool != "read_file" {
                continue;
            }
            if let Ok(v) = execute(&root, tool, &p(params)) {
                let text = v.to_string();
                if text.contains("SECRET") || text.contains("secret.txt") {
                    leaked_reads += 1;
                }
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    flipper.join().unwrap();
    let flips = count.load(Ordering::Relaxed);
    let after = files_under(&outside);
    eprintln!(
        "race: {i} writes/edits, {written} done inside the root, {refused} refused, {flips} flips, \
         {} files outside (was {before}), {leaked_reads} leaked reads",
        after.len()
    );
    assert!(flips >= MIN_FLIPS, "the flipper ran ({flips} flips)");
    assert_eq!(after.len(), before, "nothing lands outside the root: {after:?}");
    assert_eq!(std::fs::read_to_string(outside.join("secret.txt")).unwrap(), "SECRET\n", "no edit outside");
    assert_eq!(leaked_reads, 0, "no read returned an outside file");
    std::fs::remove_dir_all(&base).unwrap();
}

#[test]
fn a_symlink_on_any_component_is_refused_by_every_file_tool() {
    let base = tmp("links");
    let (root_dir, outside) = (base.join("root"), base.join("outside"));
    std::fs::create_dir_all(root_dir.join("sub")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("secret.txt"), "SECRET\n").unwrap();
    std::fs::write(root_dir.join("sub/inside.txt"), "inside SECRET\n").unwrap();
    std::os::unix::fs::symlink(&outside, root_dir.join("out")).unwrap();
    std::os::unix::fs::symlink(outside.join("secret.txt"), root_dir.join("file-link")).unwrap();
    std::os::unix::fs::symlink(outside.join("missing.txt"), root_dir.join("dangling")).unwrap();
    std::os::unix::fs::symlink(root_dir.join("sub"), root_dir.join("in")).unwrap();
    let root = Root::new(&root_dir).unwrap();
    let calls = [
        ("read_file", json!({"path": "out/secret.txt"})),
        ("read_file", json!({"path": "file-link"})),
        ("read_file", json!({"path": "in/inside.txt"})),
        ("list_dir", json!({"path": "out"})),
        ("list_dir", json!({"path": "in"})),
        ("find_files", json!({"pattern": "*", "path": "out"})),
        ("grep_files", json!({"pattern": "SECRET", "path": "out"})),
        ("grep_files", json!({"pattern": "SECRET", "path": "file-link"})),
        ("edit_file", json!({"path": "out/secret.txt", "old_text": "SECRET", "new_text": "x"})),
        ("edit_file", json!({"path": "file-link", "old_text": "SECRET", "new_text": "x"})),
        ("write_file", json!({"path": "out/new.txt", "content": "x"})),
        ("write_file", json!({"path": "out/a/b/new.txt", "content": "x"})),
        ("write_file", json!({"path": "file-link", "content": "x"})),
        ("write_file", json!({"path": "dangling", "content": "x"})),
        ("write_file", json!({"path": "in/new.txt", "content": "x"})),
    ];
    for (tool, params) in calls {
        let e = execute(&root, tool, &p(params.clone())).err().unwrap_or_else(|| panic!("{tool} {params} ran"));
        assert!(e.message.contains("symlink") && e.message.contains("refused"), "{tool} {params}: {e}");
    }
    assert_eq!(std::fs::read_to_string(outside.join("secret.txt")).unwrap(), "SECRET\n");
    assert_eq!(files_under(&outside).len(), 1);
    // A tree walk skips symlinks rather than following them.
    let r = execute(&root, "grep_files", &p(json!({"pattern": "SECRET"}))).unwrap();
    assert_eq!(r["matches"], json!([{"path": "sub/inside.txt", "line": 1, "text": "inside SECRET"}]));
    std::fs::remove_dir_all(&base).unwrap();
}

#[test]
fn a_hard_link_to_an_outside_file_is_never_written_through() {
    let base = tmp("hardlink");
    let (root_dir, outside) = (base.join("root"), base.join("outside"));
    std::fs::create_dir_all(&root_dir).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("target.txt"), "original\n").unwrap();
    std::fs::hard_link(outside.join("target.txt"), root_dir.join("linked.txt")).unwrap();
    let root = Root::new(&root_dir).unwrap();
    let e = execute(&root, "write_file", &p(json!({"path": "linked.txt", "content": "overwritten"}))).unwrap_err();
    assert!(e.message.contains("hard link") && e.message.contains("linked.txt"), "{e}");
    let e = execute(&root, "edit_file", &p(json!({"path": "linked.txt", "old_text": "original", "new_text": "x"})))
        .unwrap_err();
    assert!(e.message.contains("hard link"), "{e}");
    assert_eq!(std::fs::read_to_string(outside.join("target.txt")).unwrap(), "original\n");
    // Reading a hard-linked file is fine; a file with one link is written.
    assert!(execute(&root, "read_file", &p(json!({"path": "linked.txt"}))).is_ok());
    std::fs::write(root_dir.join("plain.txt"), "a").unwrap();
    execute(&root, "write_file", &p(json!({"path": "plain.txt", "content": "b"}))).unwrap();
    assert_eq!(std::fs::read_to_string(root_dir.join("plain.txt")).unwrap(), "b");
    std::fs::remove_dir_all(&base).unwrap();
}

#[test]
fn writes_to_the_runtimes_configuration_policies_and_approvals_are_refused() {
    let root_dir = tmp("protected");
    std::fs::create_dir_all(root_dir.join(".car/policies")).unwrap();
    std::fs::create_dir_all(root_dir.join("state")).unwrap();
    std::fs::write(root_dir.join(".car/permissions.toml"), "[shell]\nallow = []\n").unwrap();
    std::fs::write(root_dir.join(".car/policies/safety.toml"), "# rules\n").unwrap();
    std::fs::write(root_dir.join("state/approvals.jsonl"), "").unwrap();
    std::fs::hard_link(root_dir.join(".car/permissions.toml"), root_dir.join("perm-alias.toml")).unwrap();
    std::os::unix::fs::symlink(root_dir.join(".car"), root_dir.join("cfg")).unwrap();
    let root = Root::new(&root_dir).unwrap();
    let abs = root.path().join(".car/permissions.toml");
    for path in [
        ".car/permissions.toml",
        "./.car/permissions.toml",
        "sub/../.car/permissions.toml",
        ".CAR/permissions.toml",
        ".car/policies/safety.toml",
        ".car/policies/new.toml",
        ".car",
        "state/approvals.jsonl",
        "state/APPROVALS.jsonl",
        "other/deep/approvals.jsonl",
        "approvals.jsonl",
        abs.to_str().unwrap(),
    ] {
        let e = execute(&root, "write_file", &p(json!({"path": path, "content": "allow = [\"**\"]"}))).unwrap_err();
        assert!(e.message.contains("protected") && e.message.contains(path), "{path}: {e}");
        assert!(preview(&root, "write_file", &p(json!({"path": path, "content": "x"}))).is_err(), "{path}");
    }
    let e = execute(
        &root,
        "edit_file",
        &p(json!({"path": ".car/permissions.toml", "old_text": "allow = []", "new_text": "allow = [\"**\"]"})),
    )
    .unwrap_err();
    assert!(e.message.contains("protected"), "{e}");
    // A symlink into `.car` and a hard link to a file in it are refused too.
    assert!(execute(&root, "write_file", &p(json!({"path": "cfg/permissions.toml", "content": "x"}))).is_err());
    assert!(execute(&root, "write_file", &p(json!({"path": "perm-alias.toml", "content": "x"}))).is_err());
    assert_eq!(std::fs::read_to_string(root_dir.join(".car/permissions.toml")).unwrap(), "[shell]\nallow = []\n");
    assert_eq!(std::fs::read_to_string(root_dir.join("state/approvals.jsonl")).unwrap(), "");
    assert!(!root_dir.join(".car/policies/new.toml").exists());
    // Reading them is fine; ordinary files still write.
    assert!(execute(&root, "read_file", &p(json!({"path": ".car/permissions.toml"}))).is_ok());
    execute(&root, "write_file", &p(json!({"path": "notes/car.txt", "content": "x"}))).unwrap();
    execute(&root, "write_file", &p(json!({"path": "my.car/approvals.json", "content": "x"}))).unwrap();

    // The operator, not a proposal, can open them up.
    let open = Root::new(&root_dir).unwrap().allow_protected_writes(true);
    assert!(open.protected_writes_allowed() && !root.protected_writes_allowed());
    execute(&open, "write_file", &p(json!({"path": ".car/policies/new.toml", "content": "# ok\n"}))).unwrap();
    assert!(root_dir.join(".car/policies/new.toml").exists());
    let e = execute(
        &root,
        "write_file",
        &p(json!({"path": ".car/x", "content": "x", "allow_protected_writes": true, "allow_protected": true})),
    )
    .unwrap_err();
    assert!(e.message.contains("protected"), "parameters cannot switch it on: {e}");
    std::fs::remove_dir_all(&root_dir).unwrap();
}

#[test]
fn protected_path_is_a_pure_function_of_root_and_path() {
    let root = Path::new("/work/proj");
    for yes in [
        ".car",
        ".car/permissions.toml",
        "./.car/policies/x.toml",
        "a/../.car/x",
        ".Car/permissions.toml",
        "logs/approvals.jsonl",
        "Approvals.JSONL",
        "/work/proj/.car/permissions.toml",
        "/work/proj/sub/../.car",
        "../proj/.car/permissions.toml",
        "nested/.car/permissions.toml",
    ] {
        assert!(protected_path(root, Path::new(yes)), "{yes}");
    }
    for no in [
        "src/main.rs",
        ".cargo/config.toml",
        "car/permissions.toml",
        ".car.bak",
        "approvals.json",
        "approvals.jsonl.d/x",
        ".",
        "/etc/passwd",
        "/work/other/.car/permissions.toml",
        "../other/.car/x",
    ] {
        assert!(!protected_path(root, Path::new(no)), "{no}");
    }
    // A root that itself lies inside a `.car` directory is protected whole.
    assert!(protected_path(Path::new("/work/proj/.car"), Path::new("permissions.toml")));
}
