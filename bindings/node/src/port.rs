//! Running a proposal with JS tools: the engine's future is polled on the JS
//! thread, and tool calls travel to JS and back in batches.
//!
//! Why on the JS thread: a JS tool can only run there, so an engine on a
//! worker thread pays two thread hops per tool call (and per chained action),
//! plus napi's promise machinery per call. Here a proposal is a *port*: its
//! future is polled on the JS thread; every tool call the engine dispatches
//! during a poll is queued on the port, and when the poll returns the whole
//! queue goes to JS as one text (one call JSON per line). The JS shim calls
//! the tool function for each line and hands all answers back in one
//! `_answer(port, answers)` call (synchronous answers at once, Promise answers
//! as they settle, batched per microtask), which wakes the engine and polls it
//! again. No JS runs while the engine is polled, so a tool may call back into
//! the same runtime (`stateSet`, even `executeProposal`) without deadlock.
//!
//! What the engine waits on besides JS (per-attempt timeouts, rate limits,
//! built-in tools on tokio's blocking pool) runs on napi's tokio runtime and
//! wakes the port from another thread: the wake-up is posted to the JS thread
//! through one threadsafe function per JS environment (the *dispatcher*),
//! which is referenced (keeps Node alive) only while some port is pending.
//! Waiting never holds the event loop; a poll that keeps being woken yields
//! to the event loop after [`SLICE`] (and the shim yields after a few
//! milliseconds of answering synchronous tools).
//!
//! Heavy polls go to a tokio worker: the task (future and port) is *shipped*
//! there and comes back through the dispatcher (`Msg::Back`) when the poll is
//! pending again or done. A proposal whose text is larger than
//! [`WORKER_ABOVE_BYTES`] is first polled there (parsing and admitting
//! thousands of actions), and so is a batch of more than
//! [`WORKER_ABOVE_ANSWERS`] answers (completing thousands of actions). A
//! light poll, such as a chain's single answer, runs right on the JS thread
//! with no thread hop. While a task is away, answers still reach its calls
//! and its wake-ups are seen by the worker's loop or at the hand-back.
//!
//! Detached (streaming / long-running) calls use the same queue: the tool
//! function gets a second argument `{detached: true, signal}` and may return
//! an (async) iterator of chunks, which the shim pushes with `_streamPush`;
//! `toolCancel` aborts `signal` through the dispatcher.

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use car_runtime::api::callback::parse_tool_output;
use car_runtime::engine::{CancelToken, ChunkStream, ToolCall, ToolExecutor};
use car_runtime::ir::{ToolFailure, ToolStreamChunk};
use futures::channel::{mpsc, oneshot};
use futures::stream::Stream;
use napi::bindgen_prelude::{Function, within_runtime_if_available};
use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi::{Env, sys};
use napi_derive::napi;
use serde_json::Value;

/// How long one drive of a port may keep polling a future that wakes itself
/// before yielding to the event loop.
const SLICE: Duration = Duration::from_millis(2);

/// What the JS side receives: tool calls to run, the end of a proposal, or a
/// detached tool to cancel.
#[napi(object)]
#[derive(Default)]
pub struct Step {
    /// The port (one per executing proposal).
    pub port: u32,
    /// The id of the first call in `calls`; the next lines count up from it.
    pub first: u32,
    /// Tool calls, one per line: the call JSON, prefixed with `s<stream id> `
    /// for a detached call.
    pub calls: Option<String>,
    /// The ProposalResult JSON text, once done.
    pub result: Option<String>,
    /// The failure, as the structured record `{"car_error": {code, family,
    /// message, details}}` (JSON text), once done.
    pub error: Option<String>,
    /// A detached call whose stream was cancelled or dropped.
    pub cancel: Option<u32>,
}

enum Msg {
    /// A port was woken off the JS thread.
    Wake(u32),
    /// A detached call's stream is gone: tell its JS iterator to stop.
    Cancel(u32),
    /// A task polled on a worker comes back: done, or pending with calls queued.
    Back(Task, Option<Result<String, car_runtime::Error>>),
}

