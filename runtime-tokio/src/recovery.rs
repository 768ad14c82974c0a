//! `a2acp agent recover` on tokio: the shared recovery ([`a2acp_runtime::recovery`]) over
//! tokio's client connection and timer.

use std::path::Path;

use a2acp_runtime::config::RelayUrls;
use a2acp_runtime::home::Home;
use a2acp_runtime::recovery::{prepare, run, RecoverError, Recovered};

/// Recovers `address` into `home` with the recovery words `words` (see
/// [`a2acp_runtime::recovery`]): `relay` and `ca` for a new home.
pub async fn recover(
    home: &Home,
    address: &str,
    words: &str,
    relay: Option<RelayUrls>,
    ca: Option<&Path>,
) -> Result<Recovered, RecoverError> {
    let staged = prepare(home, address, words, relay, ca)?;
    run(
        staged,
        |url, tls| async move { crate::ws::connect_with(&url, tls.as_ref()).await },
        tokio::time::sleep,
    )
    .await
}
