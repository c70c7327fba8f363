//! The two axes: authority ([`PermissionTier`], who may authorize an action)
//! and reversibility (can it be undone), computed independently from one
//! flattened view of the action.
//!
//! Both classifiers are keyword heuristics that match **at boundaries**, not
//! as substrings:
//! - tool-name segments, split at `_`, `-`, `.`, `/`, `:` and camelCase
//!   (`sendEmail` → `send`, `email`);
//! - command keys (`command`, `cmd`, `args`, `argv`, `flags`), whose values
//!   are read as shell words and matched at command position;
//! - parameter key names (`api_key`, `auth.token`);
//! - target paths (`~/.ssh/id_rsa`, `.aws/credentials`, `*.pem`);
//! - a short list of always-dangerous phrases matched as whole words in any
//!   string (`drop table`, `delete from`, `rm -rf`, `git reset`).
//!
//! So a URL does not match `http`, `format_date` does not match `format` and
//! "release notes" does not match `release`. Unknown tools are irreversible.
//!
//! Known misses, pinned by tests and all erring toward over-asking:
//! `list_deployments` is compensable (the object `deploy` wins over the verb
//! `list`), `get_payment` is irreversible (money is matched by its object),
//! a `git push` is compensable unconditionally (the honest hedge is "if nobody
//! has pulled yet"), and `read_secret` is reversible — this axis is about
//! effects, and reading has none; an exfiltrating read is maximally dangerous
//! and maximally reversible at once, which is why it is `full_access`.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::ir::{Action, ActionType, Reversibility};

/// Who may authorize an action: `read_only < sandbox_edit < full_access`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PermissionTier {
    /// Reads nothing but state; changes nothing.
    ReadOnly,
    /// Local work inside the sandbox.
    #[default]
    SandboxEdit,
    /// Externally consequential; always needs a human approval.
    FullAccess,
}

impl PermissionTier {
    /// The wire spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            PermissionTier::ReadOnly => "read_only",
            PermissionTier::SandboxEdit => "sandbox_edit",
            PermissionTier::FullAccess => "full_access",
        }
    }

    /// Parses a wire spelling.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "read_only" => Some(PermissionTier::ReadOnly),
            "sandbox_edit" => Some(PermissionTier::SandboxEdit),
            "full_access" => Some(PermissionTier::FullAccess),
            _ => None,
        }
    }
}

impl std::fmt::Display for PermissionTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for PermissionTier {
    type Err = crate::Error;
    fn from_str(s: &str) -> crate::Result<Self> {
        PermissionTier::parse(s).ok_or_else(|| {
            crate::Error::invalid_argument(
                "tier",
                format!("unknown permission tier `{s}`; expected `read_only`, `sandbox_edit` or `full_access`"),
            )
        })
    }
}

/// Keys whose values are read as shell words.
pub const COMMAND_KEYS: &[&str] = &["command", "cmd", "args", "argv", "flags"];

/// Executables that make a command `full_access` when found at command
/// position in a command key.
pub const FULL_ACCESS_COMMAND_KEYWORDS: &[&str] = &[
    "rm",
    "sudo",
    "su",
    "doas",
    "curl",
    "wget",
    "ssh",
    "scp",
    "sftp",
    "rsync",
    "nc",
    "ncat",
    "netcat",
    "telnet",
    "ftp",
    "format",
    "mkfs",
    "fdisk",
    "parted",
    "dd",
    "shred",
    "chmod",
    "chown",
    "chgrp",
    "shutdown",
    "reboot",
    "halt",
    "poweroff",
    "kill",
    "killall",
    "pkill",
    "crontab",
    "iptables",
    "kubectl",
    "terraform",
    "helm",
];

/// Two-word commands (`git push`) that make a command `full_access`.
pub const FULL_ACCESS_SUBCOMMANDS: &[(&str, &str)] = &[
    ("git", "push"),
    ("git", "reset"),
    ("git", "clean"),
    ("npm", "publish"),
    ("cargo", "publish"),
    ("docker", "rm"),
    ("docker", "push"),
    ("gh", "release"),
    ("pip", "upload"),
    ("twine", "upload"),
];

