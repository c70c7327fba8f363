//! Adapters from foreign tool callbacks to the engine's [`ToolExecutor`].
//!
//! The bindings hand the runtime a callback that receives the call JSON text
//! `{"tool","params","action_id","request_id","timeout_ms","session_id","attempt"}`
//! and answers with the result as JSON text. These adapters hold the shared
//! rules, so every binding treats callback answers the same way:
//! - the answer is parsed as JSON; text that is not JSON is the string itself;
//! - a callback failure is an ordinary failure unless the binding says it was
//!   terminal (never inferred from the message);
//! - a blocking callback runs on a dedicated blocking thread, never on an
//!   async worker, so it may call back into the same runtime;
//! - a [`CallPump`] instead runs the engine on the calling (foreign) thread
//!   and serves its tool calls there, in batches, between polls: no thread
//!   hand-off per call, and callbacks still run outside any async context.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::Value;
use tokio::sync::oneshot;

use crate::engine::{ToolCall, ToolExecutor};
use crate::ir::ToolFailure;

/// The value of a callback's answer: JSON text parsed, anything else kept as a string.
pub fn parse_tool_output(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.to_string()))
}

/// Appends `s` as a JSON string literal.
fn push_json_str(out: &mut String, s: &str) {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.push('"');
        out.push_str(s);
        out.push('"');
    } else {
        out.push_str(&Value::from(s).to_string());
    }
}

/// The callback JSON text of a call, the same text as [`ToolCall::to_json`]
/// (`{"tool","params","action_id","request_id","timeout_ms","session_id","attempt"}`),
/// built directly: the keys need no escaping and the values rarely do.
pub fn call_json(call: &ToolCall) -> String {
    use std::fmt::Write;
    let params = call.params.to_string();
    let mut out = String::with_capacity(
        112 + call.tool.len()
            + params.len()
            + call.action_id.len()
            + call.request_id.len()
            + call.session_id.as_ref().map_or(0, String::len),
    );
    out.push_str("{\"tool\":");
    push_json_str(&mut out, &call.tool);
    out.push_str(",\"params\":");
    out.push_str(&params);
    out.push_str(",\"action_id\":");
    push_json_str(&mut out, &call.action_id);
    out.push_str(",\"request_id\":");
    push_json_str(&mut out, &call.request_id);
    out.push_str(",\"timeout_ms\":");
    match call.timeout_ms {
        Some(t) => {
            let _ = write!(out, "{t}");
        }
        None => out.push_str("null"),
    }
    out.push_str(",\"session_id\":");
    match &call.session_id {
        Some(sid) => push_json_str(&mut out, sid),
        None => out.push_str("null"),
    }
    let _ = write!(out, ",\"attempt\":{}", call.attempt);
    if let Some(cwd) = &call.cwd {
        out.push_str(",\"cwd\":");
        push_json_str(&mut out, cwd);
    }
    if let Some(iso) = &call.isolation {
        out.push_str(",\"isolation\":");
        out.push_str(&iso.to_string());
    }
    if let Some(d) = &call.deadline {
        out.push_str(",\"deadline\":");
        out.push_str(&serde_json::to_value(d).unwrap_or(Value::Null).to_string());
    }
    out.push('}');
    out
}

/// Decodes the envelope the JS and Python shims produce around a callback:
/// `{"ok": "<result JSON text>"}` or `{"error": "...", "terminal": bool,
/// "model_retry": bool}`.
pub fn decode_envelope(text: &str) -> Result<Value, ToolFailure> {
    let v: Value = serde_json::from_str(text)
        .map_err(|e| ToolFailure::ordinary(format!("tool callback returned a malformed envelope: {e}")))?;
    if let Some(ok) = v.get("ok") {
        return Ok(match ok {
            Value::String(s) => parse_tool_output(s),
            other => other.clone(),
        });
    }
    let message = v.get("error").and_then(Value::as_str).unwrap_or("tool callback failed").to_string();
    if v.get("terminal").and_then(Value::as_bool).unwrap_or(false) {
        Err(ToolFailure::terminal(message))
    } else if v.get("model_retry").and_then(Value::as_bool).unwrap_or(false) {
        Err(ToolFailure::model_retry(message))
    } else {
        Err(ToolFailure::ordinary(message))
    }
}

