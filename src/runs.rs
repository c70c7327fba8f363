//! Run traces: a run groups the proposals and model turns of one agent
//! working toward an intent, with its outcome (`runs_start`,
//! `runs_record_model_turn`, `runs_complete`, `runs_list`,
//! `runs_get_trace`; the daemon's `runs.*`).
//!
//! A run is kept in memory and, when the runtime has a runs directory
//! (`$CAR_HOME/runs/` for `car-server`), as `<dir>/<run_id>.json`, written
//! (atomically: a temporary file renamed over it) at start, at every turn and
//! at completion, so it outlives the process and every runtime sharing the
//! directory lists it. A run another process started and never completed
//! reads as `incomplete`. Each step is also an event (`RunStarted`,
//! `RunModelTurn`, `RunCompleted`) in the runtime's event log, which
//! [`cost_by_agent`] and [`metrics_summary`] fold.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use chrono::Utc;
use serde_json::{Map, Value, json};

use crate::events::{Event, EventKind};
use crate::{Error, Result};

/// The status of a run that has not completed.
pub const RUNNING: &str = "running";
/// A run another process started and never completed.
pub const INCOMPLETE: &str = "incomplete";

/// One run's record, as `runs_get_trace` returns it.
#[derive(Debug, Clone)]
struct Run {
    doc: Map<String, Value>,
}

impl Run {
    fn id(&self) -> &str {
        self.doc.get("run_id").and_then(Value::as_str).unwrap_or_default()
    }

    fn status(&self) -> &str {
        self.doc.get("status").and_then(Value::as_str).unwrap_or(RUNNING)
    }

    /// The run without its turns and proposals, with their counts.
    fn summary(&self) -> Value {
        let mut s = self.doc.clone();
        let turns = s.remove("turns").and_then(|t| t.as_array().map(Vec::len)).unwrap_or(0);
        let proposals = s.remove("proposals").and_then(|t| t.as_array().map(Vec::len)).unwrap_or(0);
        s.insert("turn_count".into(), json!(turns));
        s.insert("proposal_count".into(), json!(proposals));
        Value::Object(s)
    }
}

/// The runs of one runtime.
#[derive(Debug, Default)]
pub struct RunBook {
    runs: Mutex<BTreeMap<String, Run>>,
    /// The run proposals are attributed to (the last started, until it completes).
    current: Mutex<Option<String>>,
    dir: Mutex<Option<PathBuf>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn obj(params: &Value) -> Result<&Map<String, Value>> {
    params.as_object().ok_or_else(|| Error::invalid_argument("params", "must be a JSON object"))
}

fn opt_str<'a>(o: &'a Map<String, Value>, key: &str) -> Result<Option<&'a str>> {
    match o.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.as_str())),
        Some(other) => Err(Error::invalid_argument(key, format!("must be a string, got {other}"))),
    }
}

fn req_str<'a>(o: &'a Map<String, Value>, key: &str) -> Result<&'a str> {
    opt_str(o, key)?
        .filter(|s| !s.trim().is_empty())
        .ok_or_else(|| Error::invalid_argument(key, "is required (a non-empty string)"))
}

/// A run id or agent id is a file name: letters, digits, `-`, `_`, `.`, `:`
/// (not leading `.`), at most 128 bytes.
fn check_id(key: &str, id: &str) -> Result<()> {
    let ok = !id.is_empty()
        && id.len() <= 128
        && !id.starts_with('.')
        && id.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'));
    if ok {
        Ok(())
    } else {
        Err(Error::invalid_argument(key, format!("`{id}` must be 1-128 of [A-Za-z0-9-_.:], not starting with `.`")))
    }
}

fn synthesized_agent(name: &str) -> String {
    let slug: String =
        name.chars().map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' }).take(64).collect();
    format!("agent-{}", slug.trim_matches('-'))
}

