//! Federating relays on loopback for the federation tests and benchmark: each serves TLS
//! with a leaf of one private CA, its discovery document at `/.well-known/a2acp`, and
//! knows the others through static routes (`--federate DOMAIN=wss://127.0.0.1:PORT`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use a2acp_core::relay::RelayConfig;
use a2acp_runtime::admission::{AdmissionConfig, RelayError};
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
/// A port still held (a relay of the same port just stopped or killed) is waited for, up
/// to 5 s; any other failure panics with its reason.
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
    let mut last = None;
    for _ in 0..100 {
        match try_federating_relay(
            rt,
            listen,
            data,
            domain,
            cert,
            key,
            fed.clone(),
            relay.clone(),
        )
        .await
        {
            Ok(r) => return r,
            Err(RelayError::Bind { source, .. })
                if source.kind() == std::io::ErrorKind::AddrInUse =>
            {
                last = Some(source);
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            Err(e) => panic!("federating relay of {domain} could not start on {listen}: {e}"),
        }
    }
    panic!(
        "federating relay of {domain} could not start on {listen}: the port stayed in use ({last:?})"
    );
}

/// Starts a federating relay once (see [`federating_relay`]): the error as it came.
#[allow(clippy::too_many_arguments)]
pub async fn try_federating_relay(
    rt: Runtime,
    listen: &str,
    data: &Path,
    domain: &str,
    cert: &Path,
    key: &Path,
    fed: Federation,
    relay: RelayConfig,
) -> Result<Relay, RelayError> {
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
    match rt {
        Runtime::Tokio => {
            a2acp_tokio::relay::start_with(listen, cfg, AdmissionConfig::default(), Some(tls))
                .await
                .map(Relay::Tokio)
        }
        Runtime::Smol => {
            a2acp_smol::relay::start_with(listen, cfg, AdmissionConfig::default(), Some(tls))
                .await
                .map(Relay::Smol)
        }
    }
}

/// A free loopback port (bound, read, released): racy, another process may take it before
/// it is bound again. Only for what must name a port before anything listens on it (a
/// relay restarted on its port, a route to a relay not yet started); bind port 0 and read
/// the address back otherwise.
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

/// Starts [`LinkedRelays`] on the runtime `rt`, with default settings.
pub async fn linked_relays(
    rt: Runtime,
    dir: &Path,
    cert: &Path,
    key: &Path,
    ca: &Path,
) -> LinkedRelays {
    linked_relays_with(
        rt,
        dir,
        (cert, key, ca),
        RelayConfig::default(),
        RelayConfig::default(),
    )
    .await
}

/// Starts [`LinkedRelays`] on the runtime `rt` with `pki` (leaf certificate, its key, the
/// CA) and each relay's settings (`a`, `b`; their domains are set). a.example binds port 0
/// and its address is read back; b.example needs a port named before it starts (a.example's
/// route to it), so a port taken meanwhile by another process is retried with another
/// (a.example restarted with the new route), and a failure says which port and why.
pub async fn linked_relays_with(
    rt: Runtime,
    dir: &Path,
    pki: (&Path, &Path, &Path),
    a: RelayConfig,
    b: RelayConfig,
) -> LinkedRelays {
    let (cert, key, ca) = pki;
    let (data_a, data_b) = (dir.join("ra"), dir.join("rb"));
    let mut failures = Vec::new();
    for _ in 0..5 {
        let pb = free_port();
        let url_b = format!("wss://127.0.0.1:{pb}");
        let ra = try_federating_relay(
            rt,
            "127.0.0.1:0",
            &data_a,
            "a.example",
            cert,
            key,
            federation(&data_a, "a.example", &[("b.example", url_b.clone())], ca),
            a.clone(),
        )
        .await
        .unwrap_or_else(|e| panic!("a.example's relay could not start: {e}"));
        let url_a = ra.url();
        match try_federating_relay(
            rt,
            &format!("127.0.0.1:{pb}"),
            &data_b,
            "b.example",
            cert,
            key,
            federation(&data_b, "b.example", &[("a.example", url_a.clone())], ca),
            b.clone(),
        )
        .await
        {
            Ok(rb) => {
                return LinkedRelays {
                    a: ra,
                    b: rb,
                    data_a,
                    data_b,
                    url_a,
                    url_b,
                }
            }
            Err(RelayError::Bind { source, .. })
                if source.kind() == std::io::ErrorKind::AddrInUse =>
            {
                failures.push(format!("port {pb}: {source}"));
                ra.stop(true).await;
            }
            Err(e) => panic!("b.example's relay could not start on port {pb}: {e}"),
        }
    }
    panic!("b.example's relay found no free port: {failures:?}");
}

/// The spec's dinner agents across two domains: Alice on a.example (her relay at `url_a`),
/// Bob on b.example (at `url_b`) whose friend is Alice on her own domain; both homes trust
/// the CA at `ca` (`relay_ca`). Made under `dir` (`alice/`, `bob/`).
pub fn dinner_across(dir: &Path, url_a: &str, url_b: &str, ca: &Path) -> crate::DinnerHomes {
    use a2acp_core::Address;
    let (alice_cfg, _) = a2acp_runtime::scripted::dinner_configs("a.example").unwrap();
    let (_, mut bob_cfg) = a2acp_runtime::scripted::dinner_configs("b.example").unwrap();
    let o = bob_cfg
        .overrides
        .remove(&Address::new("alice", "b.example").unwrap())
        .expect("Bob's override for Alice");
    bob_cfg.overrides.insert(alice_cfg.address.clone(), o);
    let alice = crate::init_home(&dir.join("alice"), &alice_cfg, url_a);
    let bob = crate::init_home(&dir.join("bob"), &bob_cfg, url_b);
    for h in [&alice, &bob] {
        std::fs::copy(ca, h.dir().join("relay-ca.pem")).unwrap();
        crate::edit_config(h, |f| f.relay_ca = Some("relay-ca.pem".into()));
    }
    crate::DinnerHomes {
        alice_cfg,
        bob_cfg,
        alice,
        bob,
    }
}
