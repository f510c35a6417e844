//! Compiles the protobuf API with a vendored protoc, so a fresh machine needs only Rust.

use std::path::PathBuf;

const PROTOS: &[&str] = &[
    "proto/runplane/v1/run.proto",
    "proto/runplane/v1/policy.proto",
    "proto/runplane/v1/run_service.proto",
    "proto/runplane/v1/worker_service.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out_dir = PathBuf::from(std::env::var("OUT_DIR")?);
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    tonic_prost_build::configure()
        .file_descriptor_set_path(out_dir.join("runplane_descriptor.bin"))
        .compile_with_config(config, PROTOS, &["proto"])?;
    for proto in PROTOS {
        println!("cargo:rerun-if-changed={proto}");
    }
    Ok(())
}