type DispatchFn = ThreadsafeFunction<Msg, (), Option<Step>, napi::Status, false, true>;

/// The per-environment channel to the JS thread.
struct Dispatcher {
    tsfn: DispatchFn,
}

impl Dispatcher {
    fn post(&self, m: Msg) {
        // Non-blocking on an unbounded queue: only fails once the environment is gone.
        let _ = self.tsfn.call(m, ThreadsafeFunctionCallMode::NonBlocking);
    }
}

/// A JS tool's answer.
enum Answer {
    Value(Value),
    /// It came after the attempt's deadline: discarded, the engine's timer
    /// fails the attempt (as the Python and UniFFI pumps do).
    Late,
    /// A detached call's iterator started; chunks follow through `_streamPush`.
    Started,
    Fail(ToolFailure),
}

#[derive(Default)]
struct Queue {
    next: u32,
    first_unsent: u32,
    text: String,
    /// Each call's answer slot and its attempt's deadline.
    pending: HashMap<u32, (oneshot::Sender<Answer>, Option<chrono::DateTime<chrono::Utc>>)>,
}

/// The shared half of a port: its call queue and wake-up state.
struct Port {
    id: u32,
    queue: Mutex<Queue>,
    woken: AtomicBool,
    driving: AtomicBool,
    posted: AtomicBool,
    dispatcher: Arc<Dispatcher>,
    /// Polled only on tokio workers, never on the JS thread: the runtime has
    /// host permission hooks, which block the polling thread on JS.
    worker_only: bool,
}

impl Port {
    fn schedule(&self) {
        if !self.driving.load(Ordering::SeqCst) && !self.posted.swap(true, Ordering::SeqCst) {
            self.dispatcher.post(Msg::Wake(self.id));
        }
    }

    /// Queues a call; its answer arrives on the returned receiver.
    fn enqueue(&self, call: &ToolCall, stream: Option<u32>) -> oneshot::Receiver<Answer> {
        let (tx, rx) = oneshot::channel();
        {
            let mut q = self.queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let id = q.next;
            q.next = q.next.wrapping_add(1);
            if let Some(sid) = stream {
                q.text.push('s');
                q.text.push_str(&sid.to_string());
                q.text.push(' ');
            }
            // serde_json escapes control characters, so a call is one line.
            q.text.push_str(&call.to_json());
            q.text.push('\n');
            q.pending.insert(id, (tx, call.deadline));
        }
        // Calls are queued while the engine is polled on the JS thread and
        // collected when the poll returns; one queued from elsewhere wakes the port.
        self.schedule();
        rx
    }

    fn take_calls(&self) -> Option<(u32, String)> {
        let mut q = self.queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if q.text.is_empty() {
            return None;
        }
        let first = q.first_unsent;
        q.first_unsent = q.next;
        Some((first, std::mem::take(&mut q.text)))
    }
}

impl Wake for Port {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::SeqCst);
        self.schedule();
    }
}

/// The proposal's future (`Send`: heavy polls run on a tokio worker).
pub(crate) type ResultFuture = Pin<Box<dyn Future<Output = Result<String, car_runtime::Error>> + Send>>;

/// A proposal whose JSON text is larger than this is first polled on a tokio
/// worker: parsing it and admitting thousands of actions would hold the event
/// loop for tens of milliseconds.
pub(crate) const WORKER_ABOVE_BYTES: usize = 32 * 1024;

/// Answers delivered together beyond this many are processed by polling on a
/// tokio worker: completing thousands of actions at once is heavy too. A
/// single answer (a chain) is processed right here, with no thread hop.
const WORKER_ABOVE_ANSWERS: usize = 64;

struct Task {
    port: Arc<Port>,
    fut: ResultFuture,
}

type Outcome = Result<String, car_runtime::Error>;

/// The JS thread's ports.
struct Local {
    env: sys::napi_env,
    dispatcher: Arc<Dispatcher>,
    /// Ports whose future is here.
    tasks: HashMap<u32, Task>,
    /// Ports whose future is being polled on a tokio worker.
    away: HashMap<u32, Arc<Port>>,
}

