//! The consent page's listener, attacked: each refusal a test.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;
use crate::control::Response;
use crate::daemon::Ctl;

fn addr(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

#[test]
fn the_host_header_must_name_this_listener() {
    let lo = addr("127.0.0.1:7420");
    assert!(host_allowed(Some("127.0.0.1:7420"), &lo));
    assert!(host_allowed(Some("localhost:7420"), &lo));
    assert!(host_allowed(Some("[::1]:7420"), &lo));
    // DNS rebinding: a name the attacker controls, resolving to 127.0.0.1.
    assert!(!host_allowed(Some("evil.example:7420"), &lo));
    assert!(!host_allowed(Some("127.0.0.1:7421"), &lo));
    assert!(!host_allowed(Some("127.0.0.1"), &lo));
    assert!(!host_allowed(Some("192.168.1.5:7420"), &lo));
    assert!(!host_allowed(None, &lo));
    assert!(!host_allowed(Some(":7420"), &lo));
    let any = addr("0.0.0.0:7420");
    assert!(host_allowed(Some("192.168.1.5:7420"), &any));
    assert!(!host_allowed(Some("phone.evil.example:7420"), &any));
    let one = addr("192.168.1.5:7420");
    assert!(host_allowed(Some("192.168.1.5:7420"), &one));
    assert!(!host_allowed(Some("10.0.0.1:7420"), &one));
}

#[test]
fn the_page_reaches_only_reading_and_answering() {
    assert!(allowed(&Request::Prompts));
    assert!(allowed(&Request::Answer {
        prompt_id: 1,
        args: vec!["confirm".into()]
    }));
    assert!(!allowed(&Request::Block {
        address: "agent:bob@localhost".into()
    }));
    assert!(!allowed(&Request::SetPermission {
        field: "dietary".into(),
        tier: "always_share".into(),
        for_peer: None
    }));
    assert!(!allowed(&Request::KeyRotate));
    assert!(!allowed(&Request::MemoryExport { address: None }));
}

#[test]
fn a_form_value_is_decoded_and_never_panics() {
    assert_eq!(
        form_value(b"code=ab12-cd34+x&y=1", "code").as_deref(),
        Some("ab12-cd34 x")
    );
    assert_eq!(form_value(b"code=%41%4", "code").as_deref(), Some("A%4"));
    assert_eq!(
        form_value("code=%é%".as_bytes(), "code").as_deref(),
        Some("%é%")
    );
    assert_eq!(form_value(b"other=1", "code"), None);
    assert_eq!(form_value(&[0xff, 0xfe], "code"), None);
}

#[test]
fn pairing_needs_the_code_and_gives_up_after_five_wrong_ones() {
    let a = Access::new(&addr("0.0.0.0:7420"));
    let code = a.code().unwrap().to_string();
    assert_eq!(code.len(), 16);
    assert_eq!(a.csrf_for(None), None);
    let t0 = Instant::now();
    let Pairing::Paired(s) = a.pair(&shown_code(&code).to_uppercase(), t0) else {
        panic!("the code shown, upper case, pairs");
    };
    let cookie = format!("x=1; {SESSION_COOKIE}={s}");
    let csrf = a.csrf_for(Some(&cookie)).unwrap();
    assert!(a.csrf_ok(Some(&cookie), Some(&csrf)));
    assert!(!a.csrf_ok(Some(&cookie), None));
    assert!(!a.csrf_ok(Some(&cookie), Some("0")));
    assert!(!a.csrf_ok(Some("a2acp_session=forged"), Some(&csrf)));
    for _ in 0..PAIRING_FAILURES {
        assert_eq!(a.pair("0000000000000000", t0), Pairing::Wrong);
    }
    // Now even the right code is refused, uncompared, until the window has passed.
    assert_eq!(a.pair(&code, t0), Pairing::TooMany);
    assert!(matches!(
        a.pair(&code, t0 + PAIRING_WINDOW),
        Pairing::Paired(_)
    ));
    let lo = Access::new(&addr("127.0.0.1:7420"));
    assert_eq!(lo.code(), None);
    assert_eq!(lo.pair("x", t0), Pairing::NotNeeded);
    assert!(lo.csrf_for(None).is_some());
}

#[test]
fn sessions_are_capped() {
    let a = Access::new(&addr("0.0.0.0:7420"));
    let code = a.code().unwrap().to_string();
    let first = match a.pair(&code, Instant::now()) {
        Pairing::Paired(s) => s,
        p => panic!("{p:?}"),
    };
    for _ in 0..MAX_SESSIONS {
        assert!(matches!(a.pair(&code, Instant::now()), Pairing::Paired(_)));
    }
    assert_eq!(a.csrf_for(Some(&format!("{SESSION_COOKIE}={first}"))), None);
}

#[test]
fn the_page_has_no_inline_script_or_style_and_builds_no_markup_from_text() {
    for page in [PAGE_HTML, PAIR_HTML] {
        let lower = page.to_lowercase();
        assert!(!lower.contains("<style"), "no inline style");
        assert!(!lower.contains(" style="), "no style attribute");
        assert!(!lower.contains(" on"), "no event handler attribute");
        for (i, _) in lower.match_indices("<script") {
            assert!(lower[i..].starts_with("<script src=\"/app.js\"></script>"));
        }
        assert!(!lower.contains("http://") && !lower.contains("https://"));
    }
    for bad in [
        "innerHTML",
        "outerHTML",
        "insertAdjacentHTML",
        "document.write",
        "eval(",
    ] {
        assert!(!APP_JS.contains(bad), "app.js uses {bad}");
    }
    assert!(!APP_CSS.contains("url(") && !APP_CSS.contains("@import"));
}

/// A fake agent loop: answers every control request with its name, and counts them.
fn fake_agent(rt: &tokio::runtime::Runtime) -> (flume::Sender<Ctl>, flume::Receiver<String>) {
    let (tx, rx) = flume::bounded::<Ctl>(16);
    let (seen_tx, seen_rx) = flume::unbounded();
    rt.spawn(async move {
        while let Ok(c) = rx.recv_async().await {
            if let Ctl::Request(r, back) = c {
                let name = serde_json::to_value(&r).unwrap()["cmd"]
                    .as_str()
                    .unwrap()
                    .to_string();
                let _ = seen_tx.send(name.clone());
                let data = match r {
                    Request::Prompts | Request::Threads | Request::Suggestions => {
                        serde_json::json!([])
                    }
                    Request::Notifications { .. } => serde_json::json!([]),
                    _ => serde_json::json!(format!("{name} done")),
                };
                let _ = back.send(Response {
                    ok: true,
                    error: None,
                    data,
                });
            }
        }
    });
    (tx, seen_rx)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// One HTTP/1.1 exchange over a fresh connection: the whole answer as text.
async fn exchange(at: SocketAddr, raw: String) -> String {
    let mut s = tokio::net::TcpStream::connect(at).await.unwrap();
    s.write_all(raw.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

fn get(at: SocketAddr, path: &str, extra: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nhost: {at}\r\nconnection: close\r\n{extra}\r\n")
}

fn post(at: SocketAddr, path: &str, extra: &str, ctype: &str, body: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nhost: {at}\r\nconnection: close\r\ncontent-type: {ctype}\r\ncontent-length: {}\r\n{extra}\r\n{body}",
        body.len()
    )
}

fn csrf_of(page: &str) -> String {
    let i = page.find("name=\"csrf\" content=\"").unwrap() + 21;
    page[i..i + 32].to_string()
}

#[test]
fn the_listener_refuses_forged_posts_foreign_hosts_and_big_bodies() {
    let rt = runtime();
    let (ctl, seen) = fake_agent(&rt);
    rt.block_on(async {
        let web = Web::bind(&WebOptions {
            listen: "127.0.0.1:0".into(),
        })
        .unwrap();
        let at = web.addr();
        assert_eq!(web.banner(), format!("consent page: http://{at}/"));
        tokio::spawn(web.serve(ctl));

        let page = exchange(at, get(at, "/", "")).await;
        assert!(page.starts_with("HTTP/1.1 200"), "{page}");
        let lower = page.to_lowercase();
        assert!(lower.contains(&format!("content-security-policy: {CSP}").to_lowercase()));
        assert!(lower.contains("frame-ancestors 'none'"));
        assert!(lower.contains("x-content-type-options: nosniff"));
        let csrf = csrf_of(&page);
        let js = exchange(at, get(at, "/app.js", "")).await;
        assert!(js.contains("text/javascript") && js.contains("textContent"));

        let answer = r#"{"cmd":"answer","prompt_id":1,"args":["confirm"]}"#;
        // A forged POST: no token, a wrong one.
        for extra in ["", "x-csrf-token: 00000000000000000000000000000000\r\n"] {
            let r = exchange(at, post(at, "/api/control", extra, "application/json", answer)).await;
            assert!(r.starts_with("HTTP/1.1 403"), "{r}");
            assert!(r.contains("CSRF token"), "{r}");
        }
        // A form post (what a cross-site form can send) with the token is refused too.
        let tok = format!("x-csrf-token: {csrf}\r\n");
        let r = exchange(at, post(at, "/api/control", &tok, "text/plain", answer)).await;
        assert!(r.starts_with("HTTP/1.1 415"), "{r}");
        assert!(seen.try_recv().is_err(), "nothing reached the agent");
        // The real page's request.
        let r = exchange(at, post(at, "/api/control", &tok, "application/json", answer)).await;
        assert!(r.starts_with("HTTP/1.1 200") && r.contains("answer done"), "{r}");
        assert_eq!(seen.try_recv().unwrap(), "answer");
        // What the page may not do.
        let block = r#"{"cmd":"block","address":"agent:bob@localhost"}"#;
        let r = exchange(at, post(at, "/api/control", &tok, "application/json", block)).await;
        assert!(r.starts_with("HTTP/1.1 403"), "{r}");
        let r = exchange(at, post(at, "/api/control", &tok, "application/json", "{nope")).await;
        assert!(r.starts_with("HTTP/1.1 400"), "{r}");
        assert!(seen.try_recv().is_err());
        // DNS rebinding.
        let r = exchange(
            at,
            format!("GET / HTTP/1.1\r\nhost: evil.example:{}\r\nconnection: close\r\n\r\n", at.port()),
        )
        .await;
        assert!(r.starts_with("HTTP/1.1 403") && r.contains("Host header"), "{r}");
        // A body over the cap, refused by its length before it is read.
        let big = format!(
            "POST /api/control HTTP/1.1\r\nhost: {at}\r\ncontent-type: application/json\r\n{tok}content-length: {}\r\n\r\n",
            MAX_BODY + 1
        );
        let r = exchange(at, big).await;
        assert!(r.starts_with("HTTP/1.1 413"), "{r}");
        let r = exchange(at, get(at, "/nope", "")).await;
        assert!(r.starts_with("HTTP/1.1 404"), "{r}");
    });
}

#[test]
fn the_event_stream_sends_the_state_and_its_count_is_capped() {
    let rt = runtime();
    let (ctl, _seen) = fake_agent(&rt);
    rt.block_on(async {
        let web = Web::bind(&WebOptions {
            listen: "127.0.0.1:0".into(),
        })
        .unwrap();
        let at = web.addr();
        tokio::spawn(web.serve(ctl));
        let mut open = Vec::new();
        for _ in 0..MAX_STREAMS {
            let mut s = tokio::net::TcpStream::connect(at).await.unwrap();
            s.write_all(get(at, "/api/events", "").as_bytes())
                .await
                .unwrap();
            let mut buf = vec![0u8; 4096];
            let mut got = String::new();
            while !got.contains("event: state\ndata: ") {
                let n = s.read(&mut buf).await.unwrap();
                assert!(n > 0, "{got}");
                got.push_str(&String::from_utf8_lossy(&buf[..n]));
            }
            assert!(got.contains("text/event-stream"));
            assert!(got.contains(r#""prompts":[]"#), "{got}");
            open.push(s);
        }
        let r = exchange(at, get(at, "/api/events", "")).await;
        assert!(r.starts_with("HTTP/1.1 503"), "{r}");
        // A page closed frees its stream.
        drop(open.pop());
        tokio::time::sleep(STREAM_POLL * 3).await;
        let mut s = tokio::net::TcpStream::connect(at).await.unwrap();
        s.write_all(get(at, "/api/events", "").as_bytes())
            .await
            .unwrap();
        let mut buf = vec![0u8; 64];
        let n = s.read(&mut buf).await.unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    });
}

#[test]
fn off_loopback_a_browser_pairs_by_a_form_and_gets_a_strict_cookie() {
    let rt = runtime();
    let (ctl, seen) = fake_agent(&rt);
    rt.block_on(async {
        let web = Web::bind(&WebOptions {
            listen: "0.0.0.0:0".into(),
        })
        .unwrap();
        let code = web.pairing_code().unwrap();
        assert!(web.banner().contains(&shown_code(&code)));
        let at: SocketAddr = format!("127.0.0.1:{}", web.addr().port()).parse().unwrap();
        tokio::spawn(web.serve(ctl));
        // Unpaired: the pairing form, and no request.
        let r = exchange(at, get(at, "/", "")).await;
        assert!(
            r.contains("Pair this browser") && !r.contains("name=\"csrf\""),
            "{r}"
        );
        let r = exchange(
            at,
            post(
                at,
                "/api/control",
                "",
                "application/json",
                r#"{"cmd":"prompts"}"#,
            ),
        )
        .await;
        assert!(r.starts_with("HTTP/1.1 401"), "{r}");
        let r = exchange(at, get(at, "/api/events", "")).await;
        assert!(r.starts_with("HTTP/1.1 401"), "{r}");
        let form = "application/x-www-form-urlencoded";
        let r = exchange(at, post(at, "/pair", "", form, "code=0000")).await;
        assert!(
            r.starts_with("HTTP/1.1 403") && r.contains("not the pairing code"),
            "{r}"
        );
        let r = exchange(at, post(at, "/pair", "", form, &format!("code={code}"))).await;
        assert!(r.starts_with("HTTP/1.1 303"), "{r}");
        let line = r
            .lines()
            .find(|l| l.to_lowercase().starts_with("set-cookie:"))
            .unwrap();
        assert!(
            line.contains("HttpOnly") && line.contains("SameSite=Strict"),
            "{line}"
        );
        let session = line
            .split_once(": ")
            .unwrap()
            .1
            .split(';')
            .next()
            .unwrap()
            .to_string();
        let cookie = format!("cookie: {session}\r\n");
        let page = exchange(at, get(at, "/", &cookie)).await;
        let csrf = csrf_of(&page);
        let both = format!("{cookie}x-csrf-token: {csrf}\r\n");
        let r = exchange(
            at,
            post(
                at,
                "/api/control",
                &both,
                "application/json",
                r#"{"cmd":"prompts"}"#,
            ),
        )
        .await;
        assert!(r.starts_with("HTTP/1.1 200"), "{r}");
        assert_eq!(seen.try_recv().unwrap(), "prompts");
        // The session without its token is a forged POST.
        let r = exchange(
            at,
            post(
                at,
                "/api/control",
                &cookie,
                "application/json",
                r#"{"cmd":"prompts"}"#,
            ),
        )
        .await;
        assert!(r.starts_with("HTTP/1.1 403"), "{r}");
    });
}
