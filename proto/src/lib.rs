//! The gRPC API of flightrecd: service `flightrec.v1.FlightRecorder`.
//!
//! Generated at build time from `proto/flightrec.proto` (see `build.rs`; no
//! `protoc` needed). The daemon serves it over a Unix socket and `snapctl`
//! is its client. [`object`]: the names and headers of snapshots uploaded
//! by the fleet, which `snapctl fleet` reads. [`sidecar`]: the file beside
//! each snapshot that says what triggered it. [`container`]: which
//! service, container or pod a cgroup path is.

#![forbid(unsafe_code)]

pub mod codec;
pub mod container;
pub mod object;
pub mod sidecar;

/// Messages and the client/server stubs of `flightrec.v1`.
#[allow(clippy::all, missing_docs)]
pub mod v1 {
    tonic::include_proto!("flightrec.v1");
}

pub use v1::flight_recorder_client::FlightRecorderClient;
pub use v1::flight_recorder_server::{FlightRecorder, FlightRecorderServer};