impl Local {
    fn pending(&self) -> bool {
        !self.tasks.is_empty() || !self.away.is_empty()
    }
}

thread_local! {
    static LOCAL: RefCell<Option<Local>> = const { RefCell::new(None) };
}

static NEXT_PORT: AtomicU32 = AtomicU32::new(1);
static NEXT_STREAM: AtomicU32 = AtomicU32::new(1);

fn tokio_handle() -> tokio::runtime::Handle {
    static HANDLE: OnceLock<tokio::runtime::Handle> = OnceLock::new();
    HANDLE.get_or_init(|| within_runtime_if_available(tokio::runtime::Handle::current)).clone()
}

fn js_err(message: impl Into<String>) -> napi::Error<String> {
    crate::to_js_err(car_runtime::Error::runtime("invalid_state", message))
}

/// Installs the dispatcher of this JS environment (called once by `lib.js`).
#[napi(js_name = "_init")]
pub fn init(env: Env, dispatch: Function<'_, Option<Step>, ()>) -> crate::Result<()> {
    let tsfn = dispatch
        .build_threadsafe_function::<Msg>()
        .weak::<true>()
        .build_callback(|ctx: napi::threadsafe_function::ThreadsafeCallContext<Msg>| {
            Ok(match ctx.value {
                Msg::Wake(port) => match find(port) {
                    Some((p, true)) => {
                        p.posted.store(false, Ordering::SeqCst);
                        drive(port)
                    }
                    // Away: the worker's loop sees the wake.
                    Some((p, false)) => {
                        p.posted.store(false, Ordering::SeqCst);
                        None
                    }
                    None => None,
                },
                Msg::Cancel(sid) => Some(Step { cancel: Some(sid), ..Step::default() }),
                Msg::Back(task, outcome) => back(task, outcome),
            })
        })
        .map_err(|e| js_err(format!("cannot create the tool dispatcher: {e}")))?;
    let local = Local {
        env: env.raw(),
        dispatcher: Arc::new(Dispatcher { tsfn }),
        tasks: HashMap::new(),
        away: Default::default(),
    };
    LOCAL.with(|l| *l.borrow_mut() = Some(local));
    Ok(())
}

/// Keeps Node alive while a port is pending.
fn set_ref(local: &Local, on: bool) {
    let raw = local.dispatcher.tsfn.raw();
    // SAFETY: called on the environment's own thread with its env; the
    // threadsafe function lives as long as `local`.
    unsafe {
        if on {
            sys::napi_ref_threadsafe_function(local.env, raw);
        } else {
            sys::napi_unref_threadsafe_function(local.env, raw);
        }
    }
}

/// A port of this thread, and whether its future is here (not on a worker).
fn find(port: u32) -> Option<(Arc<Port>, bool)> {
    LOCAL.with(|l| {
        let l = l.borrow();
        let l = l.as_ref()?;
        match l.tasks.get(&port) {
            Some(t) => Some((t.port.clone(), true)),
            None => l.away.get(&port).map(|p| (p.clone(), false)),
        }
    })
}

fn panic_error(p: Box<dyn std::any::Any + Send>) -> car_runtime::Error {
    let what = p
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_string());
    car_runtime::Error::runtime("internal_error", format!("the engine panicked: {what}"))
}

/// Polls until the future is done, or pending and not woken (or `budget` is spent).
/// The caller has set `driving`.
fn poll_task(task: &mut Task, budget: Option<Duration>) -> Option<Outcome> {
    let waker = Waker::from(task.port.clone());
    let mut cx = Context::from_waker(&waker);
    let began = Instant::now();
    loop {
        task.port.woken.store(false, Ordering::SeqCst);
        // A panic must not unwind into Node: it ends this proposal instead.
        let polled = std::panic::catch_unwind(AssertUnwindSafe(|| task.fut.as_mut().poll(&mut cx)))
            .unwrap_or_else(|p| Poll::Ready(Err(panic_error(p))));
        if let Poll::Ready(r) = polled {
            return Some(r);
        }
        if !task.port.woken.load(Ordering::SeqCst) || budget.is_some_and(|b| began.elapsed() >= b) {
            return None;
        }
    }
}