/// Phrases that are dangerous wherever they appear (matched as whole words).
pub const DANGEROUS_PHRASES: &[&str] = &[
    "drop table",
    "drop database",
    "drop schema",
    "delete from",
    "truncate table",
    "rm -rf",
    "rm -fr",
    "git reset",
    "git push --force",
];

/// Tool-name segments that make a tool `full_access`.
pub const FULL_ACCESS_TOOL_SEGMENTS: &[&str] = &[
    "deploy",
    "release",
    "publish",
    "send",
    "sms",
    "payment",
    "payments",
    "pay",
    "charge",
    "refund",
    "payout",
    "secret",
    "secrets",
    "password",
    "credential",
    "credentials",
    "delete",
    "remove",
    "rm",
    "rmdir",
    "unlink",
    "clean",
    "drop",
    "truncate",
    "destroy",
    "wipe",
    "push",
    "upload",
    "download",
    "reset",
    "kubectl",
    "terraform",
    "helm",
    "sudo",
    "chmod",
    "chown",
    "transfer",
    "wire",
];

/// Parameter key names that carry a credential (compared in snake_case).
pub const SENSITIVE_KEYS: &[&str] = &[
    "api_key",
    "apikey",
    "api_token",
    "api_secret",
    "access_token",
    "auth_token",
    "bearer_token",
    "token",
    "refresh_token",
    "id_token",
    "secret",
    "client_secret",
    "secret_key",
    "secret_access_key",
    "access_key",
    "access_key_id",
    "private_key",
    "password",
    "passwd",
    "passphrase",
    "credentials",
    "credential",
    "authorization",
    "auth.token",
    "auth.password",
    "auth.key",
];

/// Path fragments naming secrets on disk.
pub const SENSITIVE_PATH_FRAGMENTS: &[&str] = &[
    "/.ssh/",
    ".aws/credentials",
    ".aws/config",
    "/.gnupg/",
    ".kube/config",
    "/etc/shadow",
    "/etc/sudoers",
    "/.netrc",
    "/.docker/config.json",
    "/.config/gcloud/",
];

/// File-name suffixes naming secrets on disk.
pub const SENSITIVE_PATH_SUFFIXES: &[&str] = &[
    ".pem",
    ".key",
    ".p12",
    ".pfx",
    "id_rsa",
    "id_dsa",
    "id_ecdsa",
    "id_ed25519",
    "/.env",
    "/.ssh",
    "/.aws",
    "/.gnupg",
    "/.netrc",
    "/.pgpass",
    "/etc/passwd",
];

/// Tool-name segments meaning the effect cannot be undone.
pub const IRREVERSIBLE_SEGMENTS: &[&str] = &[
    "delete", "remove", "rm", "rmdir", "unlink", "clean", "drop", "destroy", "purge", "wipe", "truncate", "erase",
    "shred", "kill", "send", "sms", "notify", "payment", "pay", "charge", "refund", "transfer", "payout", "invoice",
    "publish", "release", "format", "shutdown", "reboot", "download", "post", "tweet",
];

/// Tool-name segments meaning the effect is undone by a compensating action.
pub const COMPENSABLE_SEGMENTS: &[&str] = &[
    "deploy",
    "push",
    "commit",
    "clone",
    "create",
    "insert",
    "update",
    "upsert",
    "put",
    "install",
    "upload",
    "add",
    "tag",
    "provision",
    "scale",
    "start",
    "stop",
    "restart",
    "enable",
    "disable",
    "assign",
    "grant",
    "invite",
    "subscribe",
    "schedule",
    "patch",
];

/// Tool-name segments meaning the tool has no effect to undo.
pub const REVERSIBLE_SEGMENTS: &[&str] = &[
    "read", "get", "list", "ls", "find", "grep", "search", "query", "select", "fetch", "status", "show", "view",
    "describe", "inspect", "lookup", "head", "tail", "cat", "check", "count", "diff", "stat", "peek", "browse",
    "preview", "explain", "validate", "scan",
];

/// Phrases in any string that make an effect irreversible.
pub const IRREVERSIBLE_PHRASES: &[&str] = &[
    "drop table",
    "drop database",
    "drop schema",
    "delete from",
    "truncate table",
    "rm -rf",
    "rm -fr",
    "git reset --hard",
    "git clean",
];

