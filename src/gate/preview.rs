//! Previews: a dry-run description of a resource call's effect, taken at plan
//! time and stored on the item verbatim. A slow, failing or panicking preview
//! degrades to an absent preview; it never blocks or aborts the plan.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use serde::{Deserialize, Serialize};

use super::plan::{Call, Plan, ToolKind};
use crate::Result;

/// A field of a [`RenderTree::Fields`] node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RenderField {
    /// The label.
    pub name: String,
    /// The value, rendered as text.
    pub value: String,
}

/// The render tree a preview returns (render.v1.RenderTree).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RenderTree {
    /// Plain text.
    Text {
        /// The text.
        text: String,
    },
    /// Preformatted code.
    Code {
        /// The language hint; default "".
        #[serde(default)]
        language: String,
        /// The code.
        text: String,
    },
    /// A unified diff of one file.
    Diff {
        /// The file.
        path: String,
        /// The unified diff text.
        unified: String,
    },
    /// Labelled values (e.g. a request summary).
    Fields {
        /// The fields in order.
        fields: Vec<RenderField>,
    },
    /// A titled group of nodes.
    Group {
        /// The title; default "".
        #[serde(default)]
        title: String,
        /// The children in order.
        children: Vec<RenderTree>,
    },
}

/// A provider's Preview RPC.
#[async_trait::async_trait]
pub trait PreviewProvider: Send + Sync {
    /// A dry-run description of `call`'s effect; `Ok(None)` when the provider
    /// has nothing to show. The default implementation is "not implemented".
    async fn preview(&self, call: &Call) -> Result<Option<RenderTree>> {
        let _ = call;
        Ok(None)
    }
}

/// Routes preview requests to the originating provider by name; a provider
/// without an entry does not implement Preview.
#[derive(Default, Clone)]
pub struct PreviewRouter {
    providers: HashMap<String, Arc<dyn PreviewProvider>>,
}

impl PreviewRouter {
    /// An empty router.
    pub fn new() -> Self {
        PreviewRouter::default()
    }

    /// Registers `provider` for calls whose provider is `name`.
    pub fn with(mut self, name: impl Into<String>, provider: Arc<dyn PreviewProvider>) -> Self {
        self.providers.insert(name.into(), provider);
        self
    }
}

#[async_trait::async_trait]
impl PreviewProvider for PreviewRouter {
    async fn preview(&self, call: &Call) -> Result<Option<RenderTree>> {
        match self.providers.get(&call.provider) {
            Some(p) => p.preview(call).await,
            None => Ok(None),
        }
    }
}

/// The default per-preview deadline: 2 seconds.
pub const DEFAULT_PREVIEW_DEADLINE: Duration = Duration::from_secs(2);

/// Requests a preview for every resource item of `plan` concurrently, each
/// bounded by `deadline`. A timeout, an error or a panic leaves that item's
/// preview absent. Data-source and interactive items never get one.
/// Must run inside a tokio runtime (the deadline uses tokio's timer).
pub async fn attach_previews(plan: &mut Plan, provider: &dyn PreviewProvider, deadline: Duration) {
    let calls: Vec<(usize, Call)> = plan
        .items
        .iter()
        .enumerate()
        .filter(|(_, i)| i.kind == ToolKind::Resource)
        .map(|(n, i)| (n, i.to_call()))
        .collect();
    let futs = calls.iter().map(|(n, call)| async move {
        let fut = AssertUnwindSafe(provider.preview(call)).catch_unwind();
        let out = match tokio::time::timeout(deadline, fut).await {
            Ok(Ok(Ok(tree))) => tree,
            _ => None,
        };
        (*n, out)
    });
    for (n, tree) in futures::future::join_all(futs).await {
        if let Some(item) = plan.items.get_mut(n) {
            item.preview = tree;
        }
    }
    for item in plan.items.iter_mut().filter(|i| i.kind != ToolKind::Resource) {
        item.preview = None;
    }
}