/// Hands the task to a tokio worker to poll; it comes back as `Msg::Back`.
/// The caller has set `driving` and keeps the port in `away`.
fn ship(mut task: Task) {
    tokio_handle().spawn(async move {
        let outcome = poll_task(&mut task, None);
        let dispatcher = task.port.dispatcher.clone();
        dispatcher.post(Msg::Back(task, outcome));
    });
}

/// A task is back from a worker (on the JS thread).
fn back(task: Task, outcome: Option<Outcome>) -> Option<Step> {
    let id = task.port.id;
    LOCAL.with(|l| {
        if let Some(l) = l.borrow_mut().as_mut() {
            l.away.remove(&id);
            if outcome.is_none() {
                l.tasks.insert(id, task);
            }
        }
    });
    match outcome {
        Some(r) => Some(done(id, r)),
        // A wake after the worker's last poll is seen here; then the calls go out.
        None => drive(id),
    }
}

fn done(id: u32, r: Outcome) -> Step {
    LOCAL.with(|l| {
        if let Some(l) = l.borrow_mut().as_mut()
            && !l.pending()
        {
            set_ref(l, false);
        }
    });
    let mut step = Step { port: id, ..Step::default() };
    match r {
        Ok(text) => step.result = Some(text),
        Err(e) => step.error = Some(crate::car_error_record(&e)),
    }
    step
}

/// True on a thread that runs JS (one with ports), where nothing may block
/// on JS.
pub(crate) fn on_js_thread() -> bool {
    LOCAL.with(|l| l.try_borrow().map_or(true, |l| l.is_some()))
}

/// Starts a proposal on a new port: polled here right away, or first on a
/// tokio worker when `on_worker`; only ever on tokio workers when
/// `worker_only` (which implies `on_worker`).
pub(crate) fn start(
    on_worker: bool,
    worker_only: bool,
    make: impl FnOnce(Arc<dyn ToolExecutor>) -> ResultFuture,
) -> crate::Result<Step> {
    let on_worker = on_worker || worker_only;
    let dispatcher = LOCAL
        .with(|l| l.borrow().as_ref().map(|l| l.dispatcher.clone()))
        .ok_or_else(|| js_err("the tool dispatcher is not installed; load the package through its main module"))?;
    let id = NEXT_PORT.fetch_add(1, Ordering::Relaxed);
    let port = Arc::new(Port {
        id,
        queue: Mutex::new(Queue::default()),
        woken: AtomicBool::new(false),
        driving: AtomicBool::new(on_worker),
        posted: AtomicBool::new(false),
        dispatcher,
        worker_only,
    });
    let fut = make(Arc::new(JsExecutor { port: port.clone() }));
    let task = Task { port, fut };
    let task = LOCAL.with(|l| {
        let mut l = l.borrow_mut();
        let Some(l) = l.as_mut() else { return Some(task) };
        if !l.pending() {
            set_ref(l, true);
        }
        if on_worker {
            l.away.insert(id, task.port.clone());
            Some(task)
        } else {
            l.tasks.insert(id, task);
            None
        }
    });
    if let Some(task) = task {
        ship(task);
        return Ok(Step { port: id, ..Step::default() });
    }
    Ok(drive(id).unwrap_or(Step { port: id, ..Step::default() }))
}

/// Polls a port's future on the JS thread; what JS must do next, if anything.
fn drive(id: u32) -> Option<Step> {
    let mut task = LOCAL.with(|l| l.borrow_mut().as_mut().and_then(|l| l.tasks.remove(&id)))?;
    let port = task.port.clone();
    if port.worker_only {
        return drive_away(id, task);
    }
    let handle = tokio_handle();
    let _runtime = handle.enter();
    let began = Instant::now();
    let outcome = loop {
        port.driving.store(true, Ordering::SeqCst);
        let left = SLICE.saturating_sub(began.elapsed());
        if let Some(r) = poll_task(&mut task, Some(left)) {
            port.driving.store(false, Ordering::SeqCst);
            break Some(r);
        }
        port.driving.store(false, Ordering::SeqCst);
        // A wake between the last poll and here saw `driving` and posted nothing.
        if port.woken.load(Ordering::SeqCst) {
            if began.elapsed() < SLICE {
                continue;
            }
            port.schedule();
        }
        break None;
    };
    match outcome {
        Some(r) => Some(done(id, r)),
        None => {
            let calls = port.take_calls();
            LOCAL.with(|l| {
                if let Some(l) = l.borrow_mut().as_mut() {
                    l.tasks.insert(id, task);
                }
            });
            calls.map(|(first, text)| Step { port: id, first, calls: Some(text), ..Step::default() })
        }
    }
}