/// Phrases in any string that make an effect compensable.
pub const COMPENSABLE_PHRASES: &[&str] =
    &["insert into", "git push", "docker push", "git commit", "git merge", "git tag", "create table", "alter table"];

/// Inflections a tool-name segment may carry beyond its keyword stem for the
/// reversibility axis (`deployments` → `deploy`).
const INFLECTIONS: &[&str] = &["", "s", "es", "ed", "d", "ing", "ment", "ments", "ion", "ions"];

/// One flattened view of an action, built once and read by both classifiers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Flattened {
    /// The action type.
    pub action_type: Option<ActionType>,
    /// Lowercased tool-name segments.
    pub tool_segments: Vec<String>,
    /// Lowercased dotted key paths of every nested parameter, in snake_case.
    pub key_paths: Vec<String>,
    /// Lowercased words of every command-key value.
    pub commands: Vec<Vec<String>>,
    /// The lowercased words of every nested string as one stream, each word
    /// preceded and followed by a space, strings separated by ` \u{1} ` so
    /// a phrase cannot span two strings.
    pub text: String,
    /// Every nested string, lowercased.
    pub strings: Vec<String>,
}

/// Splits a tool name into lowercased segments at `_ - . / :` and camelCase.
pub fn tool_segments(name: &str) -> Vec<String> {
    let mut out = Vec::new();
    for part in name.split(['_', '-', '.', '/', ':', ' ']) {
        if part.is_empty() {
            continue;
        }
        if part.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()) {
            out.push(part.to_string());
            continue;
        }
        let mut cur = String::new();
        let mut prev: Option<char> = None;
        let mut chars = part.chars().peekable();
        while let Some(c) = chars.next() {
            let next = chars.peek().copied();
            let boundary = c.is_uppercase()
                && prev.is_some_and(|p| {
                    p.is_lowercase() || p.is_ascii_digit() || (p.is_uppercase() && next.is_some_and(char::is_lowercase))
                });
            if boundary && !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
            cur.extend(c.to_lowercase());
            prev = Some(c);
        }
        if !cur.is_empty() {
            out.push(cur);
        }
    }
    out
}

fn snake_key(key: &str) -> String {
    if key.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_') && !key.contains("__") {
        return key.trim_matches('_').to_string();
    }
    tool_segments(key).join("_")
}

/// Splits text into lowercased shell-ish words: whitespace separated, with
/// surrounding quotes, brackets and trailing `;`/`,` stripped; shell
/// separators become their own words.
pub fn words(text: &str) -> Vec<String> {
    words_lower(&text.to_lowercase())
}

const SEPARATORS: [&str; 5] = [";", "&&", "||", "|", "&"];

/// [`words`] of text that is already lowercase.
fn words_lower(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    each_word(text, |w| out.push(w.to_string()));
    out
}

/// Calls `f` with each word of lowercase `text` (see [`words`]).
fn each_word<'a>(text: &'a str, mut f: impl FnMut(&'a str)) {
    for raw in text.split_whitespace() {
        let mut w = raw;
        let mut trailing_sep = None;
        for sep in SEPARATORS {
            if w.len() > sep.len() && w.ends_with(sep) {
                w = &w[..w.len() - sep.len()];
                trailing_sep = Some(sep);
                break;
            }
        }
        let trimmed =
            w.trim_matches(|c: char| matches!(c, '"' | '\'' | '`' | '(' | ')' | '[' | ']' | '{' | '}' | ',' | ';'));
        if !trimmed.is_empty() {
            f(trimmed);
        } else if SEPARATORS.contains(&w) {
            f(w);
        }
        if let Some(sep) = trailing_sep {
            f(sep);
        }
    }
}