fn now() -> String {
    Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

fn io_err(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::runtime("runs_store_io", format!("runs directory `{}`: {e}", path.display()))
}

impl RunBook {
    /// Keeps every run as `<dir>/<run_id>.json` from now on (`None`: memory only).
    pub fn set_dir(&self, dir: Option<&Path>) -> Result<()> {
        if let Some(d) = dir {
            std::fs::create_dir_all(d).map_err(|e| io_err(d, e))?;
        }
        *lock(&self.dir) = dir.map(Path::to_path_buf);
        Ok(())
    }

    fn persist(&self, run: &Run) -> Result<()> {
        let Some(dir) = lock(&self.dir).clone() else { return Ok(()) };
        let path = dir.join(format!("{}.json", run.id()));
        let tmp = dir.join(format!(".{}.{}.tmp", run.id(), uuid::Uuid::new_v4().simple()));
        let text = serde_json::to_string_pretty(&run.doc).map_err(|e| io_err(&path, e))?;
        std::fs::write(&tmp, text).map_err(|e| io_err(&tmp, e))?;
        std::fs::rename(&tmp, &path).map_err(|e| io_err(&path, e))
    }

    /// The run `id` from memory, else from the directory (another process's,
    /// `incomplete` unless it completed).
    fn load(&self, id: &str) -> Result<Option<Run>> {
        if let Some(r) = lock(&self.runs).get(id) {
            return Ok(Some(r.clone()));
        }
        let Some(dir) = lock(&self.dir).clone() else { return Ok(None) };
        check_id("run_id", id)?;
        let path = dir.join(format!("{id}.json"));
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                let mut doc: Map<String, Value> = serde_json::from_str(&text).map_err(|e| io_err(&path, e))?;
                if doc.get("status").and_then(Value::as_str) == Some(RUNNING) {
                    doc.insert("status".into(), json!(INCOMPLETE));
                }
                Ok(Some(Run { doc }))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_err(&path, e)),
        }
    }

    /// `runs_start {intent, agent_id?, agent_name?, outcome_description?,
    /// idempotency_key?}` → `{run_id, agent_id}` and the event to record.
    /// `forced_agent`: the identity a host assigns (a daemon's agent
    /// connection), which wins over a given `agent_id`.
    pub fn start(&self, params: &Value, forced_agent: Option<&str>) -> Result<(Value, Option<Value>)> {
        let o = obj(params)?;
        let intent = req_str(o, "intent")?;
        let agent_name = opt_str(o, "agent_name")?;
        let agent_id = match (forced_agent, opt_str(o, "agent_id")?.filter(|s| !s.is_empty())) {
            (Some(f), _) => f.to_string(),
            (None, Some(a)) => a.to_string(),
            (None, None) => match (std::env::var("CAR_AGENT_ID").ok().filter(|s| !s.is_empty()), agent_name) {
                (Some(a), _) => a,
                (None, Some(n)) if !n.trim().is_empty() => synthesized_agent(n),
                (None, _) => "anonymous".to_string(),
            },
        };
        check_id("agent_id", &agent_id)?;
        let run_id = match opt_str(o, "idempotency_key")? {
            Some(k) => {
                check_id("idempotency_key", k)?;
                if let Some(existing) = self.load(k)? {
                    // A repeated start: the existing run, not a duplicate.
                    return Ok((
                        json!({"run_id": k, "agent_id": existing.doc.get("agent_id"), "existing": true}),
                        None,
                    ));
                }
                k.to_string()
            }
            None => format!("run-{}", uuid::Uuid::new_v4().simple()),
        };
        let mut doc = Map::new();
        doc.insert("run_id".into(), json!(run_id));
        doc.insert("agent_id".into(), json!(agent_id));
        if let Some(n) = agent_name {
            doc.insert("agent_name".into(), json!(n));
        }
        doc.insert("intent".into(), json!(intent));
        if let Some(d) = opt_str(o, "outcome_description")? {
            doc.insert("outcome_description".into(), json!(d));
        }
        doc.insert("status".into(), json!(RUNNING));
        doc.insert("started_at".into(), json!(now()));
        doc.insert("turns".into(), json!([]));
        doc.insert("proposals".into(), json!([]));
        let run = Run { doc };
        self.persist(&run)?;
        let event = json!({"run_id": run_id, "agent_id": agent_id, "agent_name": agent_name, "intent": intent});
        lock(&self.runs).insert(run_id.clone(), run);
        *lock(&self.current) = Some(run_id.clone());
        Ok((json!({"run_id": run_id, "agent_id": agent_id}), Some(event)))
    }

    /// A run of this runtime that is still running, for a change.
    fn running(&self, o: &Map<String, Value>) -> Result<String> {
        let id = req_str(o, "run_id")?;
        match lock(&self.runs).get(id) {
            Some(r) if r.status() == RUNNING => Ok(id.to_string()),
            Some(r) => Err(Error::config(
                "run_completed",
                format!("run `{id}` already completed ({}); start a new run", r.status()),
                json!({"run_id": id}),
            )),
            None => Err(Error::not_found("run_not_found", format!("no run `{id}` was started on this runtime"))),
        }
    }

    /// `runs_record_model_turn {run_id, turn_index?, assistant_text?,
    /// requested_tool_calls?, model_id?, token_usage?, duration_ms?}` →
    /// `{run_id, turn_index, ok}` and the event (token usage and tool call
    /// names; the text stays in the trace).
    pub fn record_turn(&self, params: &Value) -> Result<(Value, Value)> {
        let o = obj(params)?;
        let id = self.running(o)?;
        let calls = match o.get("requested_tool_calls") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(a)) => a.clone(),
            Some(_) => return Err(Error::invalid_argument("requested_tool_calls", "must be an array")),
        };
        let usage = match o.get("token_usage") {
            None | Some(Value::Null) => Value::Null,
            Some(u @ Value::Object(_)) => u.clone(),
            Some(_) => return Err(Error::invalid_argument("token_usage", "must be an object")),
        };
        let duration = match o.get("duration_ms") {
            None | Some(Value::Null) => 0,
            Some(v) => {
                v.as_u64().ok_or_else(|| Error::invalid_argument("duration_ms", "must be a whole number >= 0"))?
            }
        };
        let model = opt_str(o, "model_id")?.unwrap_or("unknown").to_string();
        let text = opt_str(o, "assistant_text")?.unwrap_or_default().to_string();
        let mut runs = lock(&self.runs);
        let run = runs.get_mut(&id).ok_or_else(|| Error::not_found("run_not_found", format!("no run `{id}`")))?;
        let n = run.doc.get("turns").and_then(Value::as_array).map_or(0, Vec::len) as u64;
        let turn_index = match o.get("turn_index") {
            None | Some(Value::Null) => n + 1,
            Some(v) => {
                v.as_u64().ok_or_else(|| Error::invalid_argument("turn_index", "must be a whole number >= 0"))?
            }
        };
        let turn = json!({
            "turn_index": turn_index, "assistant_text": text, "requested_tool_calls": calls,
            "model_id": model, "token_usage": usage, "duration_ms": duration, "at": now(),
        });
        if let Some(Value::Array(t)) = run.doc.get_mut("turns") {
            t.push(turn);
        }
        let snapshot = run.clone();
        let agent = run.doc.get("agent_id").cloned().unwrap_or(Value::Null);
        drop(runs);
        self.persist(&snapshot)?;
        let names: Vec<Value> = calls.iter().filter_map(|c| c.get("name").cloned()).collect();
        let event = json!({"run_id": id, "agent_id": agent, "turn_index": turn_index, "model_id": model,
                           "token_usage": usage, "duration_ms": duration, "tool_calls": names});
        Ok((json!({"run_id": id, "turn_index": turn_index, "ok": true}), event))
    }

    /// `runs_complete {run_id, outcome: {status, summary?, ...}}` →
    /// `{run_id, ok}` and the event.
    pub fn complete(&self, params: &Value) -> Result<(Value, Value)> {
        let o = obj(params)?;
        let id = self.running(o)?;
        let outcome = match o.get("outcome") {
            Some(Value::Object(m)) => m.clone(),
            _ => return Err(Error::invalid_argument("outcome", "is required: an AgentOutcome object {status, ...}")),
        };
        let status = match outcome.get("status") {
            Some(Value::String(s)) if !s.trim().is_empty() && s != RUNNING => s.clone(),
            _ => return Err(Error::invalid_argument("outcome.status", "is required (a non-empty string)")),
        };
        let mut runs = lock(&self.runs);
        let run = runs.get_mut(&id).ok_or_else(|| Error::not_found("run_not_found", format!("no run `{id}`")))?;
        run.doc.insert("status".into(), json!(status));
        run.doc.insert("completed_at".into(), json!(now()));
        run.doc.insert("outcome".into(), Value::Object(outcome.clone()));
        let snapshot = run.clone();
        let agent = run.doc.get("agent_id").cloned().unwrap_or(Value::Null);
        drop(runs);
        {
            let mut cur = lock(&self.current);
            if cur.as_deref() == Some(id.as_str()) {
                *cur = None;
            }
        }
        self.persist(&snapshot)?;
        Ok((json!({"run_id": id, "ok": true}), json!({"run_id": id, "agent_id": agent, "outcome": outcome})))
    }

    /// The run proposals are attributed to now, when any; records `proposal_id` in it.
    pub fn attribute(&self, proposal_id: &str) -> Option<String> {
        let id = lock(&self.current).clone()?;
        let mut runs = lock(&self.runs);
        let run = runs.get_mut(&id)?;
        if let Some(Value::Array(p)) = run.doc.get_mut("proposals") {
            p.push(json!(proposal_id));
        }
        let snapshot = run.clone();
        drop(runs);
        let _ = self.persist(&snapshot);
        Some(id)
    }

    /// `runs_list {agent_id?, status?, limit?}` → `{count, runs}` newest first
    /// (this runtime's and the directory's), without turns.
    pub fn list(&self, params: &Value, only_agent: Option<&str>) -> Result<Value> {
        let empty = Map::new();
        let o = if params.is_null() { &empty } else { obj(params)? };
        let agent = only_agent.or(opt_str(o, "agent_id")?);
        let status = opt_str(o, "status")?;
        let limit = match o.get("limit") {
            None | Some(Value::Null) => 0,
            Some(v) => {
                v.as_u64().ok_or_else(|| Error::invalid_argument("limit", "must be a whole number >= 0"))? as usize
            }
        };
        let mut all: BTreeMap<String, Run> = BTreeMap::new();
        // Bound first: a guard in the `if let` would live through the loop,
        // and `load` takes the same lock.
        let dir = lock(&self.dir).clone();
        if let Some(dir) = dir
            && let Ok(entries) = std::fs::read_dir(&dir)
        {
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if let Some(id) = name.strip_suffix(".json").filter(|id| !id.starts_with('.'))
                    && let Ok(Some(r)) = self.load(id)
                {
                    all.insert(id.to_string(), r);
                }
            }
        }
        for (id, r) in lock(&self.runs).iter() {
            all.insert(id.clone(), r.clone());
        }
        let mut runs: Vec<Run> = all
            .into_values()
            .filter(|r| agent.is_none_or(|a| r.doc.get("agent_id").and_then(Value::as_str) == Some(a)))
            .filter(|r| status.is_none_or(|s| r.status() == s))
            .collect();
        runs.sort_by(|a, b| {
            let at = |r: &Run| r.doc.get("started_at").and_then(Value::as_str).unwrap_or_default().to_string();
            at(b).cmp(&at(a))
        });
        if limit > 0 {
            runs.truncate(limit);
        }
        let list: Vec<Value> = runs.iter().map(Run::summary).collect();
        Ok(json!({"count": list.len(), "runs": list}))
    }

    /// `runs_get_trace {run_id}` → `{run, events}`: the run with its turns
    /// and proposals, and the events of its proposals and of the run.
    pub fn trace(&self, params: &Value, events: &[Event], only_agent: Option<&str>) -> Result<Value> {
        let o = obj(params)?;
        let id = req_str(o, "run_id")?;
        let run = self.load(id)?.ok_or_else(|| Error::not_found("run_not_found", format!("no run `{id}`")))?;
        if only_agent.is_some_and(|a| run.doc.get("agent_id").and_then(Value::as_str) != Some(a)) {
            return Err(Error::not_found("run_not_found", format!("no run `{id}`")));
        }
        let proposals: Vec<&str> = run
            .doc
            .get("proposals")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let mine: Vec<Value> = events
            .iter()
            .filter(|e| {
                e.proposal_id.as_deref().is_some_and(|p| proposals.contains(&p))
                    || (is_run_event(e.kind) && e.data.to_value().get("run_id").and_then(Value::as_str) == Some(id))
            })
            .map(Event::to_json)
            .collect();
        Ok(json!({"run": Value::Object(run.doc), "events": mine}))
    }
}