/// A blocking callback: the call JSON text in, the answer text or a failure out.
pub type BlockingToolFn = dyn Fn(String) -> Result<String, ToolFailure> + Send + Sync;

/// Runs a blocking foreign callback on tokio's blocking pool for every call.
pub struct BlockingCallbackExecutor {
    f: Arc<BlockingToolFn>,
}

impl BlockingCallbackExecutor {
    /// Wraps a callback.
    pub fn new(f: Arc<BlockingToolFn>) -> Self {
        BlockingCallbackExecutor { f }
    }
}

#[async_trait]
impl ToolExecutor for BlockingCallbackExecutor {
    async fn execute(&self, call: ToolCall) -> Result<Value, ToolFailure> {
        let f = self.f.clone();
        let text = call.to_json();
        match tokio::task::spawn_blocking(move || f(text)).await {
            Ok(Ok(answer)) => Ok(parse_tool_output(&answer)),
            Ok(Err(failure)) => Err(failure),
            Err(e) => Err(ToolFailure::ordinary(format!("tool callback panicked: {e}"))),
        }
    }
}

/// How a queued call's answer reaches the engine.
enum Reply {
    /// The callback's result.
    Done(Result<Value, ToolFailure>),
    /// The call's `timeout_ms` passed before it finished (or started): the
    /// engine's own per-attempt timer decides, so the executor never answers.
    Late,
}

/// One tool call waiting in a [`CallPump`] for its foreign thread.
pub struct PumpedCall {
    call: ToolCall,
    queued: Instant,
    reply: oneshot::Sender<Reply>,
}

impl PumpedCall {
    /// The call.
    pub fn call(&self) -> &ToolCall {
        &self.call
    }

    /// True when nobody waits for the answer any more (the engine timed the
    /// attempt out or the run was dropped): the callback need not run.
    pub fn is_abandoned(&self) -> bool {
        self.reply.is_closed()
    }

    /// True when the call's `timeout_ms` has already passed since it was queued.
    pub fn is_expired(&self) -> bool {
        self.call.timeout_ms.is_some_and(|t| self.queued.elapsed() >= Duration::from_millis(t))
    }

    /// Answers the call. A result that arrives after the call's `timeout_ms`
    /// is discarded and the engine records the timeout, as it would have if
    /// it had stopped waiting at the deadline.
    pub fn finish(self, result: Result<Value, ToolFailure>) {
        let reply = if self.is_expired() { Reply::Late } else { Reply::Done(result) };
        let _ = self.reply.send(reply);
    }

    /// Gives the call up without running it because its deadline passed.
    pub fn expire(self) {
        let _ = self.reply.send(Reply::Late);
    }

    /// Answers the call with `run`'s result, the way a binding serves a
    /// queued call: `run` is skipped when nobody waits for the answer any
    /// more, and the call is given up unrun when its deadline already passed.
    pub fn serve(self, run: impl FnOnce(&ToolCall) -> Result<Value, ToolFailure>) {
        if self.is_abandoned() {
            return;
        }
        if self.is_expired() {
            return self.expire();
        }
        let result = run(&self.call);
        self.finish(result);
    }
}

/// Runs a queued call on another thread when the pumping thread is stuck.
pub type SpillFn = dyn Fn(PumpedCall) + Send + Sync;

#[derive(Default)]
struct PumpState {
    calls: VecDeque<PumpedCall>,
    /// The engine future asked to be polled again.
    woken: bool,
    /// The pumping thread waits on the condvar.
    sleeping: bool,
}

#[derive(Default)]
struct PumpShared {
    state: Mutex<PumpState>,
    cv: Condvar,
    /// Calls taken off the queue so far (the watchdog's progress measure).
    taken: AtomicU64,
    /// The pumping thread is inside `serve` (running callbacks).
    serving: AtomicBool,
}

impl PumpShared {
    fn lock(&self) -> MutexGuard<'_, PumpState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Wake for PumpShared {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref()
    }

    fn wake_by_ref(self: &Arc<Self>) {
        let mut s = self.lock();
        s.woken = true;
        if s.sleeping {
            self.cv.notify_one();
        }
    }
}

