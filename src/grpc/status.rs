//! Coordinator errors as gRPC statuses.

use crate::coordinator::CoordinatorError;

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
            CoordinatorError::Store(e) => tonic::Status::internal(format!("store: {e}")),
        }
    }
}
