//! What the dashboard reads of the daemon's sessions: the live connections
//! (with their runtimes, for the event log and the admission document) and
//! the recent submissions with their results. Bounded, in memory, and never
//! a parameter value: an action is shown by id, tool, status and error.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::api::runtime::CarRuntime;

/// How many submissions stay listed.
const KEPT: usize = 500;

/// A live session.
#[derive(Clone)]
pub(crate) struct Session {
    pub(crate) rt: CarRuntime,
    pub(crate) principal: String,
    pub(crate) role: String,
    pub(crate) since: DateTime<Utc>,
}

#[derive(Default)]
pub(crate) struct Activity {
    sessions: Mutex<HashMap<String, Session>>,
    submissions: Mutex<VecDeque<Submitted>>,
}

/// What a submission is listed with, taken from its proposal before it runs
/// (the proposal itself moves into the engine).
pub(crate) struct Listing {
    proposal_id: String,
    source: String,
    /// Each action's id and tool (its type when it names no tool).
    tools: Vec<(String, String)>,
    started: DateTime<Utc>,
}

impl Listing {
    pub(crate) fn of(proposal: &crate::ir::ActionProposal) -> Listing {
        Listing {
            proposal_id: proposal.id.clone(),
            source: proposal.source.clone(),
            tools: proposal
                .actions
                .iter()
                .map(|a| (a.id.clone(), a.tool.clone().unwrap_or_else(|| a.action_type.as_str().to_string())))
                .collect(),
            started: Utc::now(),
        }
    }
}

/// A finished submission as kept: rendered as JSON only when the dashboard
/// reads it.
struct Submitted {
    listing: Listing,
    session_id: String,
    principal: String,
    finished_at: DateTime<Utc>,
    /// Each result's action id, status and error.
    actions: Vec<(String, crate::ir::ActionStatus, Option<String>)>,
    error: Option<String>,
    approvals: Vec<String>,
}

