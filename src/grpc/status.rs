//! Coordinator errors as gRPC statuses.

use crate::coordinator::CoordinatorError;
use crate::coordinator::StoreError;

impl From<CoordinatorError> for tonic::Status {
    fn from(err: CoordinatorError) -> tonic::Status {
        match err {
            CoordinatorError::NotFound(m) => tonic::Status::not_found(m),
            CoordinatorError::InvalidArgument(m) => tonic::Status::invalid_argument(m),
            CoordinatorError::FailedPrecondition(m) => tonic::Status::failed_precondition(m),
            CoordinatorError::Unavailable => {
                tonic::Status::unavailable("server is shutting down; retry against the next one")
            }
            CoordinatorError::Internal(m) => tonic::Status::internal(m),
            CoordinatorError::Store(e) => store_status(&e),
        }
    }
}

/// A store failure as a status a client can act on: retry (`UNAVAILABLE`: the database is
/// busy or unreachable, or another replica owns the run now), `DATA_LOSS` for data that
/// cannot be read back, `INTERNAL` for the rest.
fn store_status(err: &StoreError) -> tonic::Status {
    let message = format!("store: {err}");
    match err {
        StoreError::Unavailable(_) | StoreError::Fenced { .. } | StoreError::Closed => {
            tonic::Status::unavailable(message)
        }
        StoreError::Corrupt { .. } => tonic::Status::data_loss(message),
        StoreError::NotFound { .. } => tonic::Status::not_found(message),
        StoreError::Conflict { .. } => tonic::Status::aborted(message),
        StoreError::NameTaken(_) => tonic::Status::already_exists(message),
        StoreError::Invalid { .. } | StoreError::Database(_) => tonic::Status::internal(message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;

    #[test]
    fn each_store_failure_has_the_code_a_client_acts_on() {
        let cases = [
            (StoreError::Unavailable("busy".into()), Code::Unavailable),
            (StoreError::Fenced { run_id: "r".into() }, Code::Unavailable),
            (StoreError::Closed, Code::Unavailable),
            (
                StoreError::corrupt_run("r", Some(4), "unknown kind"),
                Code::DataLoss,
            ),
            (StoreError::NotFound { run_id: "r".into() }, Code::NotFound),
            (
                StoreError::Conflict {
                    run_id: "r".into(),
                    expected: Some(1),
                    found: Some(2),
                },
                Code::Aborted,
            ),
            (StoreError::NameTaken("ci".into()), Code::AlreadyExists),
            (StoreError::invalid("r", "gap"), Code::Internal),
            (StoreError::Database("disk".into()), Code::Internal),
        ];
        for (err, code) in cases {
            let status = tonic::Status::from(CoordinatorError::Store(err));
            assert_eq!(status.code(), code, "{}", status.message());
        }
        let corrupt = tonic::Status::from(CoordinatorError::Store(StoreError::corrupt_run(
            "run-1",
            Some(7),
            "unknown kind",
        )));
        assert_eq!(
            corrupt.message(),
            "store: corrupt store data: run run-1: event 7: unknown kind"
        );
    }
}
