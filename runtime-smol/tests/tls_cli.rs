//! `a2acp-smol relay --tls-cert FILE --tls-key FILE`, the real binary (the same checks as
//! the tokio binary's).

#[macro_use]
#[path = "../../runtime-tokio/tests/common/tls_cli.rs"]
mod tls_cli;

relay_tls_tests!(env!("CARGO_BIN_EXE_a2acp-smol"));
