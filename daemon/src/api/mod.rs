//! The gRPC service `flightrec.v1.FlightRecorder` over a Unix socket.
