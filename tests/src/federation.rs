//! Federating relays on loopback for the federation tests and benchmark: each serves TLS
//! with a leaf of one private CA, its discovery document at `/.well-known/a2acp`, and
//! knows the others through static routes (`--federate DOMAIN=wss://127.0.0.1:PORT`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use a2acp_core::relay::RelayConfig;
use a2acp_runtime::admission::AdmissionConfig;
use a2acp_runtime::federation::{Federation, FetchLimits};
use a2acp_runtime::relay_key;
use a2acp_runtime::relay_service::ServiceConfig;
use a2acp_runtime::store::Durability;
use a2acp_runtime::tls::{ClientTls, ServerTls};

use crate::{Relay, Runtime};

/// The federation settings of a relay of `domain` whose data is in `data`: its key
/// (created there at the first call), `routes`, trusting the CA at `ca`.
pub fn federation(data: &Path, domain: &str, routes: &[(&str, String)], ca: &Path) -> Federation {
    Federation {
        keys: relay_key::load_or_create(data, domain).expect("relay key"),
        public_url: None,
        routes: routes
            .iter()
            .map(|(d, e)| (d.to_string(), e.clone()))
            .collect::<BTreeMap<_, _>>(),
        tls: ClientTls::new(Some(ca)).expect("CA"),
        fetch: FetchLimits::default(),
    }
}

/// Starts a federating relay of `domain` on `rt` at `listen` (data in `data`), serving
/// TLS with `cert`/`key`, with `fed` and `relay`'s settings (its domain set to `domain`).
#[allow(clippy::too_many_arguments)]
pub async fn federating_relay(
    rt: Runtime,
    listen: &str,
    data: &Path,
    domain: &str,
    cert: &Path,
    key: &Path,
    fed: Federation,
    relay: RelayConfig,
) -> Relay {
    let cfg = ServiceConfig {
        relay: RelayConfig {
            domain: domain.to_string(),
            ..relay
        },
        data: Some(data.to_path_buf()),
        durability: Durability::Normal,
        federation: Some(fed),
        ..ServiceConfig::default()
    };
    let tls = ServerTls::from_files(cert, key).expect("server TLS");
    for _ in 0..100 {
        let r = match rt {
            Runtime::Tokio => a2acp_tokio::relay::start_with(
                listen,
                cfg.clone(),
                AdmissionConfig::default(),
                Some(tls.clone()),
            )
            .await
            .map(Relay::Tokio),
            Runtime::Smol => a2acp_smol::relay::start_with(
                listen,
                cfg.clone(),
                AdmissionConfig::default(),
                Some(tls.clone()),
            )
            .await
            .map(Relay::Smol),
        };
        match r {
            Ok(r) => return r,
            // The port of a relay just stopped may take a moment to be free again.
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(50)).await,
        }
    }
    panic!("federating relay could not start on {listen}");
}

/// A free loopback port (bound, read, released).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// The data directory of relay `name` under `dir`.
pub fn data_dir(dir: &Path, name: &str) -> PathBuf {
    dir.join(name)
}

/// Two relays on loopback, `a.example` and `b.example`, each serving TLS with `cert`/`key`
/// and knowing the other by its static route (`--federate`, trusting `ca`): the pair every
/// federation test starts from. Their data lives in `dir/ra` and `dir/rb`.
pub struct LinkedRelays {
    /// a.example's relay.
    pub a: Relay,
    /// b.example's relay.
    pub b: Relay,
    /// a.example's data directory.
    pub data_a: PathBuf,
    /// b.example's data directory.
    pub data_b: PathBuf,
    /// a.example's federation endpoint (`wss://127.0.0.1:PORT`).
    pub url_a: String,
    /// b.example's federation endpoint.
    pub url_b: String,
}

/// Starts [`LinkedRelays`] on the runtime `rt`.
pub async fn linked_relays(
    rt: Runtime,
    dir: &Path,
    cert: &Path,
    key: &Path,
    ca: &Path,
) -> LinkedRelays {
    let (data_a, data_b) = (dir.join("ra"), dir.join("rb"));
    let (pa, pb) = (free_port(), free_port());
    let (url_a, url_b) = (
        format!("wss://127.0.0.1:{pa}"),
        format!("wss://127.0.0.1:{pb}"),
    );
    let a = federating_relay(
        rt,
        &format!("127.0.0.1:{pa}"),
        &data_a,
        "a.example",
        cert,
        key,
        federation(&data_a, "a.example", &[("b.example", url_b.clone())], ca),
        RelayConfig::default(),
    )
    .await;
    let b = federating_relay(
        rt,
        &format!("127.0.0.1:{pb}"),
        &data_b,
        "b.example",
        cert,
        key,
        federation(&data_b, "b.example", &[("a.example", url_a.clone())], ca),
        RelayConfig::default(),
    )
    .await;
    LinkedRelays {
        a,
        b,
        data_a,
        data_b,
        url_a,
        url_b,
    }
}
