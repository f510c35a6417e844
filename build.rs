//! Compiles the protobuf API with a vendored protoc, so a fresh machine needs only Rust.
//!
//! The generated clients and servers use `runplane::grpc::codec::SmallBufferCodec`, prost
//! with 1 KiB initial buffers instead of tonic's 8 KiB per direction per RPC: an idle
//! worker session holds one stream open for its whole run (see `src/grpc/codec.rs`).

use std::path::PathBuf;

const PROTOS: &[&str] = &[
    "proto/runplane/v1/run.proto",
    "proto/runplane/v1/policy.proto",
    "proto/runplane/v1/run_service.proto",
    "proto/runplane/v1/worker_service.proto",
    "proto/runplane/v1/access_service.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    tonic_prost_build::configure()
        .codec_path("crate::grpc::codec::SmallBufferCodec")
        .file_descriptor_set_path(out_dir.join("runplane_descriptor.bin"))
        .compile_with_config(config, PROTOS, &["proto"])?;
    for proto in PROTOS {
        println!("cargo:rerun-if-changed={proto}");
    }
    Ok(())
}
