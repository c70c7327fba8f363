//! Text that reaches a terminal or a log a person reads: a proposal's ids,
//! commands and paths (and anything else a client sends) are escaped so they
//! cannot move the cursor, erase a line, reorder what is shown or forge a
//! line of their own. `car` and `car-server` both print through this.

/// `s` safe to print on a terminal: control characters (C0, DEL, C1) are
/// shown as escapes (`\n`, `\r`, `\t`, `\x1b`, `\x07`, `\u{85}`), and so are
/// the invisible format characters that reorder or hide text (bidi embeddings,
/// overrides and isolates U+202A–U+202E, U+2066–U+2069, U+061C; zero-width and
/// direction marks U+200B–U+200F; U+2028, U+2029, U+FEFF). A proposal's ids,
/// commands and paths go through this before they reach a terminal, so they
/// cannot move the cursor, erase a line or forge a plan line. Borrowed when
/// nothing needs escaping. JSON output needs none of this (serde escapes).
pub fn shown(s: &str) -> std::borrow::Cow<'_, str> {
    fn hidden(c: char) -> bool {
        c.is_control()
            || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
            || matches!(c, '\u{061c}' | '\u{2028}' | '\u{2029}' | '\u{feff}')
    }
    if !s.chars().any(hidden) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 16);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x80 && hidden(c) => out.push_str(&format!("\\x{:02x}", c as u32)),
            c if hidden(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// [`shown`] of each line of `text`, our own line breaks kept.
pub fn shown_lines(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for l in text.split_inclusive('\n') {
        let (body, nl) = l.strip_suffix('\n').map_or((l, ""), |b| (b, "\n"));
        out.push_str(&shown(body));
        out.push_str(nl);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::shown;

    #[test]
    fn shown_escapes_controls_and_invisible_format_characters() {
        assert!(matches!(shown("plain é 😀 \\ path/x"), std::borrow::Cow::Borrowed(_)));
        assert_eq!(shown("a\rb\x1b[2K\n[allow] fake\t\x07\x7f"), "a\\rb\\x1b[2K\\n[allow] fake\\t\\x07\\x7f");
        assert_eq!(
            shown("\u{202e}txt.exe\u{2066}\u{2069}\u{200b}\u{200f}\u{85}"),
            "\\u{202e}txt.exe\\u{2066}\\u{2069}\\u{200b}\\u{200f}\\u{85}"
        );
    }
}
