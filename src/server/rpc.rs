//! JSON-RPC 2.0 framing: classifying inbound frames and building outbound ones.
//!
//! Pure functions of their input, so every malformed shape is unit tested
//! without a socket.

use serde_json::{Map, Value, json};

/// Malformed JSON-RPC (`-32600`).
pub const INVALID_REQUEST: i64 = -32600;
/// Unknown method (`-32601`).
pub const METHOD_NOT_FOUND: i64 = -32601;
/// Invalid params (`-32602`).
pub const INVALID_PARAMS: i64 = -32602;
/// Handler failure (`-32603`).
pub const INTERNAL_ERROR: i64 = -32603;
/// Invalid JSON text (`-32700`, JSON-RPC 2.0's parse error).
pub const PARSE_ERROR: i64 = -32700;
/// Transport auth required; the connection closes (`-32001`).
pub const AUTH_REQUIRED: i64 = -32001;
/// Handler deadline exceeded (`-32004`).
pub const HANDLER_DEADLINE: i64 = -32004;
/// Protocol handshake required (`-32005`).
pub const HANDSHAKE_REQUIRED: i64 = -32005;
/// Protocol version missing, malformed or incompatible (`-32006`).
pub const VERSION_MISMATCH: i64 = -32006;
/// Protocol capability mismatch (`-32008`).
pub const CAPABILITY_MISMATCH: i64 = -32008;

/// A JSON-RPC error object.
#[derive(Debug, Clone, PartialEq)]
pub struct RpcError {
    /// The numeric code.
    pub code: i64,
    /// The human-readable message.
    pub message: String,
    /// Optional structured data.
    pub data: Option<Value>,
}

impl RpcError {
    /// An error with this code and message.
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        RpcError { code, message: message.into(), data: None }
    }

    /// `-32602 invalid params: <detail>`; the detail names the field.
    pub fn invalid_params(detail: impl std::fmt::Display) -> Self {
        RpcError::new(INVALID_PARAMS, format!("invalid params: {detail}"))
    }

    /// `-32600 invalid request: <detail>`.
    pub fn invalid_request(detail: impl std::fmt::Display) -> Self {
        RpcError::new(INVALID_REQUEST, format!("invalid request: {detail}"))
    }

    /// `-32603` with the message as given.
    pub fn internal(message: impl Into<String>) -> Self {
        RpcError::new(INTERNAL_ERROR, message)
    }

    /// `-32601 unknown method: <method>`.
    pub fn unknown_method(method: &str) -> Self {
        RpcError::new(METHOD_NOT_FOUND, format!("unknown method: {method}"))
    }

    /// Adds structured data.
    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    /// The wire object `{code, message, data?}`.
    pub fn to_json(&self) -> Value {
        let mut o = Map::new();
        o.insert("code".into(), json!(self.code));
        o.insert("message".into(), json!(self.message));
        if let Some(d) = &self.data {
            o.insert("data".into(), d.clone());
        }
        Value::Object(o)
    }
}

impl From<crate::Error> for RpcError {
    /// Input errors (a missing or malformed argument) are `-32602` naming the
    /// field; every other family is a handler failure, `-32603`. The facade's
    /// `{code, family, details}` ride in `data`.
    fn from(e: crate::Error) -> Self {
        use crate::error::InputError;
        let data = json!({"code": e.code(), "family": e.family(), "details": e.details()});
        let r = match &e {
            crate::Error::Input(InputError::InvalidArgument { name, message }) => {
                RpcError::invalid_params(format!("{name} {message}"))
            }
            crate::Error::Input(_) => RpcError::invalid_params(&e),
            _ => RpcError::internal(e.to_string()),
        };
        r.with_data(data)
    }
}

/// What an inbound text frame is.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    /// A request (`id` present) or a notification (`id` absent).
    Call {
        /// The id; `None` for a notification.
        id: Option<Value>,
        /// The method name.
        method: String,
        /// The params (`{}` when absent).
        params: Value,
    },
    /// A response to a server-initiated request.
    Response {
        /// The id the server gave its request.
        id: Value,
        /// `Ok(result)` or `Err(error object)`.
        outcome: Result<Value, Value>,
    },
    /// A JSON-RPC batch (an array of frames).
    Batch(Vec<Value>),
    /// Not a valid frame: answer this error to `id` (`null` when unknown).
    Invalid {
        /// The id to answer, `Value::Null` when it could not be read.
        id: Value,
        /// The error.
        error: RpcError,
    },
}

