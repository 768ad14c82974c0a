//! `a2acp relay --tls-cert FILE --tls-key FILE`, the real binary.

#[path = "common/tls_cli.rs"]
mod tls_cli;

#[test]
fn bad_tls_files_are_named() {
    tls_cli::bad_files_are_named(env!("CARGO_BIN_EXE_a2acp"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_serves_https() {
    tls_cli::serves_https(env!("CARGO_BIN_EXE_a2acp")).await;
}

#[test]
fn agent_init_with_ca_registers_over_wss() {
    let a2acp = env!("CARGO_BIN_EXE_a2acp");
    tls_cli::agent_init_with_ca(a2acp, a2acp);
}
