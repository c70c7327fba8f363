//! Error families with stable codes.
//!
//! Every variant of every family has a stable snake_case `code()`. The JSON
//! facade renders errors as `{code, message, details}`; the daemon maps codes to
//! JSON-RPC numbers; Node throws an `Error` with `.code`; Python raises a
//! `CarError` subclass carrying `.code`.

use serde_json::{Value, json};

/// Errors raised while reading or validating an input document.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InputError {
    /// The text is not JSON at all.
    #[error("invalid json: {message} (line {line}, column {column})")]
    Json {
        /// What the JSON parser reported.
        message: String,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
    },
    /// The JSON does not have the shape of the expected document.
    #[error("{path}: {message}")]
    Shape {
        /// JSON path of the offending value, e.g. `actions[3].failure_behavior`.
        path: String,
        /// What is wrong with it.
        message: String,
    },
    /// A required field is missing (beyond what the type system can say).
    #[error("{path}: missing field `{field}`")]
    MissingField {
        /// JSON path of the missing field.
        path: String,
        /// The field name.
        field: String,
    },
    /// A field no part of the IR knows, refused in strict mode
    /// (`CarRuntime::set_strict_fields`; otherwise it is a `verify` warning).
    #[error("{message}")]
    UnknownField {
        /// JSON path of the first unknown field.
        path: String,
        /// Its name.
        field: String,
        /// Every unknown field, with the known field each probably meant.
        message: String,
    },
    /// An argument of a facade call is invalid.
    #[error("invalid argument `{name}`: {message}")]
    InvalidArgument {
        /// The argument name.
        name: String,
        /// Why it is invalid.
        message: String,
    },
}

impl InputError {
    /// The stable code of this error.
    pub fn code(&self) -> &'static str {
        match self {
            InputError::Json { .. } => "invalid_json",
            InputError::Shape { .. } => "invalid_document",
            InputError::MissingField { .. } => "missing_field",
            InputError::UnknownField { .. } => "unknown_field",
            InputError::InvalidArgument { .. } => "invalid_argument",
        }
    }

    fn details(&self) -> Value {
        match self {
            InputError::Json { line, column, .. } => json!({"line": line, "column": column}),
            InputError::Shape { path, .. } => json!({"path": path}),
            InputError::MissingField { path, field } => json!({"path": path, "field": field}),
            InputError::UnknownField { path, field, .. } => json!({"path": path, "field": field}),
            InputError::InvalidArgument { name, .. } => json!({"argument": name}),
        }
    }
}

/// The one error type of the public API: a family plus its variant.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Error {
    /// Bad input document or argument.
    #[error(transparent)]
    Input(#[from] InputError),
    /// A configuration problem (policy file, tool definition, preset, ...).
    #[error("{message}")]
    Config {
        /// Stable code of the configuration problem.
        code: &'static str,
        /// Human-readable message naming the offending file, rule or field.
        message: String,
        /// Structured details (file, key, ...).
        details: Value,
    },
    /// A lookup of something that does not exist.
    #[error("{message}")]
    NotFound {
        /// Stable code.
        code: &'static str,
        /// Human-readable message naming what was not found.
        message: String,
    },
    /// A failure while executing (engine, tool plumbing, I/O).
    #[error("{message}")]
    Runtime {
        /// Stable code.
        code: &'static str,
        /// Human-readable message.
        message: String,
    },
}

impl Error {
    /// The stable snake_case code of this error.
    pub fn code(&self) -> &'static str {
        match self {
            Error::Input(e) => e.code(),
            Error::Config { code, .. } | Error::NotFound { code, .. } | Error::Runtime { code, .. } => code,
        }
    }

    /// The family of this error: `input`, `config`, `not_found` or `runtime`.
    pub fn family(&self) -> &'static str {
        match self {
            Error::Input(_) => "input",
            Error::Config { .. } => "config",
            Error::NotFound { .. } => "not_found",
            Error::Runtime { .. } => "runtime",
        }
    }

    /// Structured details of the error.
    pub fn details(&self) -> Value {
        match self {
            Error::Input(e) => e.details(),
            Error::Config { details, .. } => details.clone(),
            Error::NotFound { .. } | Error::Runtime { .. } => json!({}),
        }
    }

    /// The facade's rendering: `{code, family, message, details}`.
    pub fn to_json(&self) -> Value {
        json!({
            "code": self.code(),
            "family": self.family(),
            "message": self.to_string(),
            "details": self.details(),
        })
    }

    /// A configuration error.
    pub fn config(code: &'static str, message: impl Into<String>, details: Value) -> Self {
        Error::Config { code, message: message.into(), details }
    }

    /// A not-found error.
    pub fn not_found(code: &'static str, message: impl Into<String>) -> Self {
        Error::NotFound { code, message: message.into() }
    }

    /// A runtime error.
    pub fn runtime(code: &'static str, message: impl Into<String>) -> Self {
        Error::Runtime { code, message: message.into() }
    }

    /// An invalid-argument error naming the argument.
    pub fn invalid_argument(name: impl Into<String>, message: impl Into<String>) -> Self {
        Error::Input(InputError::InvalidArgument { name: name.into(), message: message.into() })
    }
}

/// Result alias of the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_stable_snake_case() {
        let e: Error = InputError::Shape { path: "actions[3].failure_behavior".into(), message: "x".into() }.into();
        assert_eq!(e.code(), "invalid_document");
        assert_eq!(e.family(), "input");
        assert_eq!(e.to_json()["details"]["path"], "actions[3].failure_behavior");
        assert_eq!(e.to_string(), "actions[3].failure_behavior: x");
        let e = Error::invalid_argument("tier", "unknown tier `x`");
        assert_eq!(e.code(), "invalid_argument");
        assert_eq!(e.to_string(), "invalid argument `tier`: unknown tier `x`");
    }
}