/// Whether a value is a valid JSON-RPC id (string, number or null).
fn valid_id(v: &Value) -> bool {
    matches!(v, Value::String(_) | Value::Number(_) | Value::Null)
}

pub use crate::ir::strict::parse_strict;

/// A repeated key in a frame: `-32600` naming it, to the frame's id when it
/// can be read.
fn duplicate_key(text: &str, e: &serde_json::Error) -> Frame {
    let id = match serde_json::from_str::<Value>(text) {
        Ok(Value::Object(o)) => o.get("id").filter(|id| valid_id(id)).cloned().unwrap_or(Value::Null),
        _ => Value::Null,
    };
    Frame::Invalid { id, error: RpcError::invalid_request(e) }
}

/// A `proposal.submit` request read from its frame's text without a value
/// of its proposal: the proposal's text as it came, which the proposal
/// parser reads as it reads every front end's (refusing a repeated key in
/// any object), and the other params.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SubmitFrame {
    /// The request's id (a string or a number).
    pub(crate) id: Value,
    /// The proposal object's text.
    pub(crate) proposal: String,
    /// `params.session_id`.
    pub(crate) session_id: Option<String>,
}

/// The request when `text` is one well-formed `proposal.submit` request
/// whose params are `{proposal: {..}, session_id?}`, each member once;
/// `None` for every other frame (and for a submit with a `scope` or of any
/// other shape), which [`classify`] reads and, when it is wrong, names what
/// is wrong.
pub(crate) fn submit_frame(text: &str) -> Option<SubmitFrame> {
    use serde_json::value::RawValue;
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Request<'a> {
        jsonrpc: &'a str,
        #[serde(borrow)]
        id: &'a RawValue,
        method: &'a str,
        #[serde(borrow)]
        params: SubmitParams<'a>,
    }
    // A frame nested past the frame reader's limit is refused by that reader.
    if !may_read(text, "\"proposal.submit\"") || too_deep(text) {
        return None;
    }
    let r: Request = serde_json::from_str(text).ok()?;
    if r.jsonrpc != "2.0" || r.method != "proposal.submit" {
        return None;
    }
    let id: Value = serde_json::from_str(r.id.get()).ok()?;
    if !matches!(id, Value::String(_) | Value::Number(_)) {
        return None;
    }
    let proposal = r.params.proposal.get();
    if !proposal.starts_with('{') {
        return None;
    }
    Some(SubmitFrame { id, proposal: proposal.to_string(), session_id: r.params.session_id })
}

/// The response when `text` is one well-formed success response with a
/// string id, `{jsonrpc: "2.0", id, result}` with each member once and no
/// other, read without a value of the frame around its result (the
/// result is read as [`classify`] reads it, refusing a repeated key);
/// `None` for every other frame, which [`classify`] reads and, when it is
/// wrong, names what is wrong. Where both read a frame they agree.
pub(crate) fn response_frame(text: &str) -> Option<Frame> {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Response<'a> {
        jsonrpc: &'a str,
        id: String,
        result: crate::ir::strict::StrictValue,
    }
    if !may_read(text, "\"result\"") {
        return None;
    }
    let r: Response = serde_json::from_str(text).ok()?;
    (r.jsonrpc == "2.0").then(|| Frame::Response { id: Value::String(r.id), outcome: Ok(r.result.0) })
}

/// Whether a one-pass reader ([`submit_frame`], [`response_frame`]) should
/// try `text`: it holds `marker` (a frame without it is not the reader's:
/// not read twice) and is an object (a derived reader would take an array
/// as the struct's members in order). A repeated member is the reader's
/// error, which leaves the frame to [`classify`].
fn may_read(text: &str, marker: &str) -> bool {
    text.contains(marker) && text.trim_start().starts_with('{')
}

/// A submit's params, read in the same pass as the frame: an object (not
/// an array, which a derived reader would take as the members in order)
/// of `proposal` and an optional `session_id`, each once; anything else is
/// an error (the frame goes to [`classify`]).
struct SubmitParams<'a> {
    proposal: &'a serde_json::value::RawValue,
    session_id: Option<String>,
}