impl Submitted {
    fn to_json(&self) -> Value {
        let s = &self.listing;
        let tools: HashMap<&str, &str> = s.tools.iter().map(|(a, t)| (a.as_str(), t.as_str())).collect();
        let tool = |id: &str| tools.get(id).copied();
        let actions: Vec<Value> = self
            .actions
            .iter()
            .map(|(id, status, error)| json!({"action_id": id, "tool": tool(id), "status": status, "error": error}))
            .collect();
        json!({
            "proposal_id": s.proposal_id, "source": s.source, "session_id": self.session_id,
            "principal": self.principal, "submitted_at": s.started, "finished_at": self.finished_at,
            "actions": actions, "error": self.error, "approvals": self.approvals,
        })
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Activity {
    pub(crate) fn open(&self, id: &str, session: Session) {
        lock(&self.sessions).insert(id.to_string(), session);
    }

    /// The identity changed (`session.auth`).
    pub(crate) fn relabel(&self, id: &str, principal: String, role: String) {
        if let Some(s) = lock(&self.sessions).get_mut(id) {
            s.principal = principal;
            s.role = role;
        }
    }

    pub(crate) fn close(&self, id: &str) {
        lock(&self.sessions).remove(id);
    }

    pub(crate) fn session(&self, id: &str) -> Option<Session> {
        lock(&self.sessions).get(id).cloned()
    }

    /// `[{session_id, principal, role, since, events}]`, oldest first.
    pub(crate) fn sessions(&self) -> Value {
        let mut list: Vec<(String, Session)> =
            lock(&self.sessions).iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        list.sort_by(|a, b| a.1.since.cmp(&b.1.since).then(a.0.cmp(&b.0)));
        Value::Array(
            list.into_iter()
                .map(|(id, s)| {
                    json!({"session_id": id, "principal": s.principal, "role": s.role, "since": s.since,
                           "events": s.rt.event_count()})
                })
                .collect(),
        )
    }

    /// Records a finished submission: the proposal's id and source, who
    /// submitted it, each action's tool, status and error, the approvals it
    /// waited on and the outcome.
    pub(crate) fn submitted(
        &self,
        session_id: &str,
        principal: String,
        listing: Listing,
        result: Result<&crate::ir::ProposalResult, String>,
        approvals: Vec<String>,
    ) {
        let (actions, error) = match result {
            Ok(r) => (r.results.iter().map(|a| (a.action_id.clone(), a.status, a.error.clone())).collect(), None),
            Err(e) => (Vec::new(), Some(e)),
        };
        let doc = Submitted {
            listing,
            session_id: session_id.to_string(),
            principal,
            finished_at: Utc::now(),
            actions,
            error,
            approvals,
        };
        let mut s = lock(&self.submissions);
        s.push_back(doc);
        while s.len() > KEPT {
            s.pop_front();
        }
    }

    /// The recent submissions, newest first.
    pub(crate) fn submissions(&self, limit: usize) -> Value {
        Value::Array(lock(&self.submissions).iter().rev().take(limit).map(Submitted::to_json).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ir::{ActionResult, ActionStatus, ProposalResult};

    fn proposal(id: &str) -> crate::ir::ActionProposal {
        crate::api::parse_proposal(&format!(
            r#"{{"id": "{id}", "source": "agent-7", "actions": [
                {{"id": "a", "type": "tool_call", "tool": "echo", "parameters": {{"secret": "never listed"}}}},
                {{"id": "b", "type": "state_write", "parameters": {{"key": "k", "value": 1}}}}]}}"#
        ))
        .unwrap()
    }

    #[test]
    fn a_submission_is_listed_with_its_tools_statuses_and_outcome_never_its_parameters() {
        let activity = Activity::default();
        let p = proposal("p-1");
        let listed = Listing::of(&p);
        let mut failed = ActionResult::new("b", ActionStatus::Failed);
        failed.error = Some("boom".into());
        let result = ProposalResult {
            proposal_id: "p-1".into(),
            results: vec![
                ActionResult::new("a", ActionStatus::Succeeded),
                failed,
                ActionResult::new("zz", ActionStatus::Skipped),
            ],
            cost: Default::default(),
            artifacts: Vec::new(),
            status: None,
            suspension: None,
        };
        activity.submitted("s-1", "agent:x".into(), listed, Ok(&result), vec!["ap-1".into()]);
        activity.submitted("s-1", "agent:x".into(), Listing::of(&proposal("p-2")), Err("refused".into()), Vec::new());
        let list = activity.submissions(10);
        let list = list.as_array().unwrap();
        assert_eq!(list.len(), 2);
        // Newest first.
        assert_eq!(list[1]["proposal_id"], "p-1");
        let first = &list[1];
        assert_eq!(first["source"], "agent-7");
        assert_eq!(first["session_id"], "s-1");
        assert_eq!(first["principal"], "agent:x");
        assert_eq!(first["approvals"], serde_json::json!(["ap-1"]));
        assert!(first["error"].is_null());
        assert_eq!(
            first["actions"],
            serde_json::json!([
                {"action_id": "a", "tool": "echo", "status": "succeeded", "error": null},
                {"action_id": "b", "tool": "state_write", "status": "failed", "error": "boom"},
                {"action_id": "zz", "tool": null, "status": "skipped", "error": null},
            ])
        );
        assert!(first["submitted_at"].as_str().unwrap() <= first["finished_at"].as_str().unwrap());
        assert!(!list.iter().any(|s| s.to_string().contains("never listed")));
        assert_eq!(list[0]["proposal_id"], "p-2");
        assert_eq!(list[0]["error"], "refused");
        assert_eq!(list[0]["actions"], serde_json::json!([]));
        // Bounded: the oldest go first.
        for n in 0..KEPT {
            activity.submitted("s", "p".into(), Listing::of(&proposal(&format!("q-{n}"))), Err("x".into()), Vec::new());
        }
        let all = activity.submissions(usize::MAX);
        assert_eq!(all.as_array().unwrap().len(), KEPT);
        assert_eq!(all[KEPT - 1]["proposal_id"], "q-0");
    }
}
