//! The relay state machine (spec §2, §3, §13.2). See SPEC-NOTES "Relay".
pub mod frame;
