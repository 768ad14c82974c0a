//! Federation tests.
