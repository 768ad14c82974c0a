//! `a2acp mcp` for the tests: `mcp_bridge --home DIR [--host-answers]` serves the agent of
//! `DIR` over MCP on stdio through the same code as the `a2acp` binary
//! ([`a2acp_tokio::mcp::serve_stdio`]), so the tests need not find that binary.

use std::process::ExitCode;

fn main() -> ExitCode {
    let mut home = None;
    let mut host_answers = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--home" => home = args.next(),
            "--host-answers" => host_answers = true,
            other => {
                eprintln!("error: unexpected argument {other}");
                return ExitCode::FAILURE;
            }
        }
    }
    let Some(home) = home else {
        eprintln!("error: --home DIR is required");
        return ExitCode::FAILURE;
    };
    let home = a2acp_runtime::home::Home::resolve(Some(std::path::Path::new(&home)));
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(a2acp_tokio::mcp::serve_stdio(
        a2acp_tokio::mcp::McpOptions {
            socket: home.socket(),
            host_answers,
        },
    )) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
