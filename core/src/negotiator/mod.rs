//! Deterministic negotiator.
