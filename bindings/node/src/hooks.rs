//! Host permission hooks (`setPermissionHooks`): JS functions in the
//! permission chain.
//!
//! The chain calls a hook synchronously during admission, on the thread that
//! polls the engine. A runtime with hooks polls its proposals only on tokio
//! workers (see `port.rs`, `worker_only`), so the hook posts the call to the
//! JS thread through a threadsafe function and blocks its worker on the
//! answer; the JS thread is free meanwhile. The `lib.js` shim calls the JS
//! function (awaiting a Promise) and hands the answer back with
//! `_hookAnswer(id, answerJson)`; the translation of the answer into a
//! decision is the core's (`car_runtime::api::permission`). A throw, a
//! rejected Promise, an answer that is not JSON, no answer within
//! [`HOOK_TIMEOUT`], or a call that would block the JS thread itself all deny.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{SyncSender, sync_channel};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};
use std::time::Duration;

use napi::threadsafe_function::{ThreadsafeFunction, ThreadsafeFunctionCallMode};
use napi_derive::napi;
use serde_json::{Value, json};

/// How long the engine waits for one hook's answer before denying.
pub(crate) const HOOK_TIMEOUT: Duration = Duration::from_secs(30);

/// The shim's hook dispatcher `(callJson) => void`, weak: it does not keep
/// the event loop alive (a pending proposal does).
pub(crate) type HookCallFn =
    ThreadsafeFunction<String, napi::bindgen_prelude::Unknown<'static>, String, napi::Status, false, true>;

/// The slot `can_use_tool` is called with (hooks count up from 0).
pub(crate) const CAN_USE_TOOL_SLOT: i64 = -1;

type Pending = HashMap<u32, SyncSender<Option<String>>>;

fn pending() -> MutexGuard<'static, Pending> {
    static PENDING: OnceLock<Mutex<Pending>> = OnceLock::new();
    PENDING.get_or_init(Default::default).lock().unwrap_or_else(PoisonError::into_inner)
}

static NEXT_CALL: AtomicU32 = AtomicU32::new(1);

/// Calls JS hook `slot` with `(tool, input)` and waits for its answer as
/// JSON; `None` (deny) on any failure, on timeout, or when called on a JS
/// thread (it would wait on itself).
pub(crate) fn ask(call: &HookCallFn, slot: i64, tool: &str, input: &Value) -> Option<Value> {
    if crate::port::on_js_thread() {
        return None;
    }
    let id = NEXT_CALL.fetch_add(1, Ordering::Relaxed);
    let (tx, rx) = sync_channel(1);
    pending().insert(id, tx);
    let text = json!({"id": id, "slot": slot, "tool": tool, "input": input}).to_string();
    let answer = if call.call(text, ThreadsafeFunctionCallMode::NonBlocking) == napi::Status::Ok {
        rx.recv_timeout(HOOK_TIMEOUT).ok().flatten()
    } else {
        None
    };
    pending().remove(&id);
    serde_json::from_str(&answer?).ok()
}

/// The shim's answer to hook call `id`: the answer as JSON text, or null
/// when the function threw, its Promise rejected or the answer is not JSON.
#[napi(js_name = "_hookAnswer")]
pub fn hook_answer(id: u32, answer_json: Option<String>) {
    if let Some(tx) = pending().remove(&id) {
        // The engine may have stopped waiting (a timeout).
        let _ = tx.try_send(answer_json);
    }
}