/// Appends the words of lowercase `text` to a word stream.
fn push_text(stream: &mut String, text: &str) {
    if stream.is_empty() {
        stream.push(' ');
    } else {
        stream.push_str("\u{1} ");
    }
    each_word(text, |w| {
        stream.push_str(w);
        stream.push(' ');
    });
}
fn push_words(text: &mut String, words: &[String]) {
    if text.is_empty() {
        text.push(' ');
    } else {
        text.push_str("\u{1} ");
    }
    for w in words {
        text.push_str(w);
        text.push(' ');
    }
}
fn contains_phrase(text: &str, phrase: &str) -> bool {
    if phrase.is_empty() {
        return false;
    }
    text.match_indices(phrase).any(|(i, _)| text[..i].ends_with(' ') && text[i + phrase.len()..].starts_with(' '))
}
fn collect(v: &Value, path: &str, under_command: bool, f: &mut Flattened) {
    match v {
        Value::String(s) => {
            let lower = s.to_lowercase();
            if under_command {
                let w = words_lower(&lower);
                push_words(&mut f.text, &w);
                f.commands.push(w);
            } else {
                push_text(&mut f.text, &lower);
            }
            f.strings.push(lower);
        }
        Value::Array(items) => {
            if under_command && !items.is_empty() && items.iter().all(Value::is_string) {
                // An argv array is one command.
                let joined: Vec<String> = items.iter().filter_map(Value::as_str).map(str::to_lowercase).collect();
                let w = words_lower(&joined.join(" "));
                push_words(&mut f.text, &w);
                f.commands.push(w);
                f.strings.extend(joined);
            } else {
                for item in items {
                    collect(item, path, under_command, f);
                }
            }
        }
        Value::Object(m) => collect_map(m, path, under_command, f),
        _ => {}
    }
}
fn collect_map<'a, M>(m: &'a M, prefix: &str, under_command: bool, f: &mut Flattened)
where
    &'a M: IntoIterator<Item = (&'a String, &'a Value)>,
{
    for (k, v) in m {
        let key = snake_key(k);
        let path = if prefix.is_empty() { key.clone() } else { format!("{prefix}.{key}") };
        let cmd = under_command || COMMAND_KEYS.contains(&key.as_str());
        f.key_paths.push(path.clone());
        collect(v, &path, cmd, f);
    }
}

/// Flattens an action once: tool segments, key paths, command words and
/// every nested string, lowercased.
pub fn flatten(action: &Action) -> Flattened {
    let mut f = Flattened { action_type: Some(action.action_type), ..Flattened::default() };
    if let Some(tool) = &action.tool {
        f.tool_segments = tool_segments(tool);
    }
    collect_map(&action.parameters, "", false, &mut f);
    f
}

fn at_command_position(cmd: &[String]) -> impl Iterator<Item = usize> + '_ {
    const WRAPPERS: &[&str] = &["sudo", "doas", "env", "nohup", "time", "nice", "xargs", "exec", "command", "-c"];
    (0..cmd.len()).filter(move |&i| {
        i == 0
            || matches!(cmd[i - 1].as_str(), ";" | "&&" | "||" | "|" | "&" | "then" | "do")
            || WRAPPERS.contains(&cmd[i - 1].as_str())
    })
}

fn command_is_full_access(cmd: &[String], executables: &[String]) -> bool {
    at_command_position(cmd).any(|i| {
        let w = cmd[i].rsplit('/').next().unwrap_or(&cmd[i]);
        executables.iter().any(|e| e == w)
            || w.starts_with("mkfs.")
            || FULL_ACCESS_SUBCOMMANDS.iter().any(|(a, b)| w == *a && cmd.get(i + 1).is_some_and(|n| n == b))
    })
}

fn key_is_sensitive(path: &str) -> bool {
    let leaf = path.rsplit('.').next().unwrap_or(path);
    SENSITIVE_KEY_SET.contains(leaf)
        // `aws_secret_access_key`, `github_access_token`: a credential name at
        // the end of a longer key (not a bare `token`: `page_token` is not one).
        || SENSITIVE_KEY_SET.iter().any(|k| {
            *k != "token"
                && leaf.len() > k.len() + 1
                && leaf.ends_with(k)
                && leaf.as_bytes()[leaf.len() - k.len() - 1] == b'_'
        })
        || SENSITIVE_DOTTED_KEYS.iter().any(|k| {
            path == *k || (path.len() > k.len() && path.ends_with(k) && path[..path.len() - k.len()].ends_with('.'))
        })
}

static SENSITIVE_DOTTED_KEYS: std::sync::LazyLock<Vec<&'static str>> =
    std::sync::LazyLock::new(|| SENSITIVE_KEYS.iter().copied().filter(|k| k.contains('.')).collect());

