//! Triggers: signals and API calls into one dump path, coalescing, rate limit.