impl<'de: 'a, 'a> serde::Deserialize<'de> for SubmitParams<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        use serde::de::{Error as _, MapAccess, Visitor};
        struct Members<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> Visitor<'de> for Members<'a> {
            type Value = SubmitParams<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an object {proposal, session_id?}")
            }
            fn visit_map<M: MapAccess<'de>>(self, mut m: M) -> std::result::Result<Self::Value, M::Error> {
                let (mut proposal, mut session_id) = (None, None);
                // A key with an escape cannot be borrowed: an error too.
                while let Some(key) = m.next_key::<&'de str>()? {
                    match key {
                        "proposal" if proposal.is_none() => proposal = Some(m.next_value()?),
                        "session_id" if session_id.is_none() => session_id = Some(m.next_value::<Option<String>>()?),
                        other => return Err(M::Error::custom(format_args!("member `{other}` repeated or unknown"))),
                    }
                }
                let proposal = proposal.ok_or_else(|| M::Error::missing_field("proposal"))?;
                Ok(SubmitParams { proposal, session_id: session_id.flatten() })
            }
        }
        d.deserialize_map(Members(std::marker::PhantomData))
    }
}

/// Whether a text is nested at least [`FRAME_DEPTH`] deep. Its depth is at
/// most its count of opening brackets, counted first (a loop the compiler
/// vectorizes): only a text with that many is walked.
fn too_deep(text: &str) -> bool {
    let opening = text.bytes().filter(|&b| b == b'[' || b == b'{').count();
    opening >= FRAME_DEPTH && nesting(text) >= FRAME_DEPTH
}

/// The nesting at which serde_json refuses a text (its recursion limit):
/// the frame reader's, which [`submit_frame`] leaves such frames to.
const FRAME_DEPTH: usize = 128;