static SENSITIVE_KEY_SET: std::sync::LazyLock<HashSet<&'static str>> =
    std::sync::LazyLock::new(|| SENSITIVE_KEYS.iter().copied().filter(|k| !k.contains('.')).collect());
fn path_is_sensitive(s: &str) -> bool {
    let s = s.trim();
    if s.contains(char::is_whitespace) && !s.starts_with('/') && !s.starts_with('~') && !s.starts_with('.') {
        return false;
    }
    // Compare as if the path were rooted: `~/x` and `x` both read as `/x`.
    let rest = s.strip_prefix("~/").or_else(|| s.strip_prefix('/')).unwrap_or(s);
    let rooted = |p: &str| match p.strip_prefix('/') {
        Some(tail) => rest.starts_with(tail) || rest.contains(p),
        None => rest.contains(p),
    };
    let rooted_suffix = |p: &str| match p.strip_prefix('/') {
        Some(tail) => rest == tail || rest.ends_with(p),
        None => rest.ends_with(p),
    };
    SENSITIVE_PATH_FRAGMENTS.iter().any(|p| rooted(p)) || SENSITIVE_PATH_SUFFIXES.iter().any(|p| rooted_suffix(p))
}
/// The authority classifier. Its keyword lists are public so a host can
/// extend them.
#[derive(Debug, Clone)]
pub struct RiskClassifier {
    full_access_tool_segments: HashSet<String>,
    full_access_commands: Vec<String>,
    dangerous_phrases: Vec<String>,
    /// The phrases as one regex over the flattened word stream.
    phrase_matcher: Option<regex::Regex>,
}
impl Default for RiskClassifier {
    fn default() -> Self {
        let own = |l: &[&str]| l.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        RiskClassifier::new(own(FULL_ACCESS_TOOL_SEGMENTS), own(FULL_ACCESS_COMMAND_KEYWORDS), own(DANGEROUS_PHRASES))
    }
}

/// One regex matching any of `phrases` as whole words of a flattened word
/// stream (see [`Flattened::text`]); `None` when there are none.
fn phrase_regex(phrases: &[String]) -> Option<regex::Regex> {
    let alts: Vec<String> =
        phrases.iter().filter(|p| !p.is_empty()).map(|p| regex::escape(&p.to_lowercase())).collect();
    if alts.is_empty() {
        return None;
    }
    // Escaped literals always compile; a failure (size) falls back to the
    // slow path in `contains_any_phrase`.
    regex::Regex::new(&format!(" (?:{}) ", alts.join("|"))).ok()
}

fn contains_any_phrase(text: &str, matcher: Option<&regex::Regex>, phrases: &[String]) -> bool {
    match matcher {
        Some(re) => re.is_match(text),
        None => phrases.iter().any(|p| contains_phrase(text, p)),
    }
}

static IRREVERSIBLE_PHRASE_RE: std::sync::LazyLock<Option<regex::Regex>> =
    std::sync::LazyLock::new(|| phrase_regex(&IRREVERSIBLE_PHRASES.iter().map(|s| s.to_string()).collect::<Vec<_>>()));
static COMPENSABLE_PHRASE_RE: std::sync::LazyLock<Option<regex::Regex>> =
    std::sync::LazyLock::new(|| phrase_regex(&COMPENSABLE_PHRASES.iter().map(|s| s.to_string()).collect::<Vec<_>>()));
impl RiskClassifier {
    /// A classifier with these lists: tool-name segments and command-key
    /// executables that require `full_access`, and phrases that require it
    /// anywhere (all compared lowercase, at word boundaries).
    pub fn new(tool_segments: Vec<String>, commands: Vec<String>, phrases: Vec<String>) -> Self {
        let phrase_matcher = phrase_regex(&phrases);
        RiskClassifier {
            full_access_tool_segments: tool_segments.into_iter().map(|s| s.to_lowercase()).collect(),
            full_access_commands: commands.into_iter().map(|s| s.to_lowercase()).collect(),
            dangerous_phrases: phrases.into_iter().map(|s| s.to_lowercase()).collect(),
            phrase_matcher,
        }
    }

