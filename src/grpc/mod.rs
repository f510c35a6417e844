//! The gRPC edge: generated protobuf types, the thin services, and the conversions to and
//! from the domain.

pub mod access;
mod access_service;
pub mod codec;
pub mod convert;
mod policy_service;
mod run_service;
mod status;
mod worker_service;

pub use access_service::AccessApi;
pub use policy_service::PolicyApi;
pub use run_service::RunApi;
pub use worker_service::{SessionStream, WorkerApi};

/// Types and service stubs generated from `proto/runplane/v1`.
#[allow(missing_docs, clippy::all)]
pub mod pb {
    tonic::include_proto!("runplane.v1");

    /// The encoded descriptor set, for server reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        tonic::include_file_descriptor_set!("runplane_descriptor");
}
