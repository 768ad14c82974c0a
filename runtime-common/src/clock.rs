//! The two things the core never reads itself: the clock and the OS's randomness.

use std::time::{SystemTime, UNIX_EPOCH};

use a2acp_core::Timestamp;

/// The current time as the core sees it: milliseconds since the Unix epoch (a clock set
/// before 1970 reads as the epoch).
pub fn now() -> Timestamp {
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis().min(u128::from(u64::MAX)) as u64)
        .unwrap_or(0);
    Timestamp::from_millis(ms)
}

/// Why no seed could be drawn.
#[derive(Debug, thiserror::Error)]
#[error("the operating system's random generator failed: {0}")]
pub struct SeedError(String);

/// 32 bytes from the operating system's random generator, to seed a state machine.
pub fn os_seed() -> Result<[u8; 32], SeedError> {
    let mut b = [0u8; 32];
    getrandom::fill(&mut b).map_err(|e| SeedError(e.to_string()))?;
    Ok(b)
}
