//! Errors of the simulator: bad input, never a panic.

/// Why a scenario could not be loaded or a command could not run.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// A scenario file is malformed or inconsistent.
    #[error("scenario {file}: {reason}")]
    Scenario {
        /// The file (or shipped scenario name).
        file: String,
        /// What is wrong, naming the key.
        reason: String,
    },
    /// No shipped scenario has this name and no file has this path.
    #[error("no scenario `{name}`: not a file, and not one of the shipped scenarios ({shipped})")]
    UnknownScenario {
        /// The name given.
        name: String,
        /// The shipped names.
        shipped: String,
    },
    /// A file could not be read or written.
    #[error("{path}: {reason}")]
    Io {
        /// The path.
        path: String,
        /// The OS message.
        reason: String,
    },
    /// A command-line argument is malformed.
    #[error("{0}")]
    Usage(String),
}