    /// The shared default classifier.
    pub fn shared() -> &'static RiskClassifier {
        static DEFAULT: std::sync::LazyLock<RiskClassifier> = std::sync::LazyLock::new(RiskClassifier::default);
        &DEFAULT
    }

    /// The tier required to authorize `action`.
    pub fn classify(&self, action: &Action) -> PermissionTier {
        self.classify_flat(&flatten(action))
    }

    /// The tier required for an already flattened action.
    pub fn classify_flat(&self, f: &Flattened) -> PermissionTier {
        match f.action_type {
            Some(ActionType::StateRead) | Some(ActionType::Assertion) => return PermissionTier::ReadOnly,
            Some(ActionType::StateWrite) => return PermissionTier::SandboxEdit,
            _ => {}
        }
        if self.full_access_reason(f).is_some() { PermissionTier::FullAccess } else { PermissionTier::SandboxEdit }
    }

    /// Why a tool call needs `full_access`, if it does (names the signal,
    /// never a parameter value).
    pub fn full_access_reason(&self, f: &Flattened) -> Option<String> {
        if let Some(s) = f.tool_segments.iter().find(|s| self.full_access_tool_segments.contains(s.as_str())) {
            return Some(format!("tool name segment `{s}`"));
        }
        for cmd in &f.commands {
            if command_is_full_access(cmd, &self.full_access_commands) {
                return Some("a command key runs a privileged or external command".into());
            }
        }
        if let Some(k) = f.key_paths.iter().find(|k| key_is_sensitive(k)) {
            return Some(format!("parameter key `{k}` carries a credential"));
        }
        // A whole value naming a secret path, or one word of a longer value
        // (`cat ~/.ssh/id_rsa`).
        let word_is_path = |w: &&str| w.len() >= 4 && (w.contains('/') || w.contains('.')) && path_is_sensitive(w);
        if f.strings.iter().any(|s| path_is_sensitive(s)) || f.text.split(' ').any(|w| word_is_path(&w)) {
            return Some("a parameter targets a secret path".into());
        }
        if contains_any_phrase(&f.text, self.phrase_matcher.as_ref(), &self.dangerous_phrases) {
            return Some("a parameter contains a dangerous phrase".into());
        }
        None
    }
}

fn segment_matches(segment: &str, stems: &HashSet<&'static str>) -> bool {
    INFLECTIONS.iter().any(|infl| {
        segment.len() > infl.len() && segment.ends_with(infl) && stems.contains(&segment[..segment.len() - infl.len()])
    }) || segment
        .strip_suffix("ing")
        .is_some_and(|stem| stems.iter().any(|s| s.len() == stem.len() + 1 && s.starts_with(stem) && s.ends_with('e')))
}

struct ReversibilityLists {
    irreversible: HashSet<&'static str>,
    compensable: HashSet<&'static str>,
    reversible: HashSet<&'static str>,
}

static REVERSIBILITY: std::sync::LazyLock<ReversibilityLists> = std::sync::LazyLock::new(|| ReversibilityLists {
    irreversible: IRREVERSIBLE_SEGMENTS.iter().copied().collect(),
    compensable: COMPENSABLE_SEGMENTS.iter().copied().collect(),
    reversible: REVERSIBLE_SEGMENTS.iter().copied().collect(),
});
/// The reversibility classifier: can the action be undone? Independent of
/// the tier. Unknown tools are `irreversible`.
pub fn classify_reversibility(action: &Action) -> Reversibility {
    classify_reversibility_flat(&flatten(action))
}

/// [`classify_reversibility`] over an already flattened action.
pub fn classify_reversibility_flat(f: &Flattened) -> Reversibility {
    match f.action_type {
        Some(ActionType::StateRead) | Some(ActionType::Assertion) | Some(ActionType::StateWrite) => {
            return Reversibility::Reversible;
        }
        _ => {}
    }
    let lists = &*REVERSIBILITY;
    let seg = |stems: &HashSet<&'static str>| f.tool_segments.iter().any(|s| segment_matches(s, stems));
    let phrase = |re: &Option<regex::Regex>, ps: &[&str]| match re {
        Some(re) => re.is_match(&f.text),
        None => ps.iter().any(|p| contains_phrase(&f.text, p)),
    };
    if seg(&lists.irreversible) || phrase(&IRREVERSIBLE_PHRASE_RE, IRREVERSIBLE_PHRASES) {
        Reversibility::Irreversible
    } else if seg(&lists.compensable) || phrase(&COMPENSABLE_PHRASE_RE, COMPENSABLE_PHRASES) {
        Reversibility::Compensable
    } else if seg(&lists.reversible) {
        Reversibility::Reversible
    } else {
        Reversibility::Irreversible
    }
}