/// The deepest nesting of arrays and objects in a JSON text (brackets
/// inside strings do not count).
fn nesting(text: &str) -> usize {
    let (mut depth, mut deepest, mut in_str, mut escaped) = (0usize, 0, false, false);
    for &b in text.as_bytes() {
        if in_str {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_str = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_str = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// Classifies one text frame. A repeated key in any object of the frame
/// refuses it (`-32600`), as the proposal text parser refuses a repeated
/// field.
pub fn classify(text: &str) -> Frame {
    let v: Value = match parse_strict(text) {
        Ok(v) => v,
        Err(e) if e.is_data() => return duplicate_key(text, &e),
        Err(e) => {
            return Frame::Invalid { id: Value::Null, error: RpcError::new(PARSE_ERROR, format!("parse error: {e}")) };
        }
    };
    classify_value(v)
}

/// Classifies one parsed frame (also each member of a batch).
pub fn classify_value(v: Value) -> Frame {
    let mut o = match v {
        Value::Object(o) => o,
        Value::Array(items) if !items.is_empty() => return Frame::Batch(items),
        Value::Array(_) => {
            return Frame::Invalid { id: Value::Null, error: RpcError::invalid_request("empty batch") };
        }
        other => {
            return Frame::Invalid {
                id: Value::Null,
                error: RpcError::invalid_request(format!("a frame must be a JSON object, not {}", kind(&other))),
            };
        }
    };
    let id = o.remove("id");
    let reply_id = id.clone().filter(valid_id).unwrap_or(Value::Null);
    let invalid = |msg: String| Frame::Invalid { id: reply_id.clone(), error: RpcError::invalid_request(msg) };
    match o.get("jsonrpc") {
        Some(Value::String(s)) if s == "2.0" => {}
        Some(_) => return invalid("`jsonrpc` must be \"2.0\"".into()),
        None => return invalid("`jsonrpc` is required".into()),
    }
    if let Some(id) = &id
        && !valid_id(id)
    {
        return invalid(format!("`id` must be a string, a number or null, not {}", kind(id)));
    }
    match o.remove("method") {
        Some(Value::String(method)) => {
            if method.is_empty() {
                return invalid("`method` must be a non-empty string".into());
            }
            let params = match o.remove("params") {
                None | Some(Value::Null) => Value::Object(Map::new()),
                Some(p @ (Value::Object(_) | Value::Array(_))) => p,
                Some(other) => return invalid(format!("`params` must be an object or an array, not {}", kind(&other))),
            };
            Frame::Call { id, method, params }
        }
        Some(other) => invalid(format!("`method` must be a string, not {}", kind(&other))),
        None => {
            let (result, error) = (o.remove("result"), o.remove("error"));
            match (id, result, error) {
                (_, Some(_), Some(_)) => invalid("a response carries `result` or `error`, not both".into()),
                (Some(id), Some(r), None) => Frame::Response { id, outcome: Ok(r) },
                (Some(id), None, Some(e @ Value::Object(_))) => Frame::Response { id, outcome: Err(e) },
                (_, None, Some(_)) => invalid("`error` must be an object".into()),
                _ => invalid("`method` is required".into()),
            }
        }
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The canonical string key of an id, for routing responses.
pub fn id_key(id: &Value) -> String {
    match id {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A success response.
pub fn response(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// [`response`] as text, its result already JSON text: byte for byte what
/// [`response`] of that result's value writes.
pub fn response_text(id: &Value, result: &str) -> String {
    let id = id.to_string();
    let mut s = String::with_capacity(result.len() + id.len() + 32);
    s.push_str(r#"{"jsonrpc":"2.0","id":"#);
    s.push_str(&id);
    s.push_str(r#","result":"#);
    s.push_str(result);
    s.push('}');
    s
}

/// An error response.
pub fn error_response(id: &Value, error: &RpcError) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": error.to_json()})
}

/// A server-initiated request.
pub fn request(id: &str, method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
}

/// A notification.
pub fn notification(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": method, "params": params})
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Brackets inside strings (escaped quotes and backslashes included)
    /// do not count toward a text's nesting; serde refuses at the depth
    /// `submit_frame` leaves to it.
    #[test]
    fn nesting_counts_brackets_outside_strings() {
        assert_eq!(nesting(r#"{"a":"[[{","b":[{"c":"\"]]\\"},[]]}"#), 3);
        assert_eq!(nesting("7"), 0);
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(serde_json::from_str::<Value>(&deep(FRAME_DEPTH - 1)).is_ok());
        assert!(serde_json::from_str::<Value>(&deep(FRAME_DEPTH)).is_err());
        assert_eq!(nesting(&deep(FRAME_DEPTH)), FRAME_DEPTH);
    }

    /// The bracket count only lets through texts the walk would: generated
    /// nestings around the limit, with brackets inside strings as well.
    #[test]
    fn the_bracket_count_agrees_with_the_walk() {
        for depth in [0, 1, 2, FRAME_DEPTH - 2, FRAME_DEPTH - 1, FRAME_DEPTH, FRAME_DEPTH + 1, 300] {
            for in_strings in [0, 1, FRAME_DEPTH, 2 * FRAME_DEPTH] {
                for open in ["[", "{\"k\":"] {
                    let close = if open == "[" { "]" } else { "}" };
                    let text = format!(
                        "{{\"s\":\"{}\",\"v\":{}1{}}}",
                        "[{".repeat(in_strings),
                        open.repeat(depth),
                        close.repeat(depth)
                    );
                    assert_eq!(
                        too_deep(&text),
                        nesting(&text) >= FRAME_DEPTH,
                        "depth {depth}, {in_strings} in strings"
                    );
                    assert_eq!(nesting(&text), depth + 1);
                }
            }
        }
    }

    /// What the one-pass reader takes: a plain submit; any other shape of
    /// its params (an array, a repeated, unknown or escaped member, no
    /// proposal) is left to `classify`.
    #[test]
    fn the_submit_reader_takes_plain_submits_only() {
        let frame =
            |params: &str| format!(r#"{{"jsonrpc":"2.0","id":7,"method":"proposal.submit","params":{params}}}"#);
        let p = r#"{"actions":[]}"#;
        let read = submit_frame(&frame(&format!(r#"{{"proposal":{p},"session_id":"s1"}}"#))).unwrap();
        assert_eq!(read, SubmitFrame { id: json!(7), proposal: p.to_string(), session_id: Some("s1".into()) });
        let read = submit_frame(&frame(&format!(r#"{{"session_id":null,"proposal":{p}}}"#))).unwrap();
        assert_eq!(read.session_id, None);
        for params in [
            format!("[{p}]"),
            format!("[{p},\"s1\"]"),
            format!(r#"{{"proposal":{p},"proposal":{p}}}"#),
            format!(r#"{{"proposal":{p},"session_id":"a","session_id":"b"}}"#),
            format!(r#"{{"proposal":{p},"scope":"x"}}"#),
            format!(r#"{{"propos\u0061l":{p}}}"#),
            r#"{"session_id":"s1"}"#.to_string(),
            r#"{"proposal":[]}"#.to_string(),
            r#"{"proposal":"{}"}"#.to_string(),
            "7".to_string(),
        ] {
            assert_eq!(submit_frame(&frame(&params)), None, "{params}");
        }
    }

    /// Every frame the response reader takes, [`classify`] reads as the same
    /// response; what it leaves (every other shape) goes to `classify`.
    #[test]
    fn the_response_reader_agrees_with_classify() {
        let results =
            [r#"{"i":1}"#, "null", r#"[1,{"a":[]}]"#, r#""x\"y""#, "2.5", r#"{"a":1,"a":2}"#, r#"{"a":{"b":1,"b":1}}"#];
        let ids = [r#""req-1""#, r#""r\u0031""#, "7", "null", "[1]", r#""""#];
        let mut taken = 0;
        for result in results {
            for id in ids {
                let frames = [
                    format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#),
                    format!(r#" {{ "result" : {result}, "id" : {id}, "jsonrpc" : "2.0" }} "#),
                    format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{result},"result":{result}}}"#),
                    format!(r#"{{"jsonrpc":"2.0","id":{id},"id":{id},"result":{result}}}"#),
                    format!(r#"{{"jsonrpc":"1.0","id":{id},"result":{result}}}"#),
                    format!(r#"{{"jsonrpc":"2.0","jsonrpc":"2.0","id":{id},"result":{result}}}"#),
                    format!(r#"{{"id":{id},"result":{result}}}"#),
                    format!(r#"{{"jsonrpc":"2.0","result":{result}}}"#),
                    format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{result},"error":{{"code":1,"message":"m"}}}}"#),
                    format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{result},"x":1}}"#),
                    format!(r#"{{"jsonrpc":"2.0","id":{id},"r\u0065sult":{result}}}"#),
                    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"m","params":{{"result":{result}}}}}"#),
                    format!(r#"[{{"jsonrpc":"2.0","id":{id},"result":{result}}}]"#),
                    format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}} x"#),
                    format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{result}"#),
                ];
                for f in frames {
                    if let Some(read) = response_frame(&f) {
                        assert_eq!(read, classify(&f), "{f}");
                        taken += 1;
                    }
                }
            }
        }
        // The two plain spellings of each string id (three ids), with each
        // result that has no repeated key (five).
        assert_eq!(taken, 5 * 3 * 2, "the reader took other frames than plain responses");
        let deep = format!(r#"{{"jsonrpc":"2.0","id":"r","result":{}1{}}}"#, "[".repeat(200), "]".repeat(200));
        assert_eq!(response_frame(&deep), None);
        assert!(matches!(classify(&deep), Frame::Invalid { .. }));
    }

    fn invalid(text: &str) -> (Value, i64, String) {
        match classify(text) {
            Frame::Invalid { id, error } => (id, error.code, error.message),
            other => panic!("expected invalid, got {other:?}"),
        }
    }

    #[test]
    fn requests_and_notifications() {
        match classify(r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":1}}"#) {
            Frame::Call { id, method, params } => {
                assert_eq!(id, Some(json!(1)));
                assert_eq!(method, "m");
                assert_eq!(params, json!({"a":1}));
            }
            f => panic!("{f:?}"),
        }
        match classify(r#"{"jsonrpc":"2.0","method":"m"}"#) {
            Frame::Call { id: None, params, .. } => assert_eq!(params, json!({})),
            f => panic!("{f:?}"),
        }
        assert!(matches!(
            classify(r#"{"jsonrpc":"2.0","id":null,"method":"m"}"#),
            Frame::Call { id: Some(Value::Null), .. }
        ));
    }

    #[test]
    fn responses() {
        assert_eq!(
            classify(r#"{"jsonrpc":"2.0","id":"cb-1","result":{"x":1}}"#),
            Frame::Response { id: json!("cb-1"), outcome: Ok(json!({"x":1})) }
        );
        assert_eq!(
            classify(r#"{"jsonrpc":"2.0","id":"cb-1","error":{"code":-1,"message":"m"}}"#),
            Frame::Response { id: json!("cb-1"), outcome: Err(json!({"code":-1,"message":"m"})) }
        );
    }

    #[test]
    fn malformed_frames() {
        let (id, code, msg) = invalid("{not json");
        assert_eq!((id, code), (Value::Null, PARSE_ERROR));
        assert!(msg.starts_with("parse error:"), "{msg}");
        assert_eq!(invalid("42").1, INVALID_REQUEST);
        assert_eq!(invalid("[]").1, INVALID_REQUEST);
        assert_eq!(invalid(r#""s""#).2, "invalid request: a frame must be a JSON object, not a string");
        let (id, code, msg) = invalid(r#"{"id":7,"method":"m"}"#);
        assert_eq!((id, code, msg.as_str()), (json!(7), INVALID_REQUEST, "invalid request: `jsonrpc` is required"));
        assert_eq!(invalid(r#"{"jsonrpc":"1.0","id":7,"method":"m"}"#).0, json!(7));
        let (id, _, msg) = invalid(r#"{"jsonrpc":"2.0","id":{"a":1},"method":"m"}"#);
        assert_eq!(id, Value::Null);
        assert!(msg.contains("`id` must be"), "{msg}");
        assert!(invalid(r#"{"jsonrpc":"2.0","id":1,"method":5}"#).2.contains("`method` must be a string"));
        assert!(invalid(r#"{"jsonrpc":"2.0","id":1,"method":""}"#).2.contains("non-empty"));
        assert!(invalid(r#"{"jsonrpc":"2.0","id":1,"method":"m","params":3}"#).2.contains("`params` must be"));
        assert!(invalid(r#"{"jsonrpc":"2.0","id":1}"#).2.contains("`method` is required"));
        assert!(invalid(r#"{"jsonrpc":"2.0","id":1,"result":1,"error":{}}"#).2.contains("not both"));
        assert!(invalid(r#"{"jsonrpc":"2.0","id":1,"error":"x"}"#).2.contains("`error` must be an object"));
    }

    #[test]
    fn duplicate_keys_are_refused_anywhere_in_a_frame() {
        let dup = r#"{"jsonrpc":"2.0","id":4,"method":"proposal.submit","params":{"proposal":{"actions":[{"id":"a","type":"tool_call","tool":"calculate","tool":"shell"}]}}}"#;
        let (id, code, msg) = invalid(dup);
        assert_eq!((id, code), (json!(4), INVALID_REQUEST));
        assert!(msg.contains("duplicate key `tool`"), "{msg}");
        // At the top level, in params, in an array, in a batch member.
        for text in [
            r#"{"jsonrpc":"2.0","id":1,"method":"a","method":"b"}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"k":1,"k":1}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"m","params":[{"x":{"y":1,"y":2}}]}"#,
            r#"[{"jsonrpc":"2.0","id":1,"method":"m","params":{"a":1,"a":2}}]"#,
        ] {
            let (_, code, msg) = invalid(text);
            assert_eq!(code, INVALID_REQUEST, "{text}");
            assert!(msg.starts_with("invalid request: duplicate key"), "{text}: {msg}");
        }
        // A repeated id is answered to its last value (as serde_json reads it).
        assert_eq!(invalid(r#"{"jsonrpc":"2.0","id":1,"id":2,"method":"m"}"#).0, json!(2));
        // Same keys in different objects are fine; values parse as serde_json does.
        let text = r#"{"a":{"k":1},"b":{"k":[1,2.5,-3,"s",null,true,{"k":{}}]},"c":18446744073709551615}"#;
        assert_eq!(parse_strict(text).unwrap(), serde_json::from_str::<Value>(text).unwrap());
        assert!(parse_strict("{} x").is_err());
        assert!(!parse_strict("{").unwrap_err().is_data());
    }

    #[test]
    fn batches() {
        assert!(matches!(classify(r#"[{"jsonrpc":"2.0","id":1,"method":"m"}, 3]"#), Frame::Batch(v) if v.len() == 2));
    }

    #[test]
    fn facade_errors_map_to_codes() {
        let e: RpcError = crate::Error::invalid_argument("key", "is required").into();
        assert_eq!(e.code, INVALID_PARAMS);
        assert_eq!(e.message, "invalid params: key is required");
        assert_eq!(e.data.as_ref().map(|d| d["code"].clone()), Some(json!("invalid_argument")));
        let e: RpcError = crate::Error::runtime("boom", "it broke").into();
        assert_eq!((e.code, e.message.as_str()), (INTERNAL_ERROR, "it broke"));
    }

    #[test]
    fn a_response_written_from_its_results_text_is_the_responses_text() {
        let results = [
            json!({"proposal_id": "p", "results": [{"action_id": "a\"\u{1}é", "output": {"n": 1.5, "big": 18446744073709551615_u64}}]}),
            json!(null),
            json!([1, "two", {"three": []}]),
        ];
        for id in [json!(7), json!("req-\"1\""), json!(null), json!(-2.5)] {
            for r in &results {
                let text = serde_json::to_string(r).unwrap();
                assert_eq!(response_text(&id, &text), response(&id, r.clone()).to_string(), "{id} {r}");
            }
        }
    }

    #[test]
    fn id_keys() {
        assert_eq!(id_key(&json!("cb-1")), "cb-1");
        assert_eq!(id_key(&json!(17)), "17");
    }
}
