//! flightrec configuration: the TOML schema, its defaults and validation.

#![forbid(unsafe_code)]
