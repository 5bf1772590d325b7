//! The snapshot store: naming, listing and retention.
