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
    /// has nothing to show, which is also what a provider without previews
    /// answers by default.
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

/// A unified diff of two texts, line by line (the `similar` crate's Myers
/// diff, as the built-in file tools use). Empty when the texts are equal.
pub fn unified_diff(old: &str, new: &str, old_label: &str, new_label: &str, context: usize) -> String {
    if old == new {
        return String::new();
    }
    similar::TextDiff::from_lines(old, new)
        .unified_diff()
        .context_radius(context)
        .header(old_label, new_label)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
