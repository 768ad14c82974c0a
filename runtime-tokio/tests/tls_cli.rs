//! `a2acp relay --tls-cert FILE --tls-key FILE`, the real binary.

#[macro_use]
#[path = "common/tls_cli.rs"]
mod tls_cli;

relay_tls_tests!(env!("CARGO_BIN_EXE_a2acp"));

#[test]
fn agent_init_with_ca_registers_over_wss() {
    let a2acp = env!("CARGO_BIN_EXE_a2acp");
    tls_cli::agent_init_with_ca(a2acp, a2acp);
}