/// Runs a proposal's engine future on the thread that called it and serves
/// the tool calls it makes on that same thread.
///
/// The thread polls the engine until it waits, then hands every queued call
/// to `serve` (outside any async context, so a callback may call back into
/// the runtime, including running a nested proposal), and polls again. A
/// foreign binding serves a whole batch per lock of its interpreter. Timers
/// and tasks the engine uses keep running on the shared tokio runtime.
///
/// With a spill function, a watchdog moves calls that wait while the thread
/// has been stuck in one callback for two `spill_after` periods to that function (for
/// example a blocking-pool thread), so slow tools that wait on I/O or on each
/// other still overlap as they did with [`BlockingCallbackExecutor`].
pub struct CallPump {
    shared: Arc<PumpShared>,
    spill: Option<(Arc<SpillFn>, Duration)>,
}

struct PumpExecutor {
    shared: Arc<PumpShared>,
}

#[async_trait]
impl ToolExecutor for PumpExecutor {
    async fn execute(&self, call: ToolCall) -> Result<Value, ToolFailure> {
        let (tx, rx) = oneshot::channel();
        {
            let mut s = self.shared.lock();
            s.calls.push_back(PumpedCall { call, queued: Instant::now(), reply: tx });
            if s.sleeping {
                self.shared.cv.notify_one();
            }
        }
        match rx.await {
            Ok(Reply::Done(r)) => r,
            // Past the deadline: the engine's per-attempt timer fires and wins.
            Ok(Reply::Late) => std::future::pending().await,
            Err(_) => Err(ToolFailure::ordinary("tool callback was dropped before it answered")),
        }
    }
}

impl Default for CallPump {
    fn default() -> Self {
        Self::new()
    }
}

impl CallPump {
    /// A pump without spilling: every call runs on the pumping thread.
    pub fn new() -> Self {
        CallPump { shared: Arc::default(), spill: None }
    }

    /// A pump that spills waiting calls to `spill` once the pumping thread
    /// has made no progress for two periods of `after`.
    pub fn with_spill(spill: Arc<SpillFn>, after: Duration) -> Self {
        CallPump { shared: Arc::default(), spill: Some((spill, after)) }
    }

    /// The executor to hand the engine: it queues every call for this pump.
    pub fn executor(&self) -> Arc<dyn ToolExecutor> {
        Arc::new(PumpExecutor { shared: self.shared.clone() })
    }

    /// The next queued call, if any (for `serve`).
    pub fn pop(&self) -> Option<PumpedCall> {
        let c = self.shared.lock().calls.pop_front();
        if c.is_some() {
            self.shared.taken.fetch_add(1, Ordering::Relaxed);
        }
        c
    }

