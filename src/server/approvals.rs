//! The daemon's read cache of the approvals ledger: `proposal.submit`'s tier
//! check needs the latest record of every fingerprint on every submit, and
//! the JSONL file is re-read and re-parsed only when its length,
//! modification time or inode changed (an append always changes the length).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use crate::Error;
use crate::policy::{ApprovalLedger, ApprovalRecord, JsonlLedger};

/// What identifies one version of the ledger file.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    path: PathBuf,
    len: u64,
    modified: Option<SystemTime>,
    inode: u64,
}

/// The latest record of every fingerprint.
pub(crate) type Latest = Arc<HashMap<String, ApprovalRecord>>;

#[derive(Debug, Default)]
pub(crate) struct ApprovalsCache {
    slot: Mutex<Option<(Stamp, Latest)>>,
}

impl ApprovalsCache {
    /// The ledger at `path` as [`ApprovalLedger::latest_all`] reads it: a
    /// missing file is empty; an unreadable or invalid one is an error
    /// (never cached, so it is reported again on the next call).
    pub(crate) fn latest(&self, path: &Path) -> crate::Result<Latest> {
        let meta = match std::fs::metadata(path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Latest::default()),
            Err(e) => {
                return Err(Error::runtime(
                    "ledger_io_error",
                    format!("cannot read approvals ledger `{}`: {e}", path.display()),
                ));
            }
        };
        #[cfg(unix)]
        let inode = std::os::unix::fs::MetadataExt::ino(&meta);
        #[cfg(not(unix))]
        let inode = 0;
        let stamp = Stamp { path: path.to_path_buf(), len: meta.len(), modified: meta.modified().ok(), inode };
        if let Ok(slot) = self.slot.lock()
            && let Some((cached, latest)) = &*slot
            && *cached == stamp
        {
            return Ok(latest.clone());
        }
        // Read after the stat: the contents are at least as new as the
        // stamp, so a write racing this read is seen on the next call.
        let latest: Latest = Arc::new(JsonlLedger::new(path).latest_all()?);
        if let Ok(mut slot) = self.slot.lock() {
            *slot = Some((stamp, latest.clone()));
        }
        Ok(latest)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::Action;
    use crate::policy::{ApprovalVerdict, PermissionGate};
    use serde_json::json;

    fn deploy() -> Action {
        let mut a = Action::tool_call("deploy");
        a.id = "d".into();
        a.parameters = json!({"target": "prod"}).as_object().cloned().unwrap();
        a
    }

    fn verdict(l: &Latest) -> ApprovalVerdict {
        l.values().next().unwrap().decision
    }

    #[test]
    fn rereads_the_ledger_when_it_changes() {
        let dir = std::env::temp_dir().join(format!("car-approvals-cache-{}", uuid::Uuid::new_v4()));
        let path = dir.join("approvals.jsonl");
        let cache = ApprovalsCache::default();
        assert!(cache.latest(&path).unwrap().is_empty(), "a missing ledger is empty");

        let gate = PermissionGate::new().with_ledger(Box::new(JsonlLedger::new(&path)));
        gate.record(&deploy(), true, "al", "ok", None).unwrap();
        let first = cache.latest(&path).unwrap();
        assert_eq!(first.len(), 1);
        assert_eq!(verdict(&first), ApprovalVerdict::Approved);
        assert!(Arc::ptr_eq(&first, &cache.latest(&path).unwrap()), "an unchanged ledger is not re-read");

        // A later verdict for the same operation wins once it is appended.
        gate.record(&deploy(), false, "bob", "not today", None).unwrap();
        let second = cache.latest(&path).unwrap();
        assert_eq!(verdict(&second), ApprovalVerdict::Rejected);

        // A corrupt ledger is an error every time, not a stale answer.
        std::fs::write(&path, "not a record\n").unwrap();
        assert!(cache.latest(&path).is_err());
        assert!(cache.latest(&path).is_err());
        std::fs::remove_file(&path).unwrap();
        assert!(cache.latest(&path).unwrap().is_empty());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