/// Both axes of one action, from one flattening.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Axes {
    /// Who may authorize it.
    pub required_tier: PermissionTier,
    /// Whether it can be undone.
    pub reversibility: Reversibility,
}

/// Flattens `action` once and classifies it on both axes with the default
/// classifier.
pub fn evaluate_axes(action: &Action) -> Axes {
    let f = flatten(action);
    Axes { required_tier: RiskClassifier::shared().classify_flat(&f), reversibility: classify_reversibility_flat(&f) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(tool: &str, params: Value) -> Action {
        let mut a = Action::tool_call(tool);
        a.parameters = params.as_object().cloned().unwrap_or_default().into();
        a
    }

    fn tier(tool: &str, params: Value) -> PermissionTier {
        RiskClassifier::default().classify(&call(tool, params))
    }

    fn rev(tool: &str, params: Value) -> Reversibility {
        classify_reversibility(&call(tool, params))
    }

    #[test]
    fn known_misses_are_pinned() {
        assert_eq!(rev("list_deployments", json!({})), Reversibility::Compensable);
        assert_eq!(rev("get_payment", json!({})), Reversibility::Irreversible);
        assert_eq!(rev("git_push", json!({})), Reversibility::Compensable);
        assert_eq!(rev("shell", json!({"command": "git push origin main"})), Reversibility::Compensable);
        assert_eq!(rev("shell", json!({"command": "git push --force origin main"})), Reversibility::Compensable);
        assert_eq!(rev("read_secret", json!({})), Reversibility::Reversible);
        assert_eq!(tier("read_secret", json!({})), PermissionTier::FullAccess);
    }

    #[test]
    fn unknown_tools_are_irreversible_sandbox_edit() {
        assert_eq!(rev("frobnicate", json!({})), Reversibility::Irreversible);
        assert_eq!(tier("frobnicate", json!({})), PermissionTier::SandboxEdit);
    }

    #[test]
    fn action_types() {
        let read = Action::new(ActionType::StateRead);
        let assert_ = Action::new(ActionType::Assertion);
        let write = Action::new(ActionType::StateWrite);
        assert_eq!(
            evaluate_axes(&read),
            Axes { required_tier: PermissionTier::ReadOnly, reversibility: Reversibility::Reversible }
        );
        assert_eq!(evaluate_axes(&assert_).required_tier, PermissionTier::ReadOnly);
        assert_eq!(
            evaluate_axes(&write),
            Axes { required_tier: PermissionTier::SandboxEdit, reversibility: Reversibility::Reversible }
        );
    }

    #[test]
    fn boundaries_not_substrings() {
        assert_eq!(tier("fetch", json!({"url": "https://example.com/deploy/http"})), PermissionTier::SandboxEdit);
        assert_eq!(tier("format_date", json!({})), PermissionTier::SandboxEdit);
        assert_eq!(tier("shell", json!({"command": "echo release notes"})), PermissionTier::SandboxEdit);
        assert_eq!(tier("note", json!({"text": "release notes"})), PermissionTier::SandboxEdit);
        assert_eq!(tier("shell", json!({"command": "date --format x"})), PermissionTier::SandboxEdit);
        assert_eq!(tier("validate_email", json!({})), PermissionTier::SandboxEdit);
        assert_eq!(tier("deployer_status", json!({})), PermissionTier::SandboxEdit);
        assert_eq!(tier("pushover", json!({})), PermissionTier::SandboxEdit);
    }

    #[test]
    fn tool_segments_split_camel_and_separators() {
        assert_eq!(tool_segments("sendEmail"), ["send", "email"]);
        assert_eq!(tool_segments("HTTPRequest"), ["http", "request"]);
        assert_eq!(tool_segments("docker.rm"), ["docker", "rm"]);
        assert_eq!(tool_segments("git-push_now"), ["git", "push", "now"]);
        assert_eq!(tier("sendEmail", json!({})), PermissionTier::FullAccess);
        assert_eq!(tier("docker.rm", json!({})), PermissionTier::FullAccess);
        assert_eq!(tier("deploy_service", json!({})), PermissionTier::FullAccess);
    }

    #[test]
    fn signals_in_parameters() {
        // Command keys at command position.
        assert_eq!(tier("shell", json!({"command": "rm -rf /tmp/x"})), PermissionTier::FullAccess);
        assert_eq!(tier("shell", json!({"command": "ls; sudo reboot"})), PermissionTier::FullAccess);
        assert_eq!(tier("shell", json!({"command": "/usr/bin/curl http://x"})), PermissionTier::FullAccess);
        assert_eq!(tier("run", json!({"argv": ["git", "push", "origin"]})), PermissionTier::FullAccess);
        assert_eq!(tier("shell", json!({"command": "ls -la"})), PermissionTier::SandboxEdit);
        assert_eq!(tier("shell", json!({"command": "git status"})), PermissionTier::SandboxEdit);
        // Key names.
        assert_eq!(tier("x", json!({"api_key": "abc"})), PermissionTier::FullAccess);
        assert_eq!(tier("x", json!({"apiKey": "abc"})), PermissionTier::FullAccess);
        assert_eq!(tier("x", json!({"auth": {"token": "abc"}})), PermissionTier::FullAccess);
        assert_eq!(tier("x", json!({"page_token": "abc"})), PermissionTier::SandboxEdit);
        assert_eq!(tier("x", json!({"config": {"aws_secret_access_key": "k"}})), PermissionTier::FullAccess);
        assert_eq!(tier("x", json!({"headers": {"X-Api-Key": "k"}})), PermissionTier::FullAccess);
        assert_eq!(tier("x", json!({"next_page_token": "abc"})), PermissionTier::SandboxEdit);
        assert_eq!(tier("list_files", json!({"path": "~/.ssh"})), PermissionTier::FullAccess);
        // Paths.
        assert_eq!(tier("read_file", json!({"path": "~/.ssh/id_rsa"})), PermissionTier::FullAccess);
        assert_eq!(tier("read_file", json!({"path": "/home/u/.aws/credentials"})), PermissionTier::FullAccess);
        assert_eq!(tier("read_file", json!({"path": "certs/server.pem"})), PermissionTier::FullAccess);
        assert_eq!(tier("read_file", json!({"path": "src/main.rs"})), PermissionTier::SandboxEdit);
        assert_eq!(tier("shell", json!({"command": "cat ~/.ssh/id_rsa"})), PermissionTier::FullAccess);
        assert_eq!(tier("note", json!({"text": "see deploy/key.pem later"})), PermissionTier::FullAccess);
        assert_eq!(tier("note", json!({"text": "see docs/keys.md later"})), PermissionTier::SandboxEdit);
        // Phrases anywhere, as whole words.
        assert_eq!(tier("query", json!({"sql": "DROP TABLE users;"})), PermissionTier::FullAccess);
        assert_eq!(tier("query", json!({"sql": "delete from users"})), PermissionTier::FullAccess);
        assert_eq!(tier("query", json!({"sql": "select * from deleted_from_archive"})), PermissionTier::SandboxEdit);
        assert_eq!(rev("query", json!({"sql": "insert into t values (1)"})), Reversibility::Compensable);
        assert_eq!(rev("query", json!({"sql": "select 1"})), Reversibility::Reversible);
        assert_eq!(rev("query", json!({"sql": "DROP TABLE t"})), Reversibility::Irreversible);
    }

    #[test]
    fn tier_order_and_spelling() {
        assert!(PermissionTier::ReadOnly < PermissionTier::SandboxEdit);
        assert!(PermissionTier::SandboxEdit < PermissionTier::FullAccess);
        assert_eq!(serde_json::to_value(PermissionTier::SandboxEdit).unwrap(), json!("sandbox_edit"));
        assert_eq!("full_access".parse::<PermissionTier>().unwrap(), PermissionTier::FullAccess);
        assert_eq!("root".parse::<PermissionTier>().unwrap_err().code(), "invalid_argument");
    }
}
