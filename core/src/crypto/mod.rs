//! Identity keys, primitives and the end-to-end envelope (spec §16).
pub mod envelope;
