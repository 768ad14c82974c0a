//! The control socket's file and its one-line requests and answers.

use std::path::{Path, PathBuf};

use super::*;
use crate::control::{Request, Response, MAX_REQUEST_BYTES};

/// Removes the control socket's file when dropped.
#[derive(Debug)]
pub struct SocketFile(PathBuf);

impl Drop for SocketFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Binds the control socket at `path` (mode 0600), refusing if another agent answers on
/// it and replacing a stale file. The binding wraps the listener for its executor; the
/// returned guard removes the file when the agent stops.
pub fn bind_control(
    path: &Path,
) -> Result<(std::os::unix::net::UnixListener, SocketFile), AgentError> {
    let err = |message: String| AgentError::Control {
        path: path.to_path_buf(),
        message,
    };
    if path.exists() {
        match std::os::unix::net::UnixStream::connect(path) {
            Ok(_) => return Err(err("another agent is running on this home".into())),
            Err(_) => {
                let _ = std::fs::remove_file(path);
            }
        }
    }
    let l = std::os::unix::net::UnixListener::bind(path).map_err(|e| err(e.to_string()))?;
    l.set_nonblocking(true).map_err(|e| err(e.to_string()))?;
    use std::os::unix::fs::PermissionsExt;
    let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600));
    Ok((l, SocketFile(path.to_path_buf())))
}

/// The answer to one control-socket request line, as bytes to write back (one JSON line).
/// `read`: what reading the line returned (the reader is limited to
/// [`MAX_REQUEST_BYTES`]` + 1` bytes); `None` when the client sent nothing.
pub async fn answer_control_line(
    read: std::io::Result<usize>,
    line: &str,
    ctl: &flume::Sender<Ctl>,
) -> Option<Vec<u8>> {
    let resp = match read {
        Ok(_) if line.len() > MAX_REQUEST_BYTES => Response::err("request too large"),
        Ok(0) => return None,
        Ok(_) => match serde_json::from_str::<Request>(line.trim()) {
            Ok(req) => request(ctl, req)
                .await
                .unwrap_or_else(|_| Response::err("the agent is stopping")),
            Err(e) => Response::err(format!("bad request: {e}")),
        },
        Err(e) => Response::err(format!("bad request: {e}")),
    };
    let mut out = serde_json::to_vec(&resp).unwrap_or_default();
    out.push(b'\n');
    Some(out)
}

/// What a client of the control socket makes of the agent's answer line.
pub fn parse_control_answer(line: &str) -> Result<Response, String> {
    serde_json::from_str(line).map_err(|e| format!("bad answer from the agent: {e}"))
}

/// The message when no agent answers on `path`.
pub fn no_agent(path: &Path, e: &std::io::Error) -> String {
    let home = path.parent().unwrap_or(Path::new("."));
    if !home.join("config.toml").exists() {
        return format!(
            "no agent in {}: create one with `a2acp agent init --address agent:NAME@DOMAIN --relay ws://HOST:PORT --home {}`, then start it with `a2acp agent run --home {}` (or pass --home / set A2ACP_HOME to an existing agent)",
            home.display(),
            home.display(),
            home.display()
        );
    }
    format!(
        "the agent of {} is not running ({e}); start it with `a2acp agent run --home {}`",
        home.display(),
        home.display()
    )
}