/// The preview of a file write: a unified diff (3 lines of context) of the
/// file's current content (`None` for a new file) against the content written.
pub fn file_write_preview(path: &str, old: Option<&str>, new: &str) -> RenderTree {
    let old_label = if old.is_some() { format!("a/{path}") } else { "/dev/null".to_string() };
    RenderTree::Diff {
        path: path.to_string(),
        unified: unified_diff(old.unwrap_or(""), new, &old_label, &format!("b/{path}"), 3),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Equal(usize, usize),
    Delete(usize),
    Insert(usize),
}

/// Beyond this many edits the middle of the diff is shown as one replacement.
const MAX_EDIT_DISTANCE: usize = 4000;

/// A unified diff of two texts, line by line (our own Myers O(ND) diff, after
/// trimming the common prefix and suffix). Empty when the texts are equal.
pub fn unified_diff(old: &str, new: &str, old_label: &str, new_label: &str, context: usize) -> String {
    let a: Vec<&str> = old.split_inclusive('\n').collect();
    let b: Vec<&str> = new.split_inclusive('\n').collect();
    let ops = diff_lines(&a, &b);
    if ops.iter().all(|o| matches!(o, Op::Equal(..))) {
        return String::new();
    }
    let mut out = format!("--- {old_label}\n+++ {new_label}\n");
    let changes: Vec<usize> =
        ops.iter().enumerate().filter(|(_, o)| !matches!(o, Op::Equal(..))).map(|(i, _)| i).collect();
    let mut g = 0;
    while g < changes.len() {
        let first = changes[g];
        let mut last = first;
        g += 1;
        while g < changes.len() && changes[g] - last <= 2 * context + 1 {
            last = changes[g];
            g += 1;
        }
        let start = first.saturating_sub(context);
        let end = (last + context + 1).min(ops.len());
        let (mut old_before, mut new_before) = (0, 0);
        for o in &ops[..start] {
            match o {
                Op::Equal(..) => {
                    old_before += 1;
                    new_before += 1;
                }
                Op::Delete(_) => old_before += 1,
                Op::Insert(_) => new_before += 1,
            }
        }
        let old_count = ops[start..end].iter().filter(|o| !matches!(o, Op::Insert(_))).count();
        let new_count = ops[start..end].iter().filter(|o| !matches!(o, Op::Delete(_))).count();
        let os = if old_count == 0 { old_before } else { old_before + 1 };
        let ns = if new_count == 0 { new_before } else { new_before + 1 };
        out.push_str(&format!("@@ -{} +{} @@\n", range(os, old_count), range(ns, new_count)));
        for o in &ops[start..end] {
            let (sign, line) = match *o {
                Op::Equal(i, _) => (' ', a[i]),
                Op::Delete(i) => ('-', a[i]),
                Op::Insert(j) => ('+', b[j]),
            };
            out.push(sign);
            out.push_str(line);
            if !line.ends_with('\n') {
                out.push_str("\n\\ No newline at end of file\n");
            }
        }
    }
    out
}

fn range(start: usize, count: usize) -> String {
    if count == 1 { start.to_string() } else { format!("{start},{count}") }
}

fn diff_lines(a: &[&str], b: &[&str]) -> Vec<Op> {
    let prefix = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let suffix = a[prefix..].iter().rev().zip(b[prefix..].iter().rev()).take_while(|(x, y)| x == y).count();
    let am = &a[prefix..a.len() - suffix];
    let bm = &b[prefix..b.len() - suffix];
    let mut ops: Vec<Op> = (0..prefix).map(|i| Op::Equal(i, i)).collect();
    match myers(am, bm) {
        Some(mid) => ops.extend(mid.into_iter().map(|o| match o {
            Op::Equal(i, j) => Op::Equal(i + prefix, j + prefix),
            Op::Delete(i) => Op::Delete(i + prefix),
            Op::Insert(j) => Op::Insert(j + prefix),
        })),
        None => {
            ops.extend((0..am.len()).map(|i| Op::Delete(i + prefix)));
            ops.extend((0..bm.len()).map(|j| Op::Insert(j + prefix)));
        }
    }
    let (sa, sb) = (a.len() - suffix, b.len() - suffix);
    ops.extend((0..suffix).map(|k| Op::Equal(sa + k, sb + k)));
    ops
}

/// Myers' greedy shortest edit script; `None` beyond [`MAX_EDIT_DISTANCE`].
/// Stores only the band `[-d-1, d+1]` of V per step: O(D^2) memory.
fn myers(a: &[&str], b: &[&str]) -> Option<Vec<Op>> {
    let (n, m) = (a.len() as isize, b.len() as isize);
    let max = (n + m) as usize;
    let off = max as isize + 1;
    let mut v = vec![0isize; 2 * max + 3];
    let mut trace: Vec<Vec<isize>> = Vec::new();
    let at = |v: &Vec<isize>, k: isize| v[(k + off) as usize];
    let mut found = None;
    for d in 0..=max as isize {
        if d as usize > MAX_EDIT_DISTANCE {
            return None;
        }
        trace.push(v[(off - d - 1) as usize..=(off + d + 1) as usize].to_vec());
        let mut k = -d;
        while k <= d {
            let mut x =
                if k == -d || (k != d && at(&v, k - 1) < at(&v, k + 1)) { at(&v, k + 1) } else { at(&v, k - 1) + 1 };
            let mut y = x - k;
            while x < n && y < m && a[x as usize] == b[y as usize] {
                x += 1;
                y += 1;
            }
            v[(k + off) as usize] = x;
            if x >= n && y >= m {
                found = Some(d);
                break;
            }
            k += 2;
        }
        if found.is_some() {
            break;
        }
    }
    let dmax = found?;
    let mut ops = Vec::new();
    let (mut x, mut y) = (n, m);
    for d in (0..=dmax).rev() {
        let band = &trace[d as usize];
        let get = |k: isize| band[(k + d + 1) as usize];
        let k = x - y;
        let prev_k = if k == -d || (k != d && get(k - 1) < get(k + 1)) { k + 1 } else { k - 1 };
        let prev_x = get(prev_k);
        let prev_y = prev_x - prev_k;
        while x > prev_x && y > prev_y {
            ops.push(Op::Equal((x - 1) as usize, (y - 1) as usize));
            x -= 1;
            y -= 1;
        }
        if d > 0 {
            if x == prev_x {
                ops.push(Op::Insert((y - 1) as usize));
            } else {
                ops.push(Op::Delete((x - 1) as usize));
            }
        }
        x = prev_x;
        y = prev_y;
    }
    ops.reverse();
    Some(ops)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply(old: &str, new: &str) -> String {
        // Rebuild `new` from the ops over `old` to check the script.
        let a: Vec<&str> = old.split_inclusive('\n').collect();
        let b: Vec<&str> = new.split_inclusive('\n').collect();
        let mut out = String::new();
        for o in diff_lines(&a, &b) {
            match o {
                Op::Equal(i, _) => out.push_str(a[i]),
                Op::Insert(j) => out.push_str(b[j]),
                Op::Delete(_) => {}
            }
        }
        out
    }

    #[test]
    fn unified_diff_of_a_small_edit() {
        let old = "a\nb\nc\nd\n";
        let new = "a\nB\nc\nd\ne\n";
        let d = unified_diff(old, new, "a/f", "b/f", 1);
        assert_eq!(d, "--- a/f\n+++ b/f\n@@ -1,4 +1,5 @@\n a\n-b\n+B\n c\n d\n+e\n");
        let d = unified_diff(old, new, "a/f", "b/f", 0);
        assert_eq!(d, "--- a/f\n+++ b/f\n@@ -2 +2 @@\n-b\n+B\n@@ -4,0 +5 @@\n+e\n");
    }

    #[test]
    fn equal_texts_have_no_diff_and_new_files_diff_from_nothing() {
        assert_eq!(unified_diff("x\n", "x\n", "a", "b", 3), "");
        let RenderTree::Diff { unified, .. } = file_write_preview("n.txt", None, "hi") else { panic!() };
        assert_eq!(unified, "--- /dev/null\n+++ b/n.txt\n@@ -0,0 +1 @@\n+hi\n\\ No newline at end of file\n");
    }

    #[test]
    fn edit_script_rebuilds_the_new_text() {
        let cases =
            [("", "a\n"), ("a\nb\nc\n", ""), ("x\ny\nz\nx\ny\n", "y\nx\nz\nz\ny\nx\n"), ("1\n2\n3\n", "3\n2\n1\n")];
        for (o, n) in cases {
            assert_eq!(apply(o, n), n, "{o:?} -> {n:?}");
        }
    }
}