    /// Drives `fut` to completion on this thread within `handle`'s runtime.
    /// Whenever calls are queued, `serve(self)` runs (outside the runtime
    /// context) and should `pop` and answer them; while nothing is queued the
    /// thread sleeps. `idle(self)` runs about every `tick` while the run lasts
    /// (e.g. to notice a signal).
    pub fn drive<F: Future>(
        &self,
        handle: &tokio::runtime::Handle,
        fut: F,
        tick: Duration,
        mut serve: impl FnMut(&Self),
        mut idle: impl FnMut(&Self),
    ) -> F::Output {
        // Started with the first batch of two or more calls: a lone call has
        // nothing waiting behind it (the engine is not polled while it runs).
        let mut _watchdog: Option<AbortOnDrop> = None;
        let waker = Waker::from(self.shared.clone());
        let mut cx = Context::from_waker(&waker);
        let mut fut = std::pin::pin!(fut);
        let mut last_idle = Instant::now();
        loop {
            self.shared.lock().woken = false;
            let polled = {
                let _in_runtime = handle.enter();
                fut.as_mut().poll(&mut cx)
            };
            if let Poll::Ready(out) = polled {
                return out;
            }
            let queued = self.shared.lock().calls.len();
            if queued > 0 {
                if queued > 1
                    && _watchdog.is_none()
                    && let Some((f, after)) = &self.spill
                {
                    let task = handle.spawn(watchdog(self.shared.clone(), f.clone(), *after, handle.clone()));
                    _watchdog = Some(AbortOnDrop(task));
                }
                self.shared.serving.store(true, Ordering::Relaxed);
                serve(self);
                self.shared.serving.store(false, Ordering::Relaxed);
            }
            // `idle` runs at least every `tick`, also when the run never pauses.
            if last_idle.elapsed() >= tick {
                idle(self);
                last_idle = Instant::now();
            }
            let mut s = self.shared.lock();
            while !s.woken && s.calls.is_empty() {
                s.sleeping = true;
                let (g, waited) = self.shared.cv.wait_timeout(s, tick).unwrap_or_else(PoisonError::into_inner);
                s = g;
                s.sleeping = false;
                if waited.timed_out() {
                    drop(s);
                    idle(self);
                    last_idle = Instant::now();
                    s = self.shared.lock();
                }
            }
        }
    }
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Spills the queue when the pumping thread has been inside `serve` without
/// taking a new call for two whole periods.
async fn watchdog(shared: Arc<PumpShared>, spill: Arc<SpillFn>, after: Duration, handle: tokio::runtime::Handle) {
    let mut last = shared.taken.load(Ordering::Relaxed);
    // Periods in a row the thread served without taking a call: two, so a
    // thread that was merely descheduled once does not lose its calls.
    let mut stalled = 0;
    loop {
        tokio::time::sleep(after).await;
        let now = shared.taken.load(Ordering::Relaxed);
        stalled = if now == last && shared.serving.load(Ordering::Relaxed) { stalled + 1 } else { 0 };
        if stalled >= 2 {
            stalled = 0;
            let stuck: Vec<PumpedCall> = shared.lock().calls.drain(..).collect();
            for call in stuck {
                let f = spill.clone();
                handle.spawn_blocking(move || f(call));
            }
        }
        last = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn envelopes_and_outputs() {
        assert_eq!(parse_tool_output(r#"{"a":1}"#), json!({"a": 1}));
        assert_eq!(parse_tool_output("plain words"), json!("plain words"));
        assert_eq!(decode_envelope(r#"{"ok":"{\"x\":2}"}"#).unwrap(), json!({"x": 2}));
        assert_eq!(decode_envelope(r#"{"ok":"not json"}"#).unwrap(), json!("not json"));
        let e = decode_envelope(r#"{"error":"fatal error in tool","terminal":false}"#).unwrap_err();
        assert!(!e.is_terminal(), "terminality is never inferred from the text");
        assert!(decode_envelope(r#"{"error":"x","terminal":true}"#).unwrap_err().is_terminal());
        assert!(decode_envelope("garbage").is_err());
    }

    use crate::engine::{ExecOptions, Runtime, RuntimeOptions};

    #[test]
    fn call_json_is_the_serde_text() {
        let mut call =
            ToolCall::new("deploy", json!({"env": "prod", "n": [1, 2.5, null], "q": "a\"b\\c\n\u{1}é"}), "a1", "req-7");
        assert_eq!(call_json(&call), call.to_json());
        call.deadline = Some(chrono::Utc::now());
        assert_eq!(call_json(&call), call.to_json());
        call.timeout_ms = Some(2500);
        call.session_id = Some("s\"1\t".into());
        call.tool = "we\\ird\u{7f}\u{1f}".into();
        call.action_id = "ü".into();
        call.params = json!({});
        call.attempt = 4_000_000_000;
        assert_eq!(call_json(&call), call.to_json());
        call.cwd = Some("/tmp/wt \"x\"".into());
        call.isolation = Some(json!({"kind": "worktree", "max_kept": 4}));
        assert_eq!(call_json(&call), call.to_json());
        let back: ToolCall = serde_json::from_str(&call_json(&call)).unwrap();
        assert_eq!(back, call);
    }
    use crate::ir::{Action, ActionProposal, ActionStatus};

    fn rt() -> (tokio::runtime::Runtime, Runtime) {
        let tokio_rt = tokio::runtime::Builder::new_multi_thread().worker_threads(1).enable_all().build().unwrap();
        let engine = Runtime::new(RuntimeOptions::default());
        engine.register_tool_name("t").unwrap();
        (tokio_rt, engine)
    }

    /// Runs `proposal` on `engine` with `pump` driving it on this thread and
    /// `serve` answering the calls (a 10 ms tick, nothing to do when idle).
    fn run(
        tokio_rt: &tokio::runtime::Runtime,
        engine: &Runtime,
        pump: &CallPump,
        proposal: ActionProposal,
        serve: impl FnMut(&CallPump),
    ) -> crate::Result<crate::ir::ProposalResult> {
        let fut = engine.execute(proposal, pump.executor(), ExecOptions::default());
        pump.drive(tokio_rt.handle(), fut, Duration::from_millis(10), serve, |_| {})
    }

    fn calls(n: usize, chain: bool, timeout_ms: Option<u64>) -> ActionProposal {
        ActionProposal::new(
            (0..n)
                .map(|i| {
                    let mut a = Action::tool_call("t");
                    a.id = format!("a{i}");
                    a.timeout_ms = timeout_ms;
                    if chain && i > 0 {
                        a.dependencies.push(format!("a{}", i - 1));
                    }
                    a
                })
                .collect(),
        )
    }

    #[test]
    fn pump_serves_every_call_on_the_driving_thread_in_batches() {
        let (tokio_rt, engine) = rt();
        for chain in [false, true] {
            let pump = CallPump::new();
            let me = std::thread::current().id();
            let mut served = 0;
            let mut batches = 0;
            let out = run(&tokio_rt, &engine, &pump, calls(300, chain, None), |p| {
                batches += 1;
                // Outside any runtime context: a callback may block_on a nested run.
                assert!(tokio::runtime::Handle::try_current().is_err());
                while let Some(c) = p.pop() {
                    assert_eq!(std::thread::current().id(), me);
                    served += 1;
                    let id = c.call().action_id.clone();
                    c.finish(Ok(json!({ "id": id })));
                }
            });
            let out = out.unwrap();
            assert_eq!(served, 300);
            assert!(out.results.iter().all(|r| r.status == ActionStatus::Succeeded));
            assert_eq!(out.results[7].output, Some(json!({"id": "a7"})));
            if chain {
                assert_eq!(batches, 300);
            } else {
                assert!(batches < 300, "independent calls are served in batches ({batches} batches)");
            }
        }
    }

    #[test]
    fn an_answer_after_the_deadline_is_a_timeout_and_an_expired_call_is_not_run() {
        let (tokio_rt, engine) = rt();
        let pump = CallPump::new();
        let mut ran = 0;
        let out = run(&tokio_rt, &engine, &pump, calls(2, false, Some(30)), |p| {
            while let Some(c) = p.pop() {
                if c.is_expired() {
                    c.expire();
                    continue;
                }
                ran += 1;
                std::thread::sleep(Duration::from_millis(60));
                c.finish(Ok(json!("late")));
            }
        })
        .unwrap();
        assert_eq!(ran, 1, "the second call waited past its deadline and never ran");
        for r in &out.results {
            assert_eq!(r.status, ActionStatus::Failed);
            assert!(r.error.as_deref().unwrap_or("").contains("timed out after 30 ms"), "{r:?}");
        }
    }

    #[test]
    fn calls_stuck_behind_a_blocked_callback_spill_to_other_threads() {
        let (tokio_rt, engine) = rt();
        let gate = Arc::new((Mutex::new(false), Condvar::new()));
        let g = gate.clone();
        let spill: Arc<SpillFn> = Arc::new(move |c: PumpedCall| {
            let (lock, cv) = &*g;
            *lock.lock().unwrap() = true;
            cv.notify_all();
            c.finish(Ok(json!("spilled")));
        });
        let pump = CallPump::with_spill(spill, Duration::from_millis(2));
        let out = run(&tokio_rt, &engine, &pump, calls(2, false, None), |p| {
            while let Some(c) = p.pop() {
                // Blocks until the other call has run elsewhere.
                let (lock, cv) = &*gate;
                let mut open = lock.lock().unwrap();
                while !*open {
                    open = cv.wait(open).unwrap();
                }
                c.finish(Ok(json!("here")));
            }
        })
        .unwrap();
        let outputs: Vec<_> = out.results.iter().filter_map(|r| r.output.clone()).collect();
        assert_eq!(outputs.len(), 2);
        assert!(outputs.contains(&json!("here")) && outputs.contains(&json!("spilled")));
    }
}
