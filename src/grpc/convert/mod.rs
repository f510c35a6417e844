//! proto ↔ domain conversions, all in one place.
//!
//! Domain types never see protobuf. Every proto value that reaches the domain passes through
//! a `TryFrom` here, and a bad value becomes a `ConvertError` that names the field, which the
//! services turn into `INVALID_ARGUMENT`.

mod access;
mod grant;
mod policy;
mod replay;
mod run;
mod session;

use chrono::{DateTime, Utc};

/// A proto value the domain cannot take. The message starts with the field's name.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConvertError {
    /// A required field is empty or absent.
    #[error("{field}: required")]
    Required {
        /// The field, as named in the proto.
        field: &'static str,
    },
    /// An enum number the proto does not define, or UNSPECIFIED where a value is required.
    #[error("{field}: invalid enum value {value}")]
    InvalidEnum {
        /// The field, as named in the proto.
        field: &'static str,
        /// The number received.
        value: i32,
    },
    /// Any other value out of range (negative count, non-finite cost, bad timestamp…).
    #[error("{field}: {problem}")]
    OutOfRange {
        /// The field, as named in the proto.
        field: &'static str,
        /// What is wrong with it.
        problem: String,
    },
}

impl ConvertError {
    /// The field the error is about.
    pub fn field(&self) -> &'static str {
        match self {
            ConvertError::Required { field }
            | ConvertError::InvalidEnum { field, .. }
            | ConvertError::OutOfRange { field, .. } => field,
        }
    }
}

impl From<ConvertError> for tonic::Status {
    fn from(err: ConvertError) -> tonic::Status {
        tonic::Status::invalid_argument(err.to_string())
    }
}

/// Longest identifier accepted (ids, call ids, tool and profile names).
pub const MAX_ID_BYTES: usize = 1024;
/// Longest stored text accepted (commands, paths, outputs and errors that end up in a run or
/// its log). Keeps every run and event far below the gRPC message limit, so they can always
/// be read back; a tool result's output is not stored and may be as large as a message.
pub const MAX_TEXT_BYTES: usize = 64 * 1024;

fn at_most(field: &'static str, value: String, max: usize) -> Result<String, ConvertError> {
    if value.len() > max {
        Err(ConvertError::OutOfRange {
            field,
            problem: format!("at most {max} bytes, got {}", value.len()),
        })
    } else {
        Ok(value)
    }
}

/// Refuses an empty or overlong identifier where the proto field is required.
pub(crate) fn required(field: &'static str, value: String) -> Result<String, ConvertError> {
    if value.is_empty() {
        Err(ConvertError::Required { field })
    } else {
        at_most(field, value, MAX_ID_BYTES)
    }
}

/// Refuses a stored text longer than `MAX_TEXT_BYTES`.
pub fn bounded(field: &'static str, value: String) -> Result<String, ConvertError> {
    at_most(field, value, MAX_TEXT_BYTES)
}

/// Refuses a negative, NaN or infinite amount.
pub(crate) fn non_negative_finite(field: &'static str, value: f64) -> Result<f64, ConvertError> {
    if value.is_finite() && value >= 0.0 {
        Ok(value)
    } else {
        Err(ConvertError::OutOfRange {
            field,
            problem: format!("must be a finite number >= 0, got {value}"),
        })
    }
}

/// Refuses a negative count.
pub(crate) fn non_negative<T>(field: &'static str, value: T) -> Result<T, ConvertError>
where
    T: PartialOrd + Default + std::fmt::Display,
{
    if value >= T::default() {
        Ok(value)
    } else {
        Err(ConvertError::OutOfRange {
            field,
            problem: format!("must be >= 0, got {value}"),
        })
    }
}

/// A domain time as a protobuf `Timestamp`.
pub fn timestamp(at: DateTime<Utc>) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: at.timestamp(),
        // Always in 0..2e9, so the cast cannot truncate.
        nanos: at.timestamp_subsec_nanos() as i32,
    }
}

/// A protobuf `Timestamp` as a domain time; refuses nanos outside `0..1e9` and times chrono
/// cannot represent.
pub fn from_timestamp(
    field: &'static str,
    ts: prost_types::Timestamp,
) -> Result<DateTime<Utc>, ConvertError> {
    u32::try_from(ts.nanos)
        .ok()
        .filter(|nanos| *nanos < 1_000_000_000)
        .and_then(|nanos| DateTime::from_timestamp(ts.seconds, nanos))
        .ok_or_else(|| ConvertError::OutOfRange {
            field,
            problem: format!("invalid timestamp {}s {}ns", ts.seconds, ts.nanos),
        })
}

/// A required `Timestamp` message field.
pub(crate) fn required_timestamp(
    field: &'static str,
    ts: Option<prost_types::Timestamp>,
) -> Result<DateTime<Utc>, ConvertError> {
    from_timestamp(field, ts.ok_or(ConvertError::Required { field })?)
}

pub use access::role_from_proto;
pub use grant::{grant_from_proto, grant_to_proto, remember_from_proto};
pub use policy::policy_mode_from_proto;
pub use replay::replay_request;
pub use run::{
    bounded_paths, decision_from_proto, deliver_mode_from_proto, exec_mode_from_proto,
    run_with_stall, status_from_proto, MAX_PATHS,
};
pub use session::{coordinator_message, session_error, worker_input};
