//! `car shell-match --explain`: which rule and which token decided each
//! segment of a shell command.

use car_runtime::permission::shell::{ShellExplanation, ShellRules};

use super::{CliError, CliResult, pretty, shown};

/// Prints the explanation of `command` against the three tables (as JSON
/// with `json`). Exit 0; a bad pattern is bad input (2).
pub fn explain(command: &str, allow: &[String], ask: &[String], deny: &[String], json: bool) -> CliResult {
    let rules = ShellRules::new(allow, ask, deny).map_err(|e| CliError::Input(e.to_string()))?;
    let e = rules.explain(command);
    if json {
        println!("{}", pretty(&e));
    } else {
        print!("{}", render(&e));
    }
    Ok(0)
}

/// The human-readable explanation; the command's words, rules, tokens and
/// reasons are [`shown`] escaped.
pub fn render(e: &ShellExplanation) -> String {
    let mut out = format!("verdict: {}\n", e.verdict.as_str());
    if e.uncertain {
        out.push_str(
            "uncertain: yes (something could not be fully resolved; a deny or ask rule cannot be ruled out)\n",
        );
    }
    for d in &e.segments {
        let indent = "  ".repeat(d.depth + 1);
        let argv = if d.argv.is_empty() { "(no words)".to_string() } else { shell_words(&d.argv) };
        out.push_str(&format!("{indent}{:<5} {argv}\n", d.verdict.as_str()));
        if let (Some(t), Some(r)) = (d.table, &d.rule) {
            out.push_str(&format!("{indent}      rule:  {} `{}`\n", t.as_str(), shown(r)));
        }
        if let Some(t) = &d.token {
            out.push_str(&format!("{indent}      token: `{}`\n", shown(t)));
        }
        out.push_str(&format!("{indent}      why:   {}\n", shown(&d.reason)));
    }
    out
}

/// Words joined for display, quoted when they hold a blank or are empty.
fn shell_words(words: &[String]) -> String {
    words
        .iter()
        .map(|w| if w.is_empty() || w.contains([' ', '\t', '\n']) { format!("{w:?}") } else { shown(w).into_owned() })
        .collect::<Vec<_>>()
        .join(" ")
}
