//! The gRPC edge: generated protobuf types and the conversions to and from the domain.

pub mod convert;

/// Types and service stubs generated from `proto/runplane/v1`.
#[allow(missing_docs, clippy::all)]
pub mod pb {
    tonic::include_proto!("runplane.v1");

    /// The encoded descriptor set, for server reflection.
    pub const FILE_DESCRIPTOR_SET: &[u8] =
        tonic::include_file_descriptor_set!("runplane_descriptor");
}