/// [`drive`] for a `worker_only` port: hands JS the calls queued and ships
/// the future to a worker again when it was woken.
fn drive_away(id: u32, task: Task) -> Option<Step> {
    let port = task.port.clone();
    port.driving.store(true, Ordering::SeqCst);
    let calls = port.take_calls();
    if port.woken.load(Ordering::SeqCst) {
        LOCAL.with(|l| {
            if let Some(l) = l.borrow_mut().as_mut() {
                l.away.insert(id, port.clone());
            }
        });
        ship(task);
    } else {
        LOCAL.with(|l| {
            if let Some(l) = l.borrow_mut().as_mut() {
                l.tasks.insert(id, task);
            }
        });
        port.driving.store(false, Ordering::SeqCst);
        // A wake between the check above and here saw `driving` and posted nothing.
        if port.woken.load(Ordering::SeqCst) {
            port.schedule();
        }
    }
    calls.map(|(first, text)| Step { port: id, first, calls: Some(text), ..Step::default() })
}

fn deliver(p: &Port, list: Vec<(u32, u8, Value)>) {
    let mut q = p.queue.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    for (id, kind, payload) in list {
        let Some((tx, deadline)) = q.pending.remove(&id) else { continue };
        // Stamped as it arrives: a synchronous tool holds the JS thread, so
        // its answer can reach the engine before the engine sees its timer.
        if deadline.is_some_and(|d| chrono::Utc::now() >= d) {
            let _ = tx.send(Answer::Late);
            continue;
        }
        let message = |v: Value| match v {
            Value::String(s) => s,
            other => other.to_string(),
        };
        let a = match kind {
            0 => Answer::Value(payload),
            1 => Answer::Value(match &payload {
                Value::String(s) => parse_tool_output(s),
                _ => payload,
            }),
            3 => Answer::Fail(ToolFailure::terminal(message(payload))),
            4 => Answer::Started,
            5 => Answer::Fail(ToolFailure::model_retry(message(payload))),
            _ => Answer::Fail(ToolFailure::ordinary(message(payload))),
        };
        // The engine may have stopped waiting (a timeout, an abort).
        let _ = tx.send(a);
    }
}

/// Delivers a batch of answers `[[call id, kind, payload], ...]` and polls the port.
/// Kinds: 0 a JSON value, 1 JSON text (or plain text), 2 an ordinary failure
/// message, 3 a terminal failure message, 4 a detached call's stream started,
/// 5 a model-recoverable failure message (`ModelRetry`).
#[napi(js_name = "_answer")]
pub fn answer(port: u32, answers: String) -> crate::Result<Option<Step>> {
    let list: Vec<(u32, u8, Value)> =
        serde_json::from_str(&answers).map_err(|e| js_err(format!("malformed tool answers from the JS shim: {e}")))?;
    let Some((p, here)) = find(port) else { return Ok(None) };
    if here {
        // Polled right below (or shipped): answering must not post a wake-up too.
        p.driving.store(true, Ordering::SeqCst);
        let many = list.len() > WORKER_ABOVE_ANSWERS || p.worker_only;
        deliver(&p, list);
        if many {
            let task = LOCAL.with(|l| {
                let mut l = l.borrow_mut();
                let l = l.as_mut()?;
                let t = l.tasks.remove(&port)?;
                l.away.insert(port, t.port.clone());
                Some(t)
            });
            if let Some(task) = task {
                ship(task);
            }
            return Ok(None);
        }
        return Ok(drive(port));
    }
    // Away: the worker's loop (or the hand-back) sees the wake-ups.
    deliver(&p, list);
    Ok(None)
}

