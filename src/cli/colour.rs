//! Colour for the words the CLI itself chooses (verdicts, severities,
//! progress states), never for text from a proposal: that is escaped
//! ([`super::shown`]) and printed as it is.
//!
//! On when the stream is a terminal, unless `NO_COLOR` is set to anything
//! but the empty string (<https://no-color.org>); `CLICOLOR_FORCE` set to
//! anything but `0` or the empty string turns it on for a pipe too (still
//! not under `NO_COLOR`).

use std::io::IsTerminal;

/// A colour for one word.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hue {
    /// allow, ok, valid.
    Green,
    /// ask, warning, undone.
    Yellow,
    /// deny, error, failed.
    Red,
}

/// Whether output to stdout (`err = false`) or stderr is coloured (decided
/// once per process and stream).
pub fn enabled(err: bool) -> bool {
    static STDOUT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    static STDERR: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let decide = || {
        let set = |k: &str| std::env::var_os(k).is_some_and(|v| !v.is_empty() && v != "0");
        if std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty()) {
            return false;
        }
        set("CLICOLOR_FORCE") || if err { std::io::stderr().is_terminal() } else { std::io::stdout().is_terminal() }
    };
    *if err { STDERR.get_or_init(decide) } else { STDOUT.get_or_init(decide) }
}

/// `word` in `hue` when `on` (the word is one of the CLI's own: no escaping).
pub fn paint(on: bool, hue: Hue, word: &str) -> String {
    if !on {
        return word.to_string();
    }
    let code = match hue {
        Hue::Green => 32,
        Hue::Yellow => 33,
        Hue::Red => 31,
    };
    format!("\x1b[{code}m{word}\x1b[0m")
}

/// The hue of a verdict or a severity word (`allow`, `ask`, `deny`,
/// `error`, `warning`, `info`), if it has one.
pub fn hue_of(word: &str) -> Option<Hue> {
    match word.trim() {
        "allow" | "ok" | "valid" => Some(Hue::Green),
        "ask" | "warning" | "undone" => Some(Hue::Yellow),
        "deny" | "error" | "failed" | "FAILED" | "INVALID" => Some(Hue::Red),
        _ => None,
    }
}

/// `word` (padded to `width`) painted by its own hue, when `on`.
pub fn word(on: bool, word: &str, width: usize) -> String {
    let padded = format!("{word:<width$}");
    match hue_of(word) {
        // The padding stays outside the colour, so columns line up.
        Some(h) if on => format!("{}{}", paint(true, h, word), &padded[word.len()..]),
        _ => padded,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_painted_and_padded_outside_the_colour() {
        assert_eq!(word(false, "ask", 5), "ask  ");
        assert_eq!(word(true, "ask", 5), "\x1b[33mask\x1b[0m  ");
        assert_eq!(word(true, "deny", 5), "\x1b[31mdeny\x1b[0m ");
        assert_eq!(word(true, "other", 7), "other  ");
    }
}
