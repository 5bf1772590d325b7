//! Generates the tonic/prost code from `flightrec.proto`.
//!
//! The .proto is parsed by `protox`, a pure-Rust protobuf compiler, so a fresh
//! machine needs no `protoc`: `cargo build` is the only step.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=flightrec.proto");
    let descriptors = protox::compile(["flightrec.proto"], ["."])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        // Malformed messages are INVALID_ARGUMENT (src/codec.rs).
        .codec_path("crate::codec::ArgumentCodec")
        .compile_fds(descriptors)?;
    Ok(())
}