/// The JS half of a detached call, while its iterator may still push chunks.
static STREAMS: OnceLock<Mutex<HashMap<u32, mpsc::UnboundedSender<ToolStreamChunk>>>> = OnceLock::new();

fn streams() -> std::sync::MutexGuard<'static, HashMap<u32, mpsc::UnboundedSender<ToolStreamChunk>>> {
    STREAMS.get_or_init(Default::default).lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Pushes one chunk (JSON text `{kind, ...}`) of a detached call; false when
/// its stream is gone (cancelled, finished or never started), so the
/// iterator should stop. A chunk that is not a valid `ToolStreamChunk` fails the stream.
#[napi(js_name = "_streamPush")]
pub fn stream_push(stream: u32, chunk_json: String) -> bool {
    let mut s = streams();
    let Some(tx) = s.get(&stream) else { return false };
    let (chunk, ok) = match serde_json::from_str::<ToolStreamChunk>(&chunk_json) {
        Ok(c) => (c, true),
        Err(e) => (ToolStreamChunk::Error { message: format!("the tool yielded an invalid stream chunk: {e}") }, false),
    };
    let terminal = chunk.is_terminal();
    let sent = tx.unbounded_send(chunk).is_ok();
    if terminal || !sent {
        s.remove(&stream);
    }
    sent && ok && !terminal
}

/// Ends a detached call's stream (its iterator finished).
#[napi(js_name = "_streamEnd")]
pub fn stream_end(stream: u32) {
    streams().remove(&stream);
}

/// Removes the stream and tells JS to stop its iterator when the engine
/// drops the stream (cancelled, or the start timed out).
struct StreamGuard {
    id: u32,
    dispatcher: Arc<Dispatcher>,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        if streams().remove(&self.id).is_some() {
            self.dispatcher.post(Msg::Cancel(self.id));
        }
    }
}

struct JsStream {
    rx: mpsc::UnboundedReceiver<ToolStreamChunk>,
    _guard: StreamGuard,
}

impl Stream for JsStream {
    type Item = ToolStreamChunk;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<ToolStreamChunk>> {
        Pin::new(&mut self.rx).poll_next(cx)
    }
}

/// The engine's executor for one port.
struct JsExecutor {
    port: Arc<Port>,
}

fn dropped() -> ToolFailure {
    ToolFailure::ordinary("tool callback was dropped before it answered")
}

#[async_trait]
impl ToolExecutor for JsExecutor {
    async fn execute(&self, call: ToolCall) -> Result<Value, ToolFailure> {
        match self.port.enqueue(&call, None).await.map_err(|_| dropped())? {
            Answer::Late => std::future::pending().await,
            Answer::Value(v) => Ok(v),
            Answer::Fail(f) => Err(f),
            Answer::Started => Err(ToolFailure::ordinary(format!(
                "tool '{}' returned a stream for a one_shot call; set the action's invocation_mode to `streaming` or `long_running`",
                call.tool
            ))),
        }
    }

    async fn execute_stream(&self, call: ToolCall, cancel: CancelToken) -> Result<ChunkStream, ToolFailure> {
        let _ = cancel; // the drain drops the stream on cancel; the guard tells JS
        let sid = NEXT_STREAM.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = mpsc::unbounded();
        streams().insert(sid, tx);
        let guard = StreamGuard { id: sid, dispatcher: self.port.dispatcher.clone() };
        let answer = self.port.enqueue(&call, Some(sid)).await.map_err(|_| dropped())?;
        match answer {
            Answer::Started => {}
            Answer::Late => return std::future::pending().await,
            // A plain value is the whole result.
            Answer::Value(v) => {
                if let Some(tx) = streams().remove(&sid) {
                    let _ = tx.unbounded_send(ToolStreamChunk::Done { result: (!v.is_null()).then_some(v) });
                }
            }
            Answer::Fail(f) => return Err(f),
        }
        Ok(Box::pin(JsStream { rx, _guard: guard }))
    }
}