fn is_run_event(k: EventKind) -> bool {
    matches!(k, EventKind::RunStarted | EventKind::RunModelTurn | EventKind::RunCompleted)
}

fn num(v: Option<&Value>) -> f64 {
    v.and_then(Value::as_f64).unwrap_or(0.0)
}

/// `event_cost_by_agent`: `[{agent, calls, tokens_in, tokens_out, cost_usd}]`
/// folded from the `RunModelTurn` events (each turn's `token_usage`:
/// `input_tokens`/`prompt_tokens`, `output_tokens`/`completion_tokens`,
/// `cost_usd`), by agent, sorted by agent.
pub fn cost_by_agent(events: &[Event]) -> Value {
    let mut by: BTreeMap<String, (u64, f64, f64, f64)> = BTreeMap::new();
    for e in events.iter().filter(|e| e.kind == EventKind::RunModelTurn) {
        let d = e.data.to_value();
        let agent = d.get("agent_id").and_then(Value::as_str).unwrap_or("anonymous").to_string();
        let u = d.get("token_usage");
        let field = |a: &str, b: &str| num(u.and_then(|u| u.get(a).or_else(|| u.get(b))));
        let row = by.entry(agent).or_default();
        row.0 += 1;
        row.1 += field("input_tokens", "prompt_tokens");
        row.2 += field("output_tokens", "completion_tokens");
        row.3 += num(u.and_then(|u| u.get("cost_usd")));
    }
    Value::Array(
        by.into_iter()
            .map(|(agent, (calls, i, o, c))| {
                json!({"agent": agent, "calls": calls, "tokens_in": i as u64, "tokens_out": o as u64, "cost_usd": c})
            })
            .collect(),
    )
}

