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
    submissions: Mutex<VecDeque<Value>>,
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
        principal: &str,
        proposal: &crate::ir::ActionProposal,
        started: DateTime<Utc>,
        result: Result<&crate::ir::ProposalResult, String>,
        approvals: &[String],
    ) {
        let tools: HashMap<&str, &str> = proposal
            .actions
            .iter()
            .map(|a| (a.id.as_str(), a.tool.as_deref().unwrap_or(a.action_type.as_str())))
            .collect();
        let (actions, error) = match result {
            Ok(r) => (
                r.results
                    .iter()
                    .map(|a| {
                        json!({"action_id": a.action_id, "tool": tools.get(a.action_id.as_str()),
                               "status": a.status, "error": a.error})
                    })
                    .collect::<Vec<_>>(),
                None,
            ),
            Err(e) => (Vec::new(), Some(e)),
        };
        let doc = json!({
            "proposal_id": proposal.id, "source": proposal.source, "session_id": session_id,
            "principal": principal, "submitted_at": started, "finished_at": Utc::now(),
            "actions": actions, "error": error, "approvals": approvals,
        });
        let mut s = lock(&self.submissions);
        s.push_back(doc);
        while s.len() > KEPT {
            s.pop_front();
        }
    }

    /// The recent submissions, newest first.
    pub(crate) fn submissions(&self, limit: usize) -> Value {
        Value::Array(lock(&self.submissions).iter().rev().take(limit).cloned().collect())
    }
}
