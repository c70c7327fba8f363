//! The unified diff of file-write previews: applying the diff to the old text
//! gives the new text, for arbitrary texts (property test).

use car_runtime::gate::unified_diff;
use proptest::prelude::*;

/// Applies a unified diff produced by `unified_diff` to `old`.
fn apply_patch(old: &str, patch: &str) -> String {
    if patch.is_empty() {
        return old.to_string();
    }
    let a: Vec<&str> = old.split_inclusive('\n').collect();
    let mut out = String::new();
    let mut pos = 0usize;
    let mut last = ' ';
    for line in patch.lines().skip(2) {
        if let Some(h) = line.strip_prefix("@@ -") {
            let old_range = h.split(' ').next().unwrap();
            let mut it = old_range.split(',');
            let start: usize = it.next().unwrap().parse().unwrap();
            let count: usize = it.next().map_or(1, |c| c.parse().unwrap());
            let upto = if count == 0 { start } else { start - 1 };
            while pos < upto {
                out.push_str(a[pos]);
                pos += 1;
            }
            continue;
        }
        if line == "\\ No newline at end of file" {
            if last != '-' {
                assert_eq!(out.pop(), Some('\n'));
            }
            continue;
        }
        let (sign, text) = line.split_at(1);
        last = sign.chars().next().unwrap();
        match last {
            ' ' => {
                assert_eq!(a[pos].trim_end_matches('\n'), text, "context matches the old text");
                out.push_str(text);
                out.push('\n');
                pos += 1;
            }
            '-' => {
                assert_eq!(a[pos].trim_end_matches('\n'), text, "deleted line matches the old text");
                pos += 1;
            }
            '+' => {
                out.push_str(text);
                out.push('\n');
            }
            other => panic!("unexpected line kind {other:?}"),
        }
    }
    for l in &a[pos..] {
        out.push_str(l);
    }
    out
}

fn text() -> impl Strategy<Value = String> {
    (prop::collection::vec(prop::sample::select(vec!["a", "b", "c", "d", ""]), 0..30), any::<bool>()).prop_map(
        |(lines, trailing)| {
            let mut s = lines.join("\n");
            if trailing && !s.is_empty() {
                s.push('\n');
            }
            s
        },
    )
}

proptest! {
    #[test]
    fn applying_the_diff_rebuilds_the_new_text(old in text(), new in text(), context in 0usize..4) {
        let patch = unified_diff(&old, &new, "a/f", "b/f", context);
        prop_assert_eq!(patch.is_empty(), old == new);
        prop_assert_eq!(apply_patch(&old, &patch), new);
    }
}