fn percentile(sorted: &[f64], p: f64) -> Value {
    if sorted.is_empty() {
        return Value::Null;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    json!(sorted[i.min(sorted.len() - 1)])
}

/// `metrics_summary`: the operational rollup of the events held: proposals,
/// action outcomes with the success and error rates, tool calls, action
/// latency (p50, p95, max), approvals, admission refusals by layer, runs and
/// model turns, and cost (`cost_usd` over the events held,
/// `cumulative_cost_usd` over the runtime's life: it survives retention).
pub fn metrics_summary(events: &[Event], cumulative_cost_usd: f64) -> Value {
    let count = |k: EventKind| events.iter().filter(|e| e.kind == k).count();
    let (ok, failed, rejected, skipped) = (
        count(EventKind::ActionSucceeded),
        count(EventKind::ActionFailed),
        count(EventKind::ActionRejected),
        count(EventKind::ActionSkipped),
    );
    let proposals = count(EventKind::ProposalCompleted);
    let tool_calls: u64 = events
        .iter()
        .filter(|e| e.kind == EventKind::ProposalCompleted)
        .filter_map(|e| e.data.to_value().get("cost").and_then(|c| c.get("tool_calls")).and_then(Value::as_u64))
        .sum();
    let decided = ok + failed;
    let mut latency: Vec<f64> = events
        .iter()
        .filter(|e| matches!(e.kind, EventKind::ActionSucceeded | EventKind::ActionFailed))
        .filter_map(|e| e.data.to_value().get("duration_ms").and_then(Value::as_f64))
        .collect();
    latency.sort_by(f64::total_cmp);
    let mut refused: BTreeMap<String, u64> = BTreeMap::new();
    let (mut asked, mut granted, mut denied_by_approval) = (0u64, 0u64, 0u64);
    for e in events.iter().filter(|e| e.kind == EventKind::AdmissionDecided) {
        let d = e.data.to_value();
        let verdict = d.get("verdict").and_then(Value::as_str).unwrap_or_default();
        let layer = d.get("layer").and_then(Value::as_str).unwrap_or_default();
        match verdict {
            "deny" => {
                *refused.entry(layer.to_string()).or_default() += 1;
                if layer == crate::admission::layer::APPROVAL {
                    denied_by_approval += 1;
                }
            }
            "ask" => asked += 1,
            "allow" if layer == crate::admission::layer::APPROVAL => granted += 1,
            _ => {}
        }
    }
    let costs = cost_by_agent(events);
    let cost: f64 = costs.as_array().into_iter().flatten().map(|r| num(r.get("cost_usd"))).sum();
    let rate = |n: usize| if decided == 0 { Value::Null } else { json!(n as f64 / decided as f64) };
    json!({
        "proposals": proposals,
        "actions": {"succeeded": ok, "failed": failed, "rejected": rejected, "skipped": skipped},
        "success_rate": rate(ok),
        "error_rate": rate(failed),
        "tool_calls": tool_calls,
        "latency_ms": {"p50": percentile(&latency, 0.5), "p95": percentile(&latency, 0.95), "max": latency.last()},
        "approvals": {"asked": asked, "granted": granted, "denied": denied_by_approval},
        "admission_refusals": refused,
        "runs": {"started": count(EventKind::RunStarted), "completed": count(EventKind::RunCompleted),
                 "model_turns": count(EventKind::RunModelTurn)},
        "cost_usd": cost,
        "cumulative_cost_usd": cumulative_cost_usd.max(cost),
        "cost_by_agent": costs,
        "events": events.len(),
        "at": now(),
    })
}

/// The `cost_usd` of one `RunModelTurn` event's data.
pub fn turn_cost(data: &Value) -> f64 {
    num(data.get("token_usage").and_then(|u| u.get("cost_usd")))
}
