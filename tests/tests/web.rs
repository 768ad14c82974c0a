//! The consent page (`agent run --web`) in a real browser: headless Chromium driven over
//! WebDriver. Alice and Bob each answer on their own page (Bob on a phone-sized window),
//! clicking the value buttons and confirming the proposal; the dinner completes and each
//! page shows it. Then a peer's hostile intent summary (markup, control characters) is
//! shown as text and runs nothing, and a forged POST without the CSRF token is refused.
//! Between the two, Bob's page shows the usage rule Alice's transport mode came with, and
//! Alice takes it back with one tap: both pages show it deleted, confirmed signed.
//! Screenshots of each page at each step go to `target/screenshots/web/<runtime>/`; the
//! figures of the closing note (clicks, bytes, time to first render) are printed.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use a2acp_runtime::control::Request;
use a2acp_runtime::home::Home;
use a2acp_runtime::scripted::{next_friday, start_dinner};
use a2acp_tests::webdriver::{Browser, Driver};
use a2acp_tests::*;
use serde_json::{json, Value};

per_runtime!(
    #[ignore = "needs Chromium and chromedriver: bash .ci/chromium (apt-get install -y --no-install-recommends chromium chromium-driver)"]
    alice_and_bob_answer_on_their_pages
);

/// A hostile intent summary: markup that would run script if it were parsed, ANSI
/// escapes, a bidirectional override, a NUL.
const HOSTILE: &str = "<img src=x onerror=\"window.__pwned=1\"><script>window.__pwned=2</script>\u{1b}[31m\u{202e}evil\u{0}";

async fn alice_and_bob_answer_on_their_pages(rt: Runtime) {
    let dir = tmp();
    let relay = rt.relay(&free_addr(), &dir.path().join("relay")).await;
    let DinnerHomes {
        bob_cfg,
        alice: ha,
        bob: hb,
        ..
    } = dinner_homes(dir.path(), &relay.url());
    let alice = rt.agent_with_web(&ha, "alice");
    let bob = rt.agent_with_web(&hb, "bob");
    wait_online(&alice).await;
    wait_online(&bob).await;
    let ua = format!("http://{}/", alice.web_addr().unwrap());
    let ub = format!("http://{}/", bob.web_addr().unwrap());
    let shots = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../target/screenshots/web")
        .join(rt.name());
    let _ = std::fs::remove_dir_all(&shots);
    let bob_addr = bob_cfg.address.to_string();
    let (ha2, hb2) = (ha.clone(), hb.clone());
    let figures =
        tokio::task::spawn_blocking(move || drive(&ua, &ub, &shots, &ha2, &hb2, &bob_addr))
            .await
            .unwrap();
    println!("consent page figures ({}): {figures}", rt.name());
    // What the pages showed is what the agents hold: the dinner completed on both sides.
    for h in [&alice, &bob] {
        let t = threads(h).await;
        assert!(
            t.iter()
                .any(|t| t.summary == "Coordinate dinner on Friday" && t.state == "COMPLETED"),
            "{t:?}"
        );
    }
    alice.stop().await;
    bob.stop().await;
}

/// One control request over the Unix socket of `home`, blocking (from the browser's
/// thread).
fn ctl_blocking(home: &Home, req: &Request) -> Value {
    let mut s = std::os::unix::net::UnixStream::connect(home.socket()).unwrap();
    let mut line = serde_json::to_vec(req).unwrap();
    line.push(b'\n');
    s.write_all(&line).unwrap();
    let mut out = String::new();
    BufReader::new(s).read_line(&mut out).unwrap();
    serde_json::from_str(&out).unwrap()
}

fn shot(b: &Browser, dir: &Path, n: &mut u32, what: &str) {
    *n += 1;
    b.screenshot(&dir.join(format!("{:02}-{what}.png", *n)));
}

/// Whether the page scrolls sideways (it must not, on a phone).
fn scrolls_sideways(b: &Browser) -> bool {
    b.script(
        "return document.documentElement.scrollWidth > window.innerWidth;",
        json!([]),
    )
    .as_bool()
    .unwrap()
}

fn drive(ua: &str, ub: &str, shots: &Path, ha: &Home, hb: &Home, bob: &str) -> Value {
    let driver = Driver::start();
    let a = driver.browser(1024, 900);
    let b = driver.browser(390, 844);
    a.goto(ua);
    b.goto(ub);
    let render = a.script(
        "var n = performance.getEntriesByType('navigation')[0];
         var p = performance.getEntriesByName('first-contentful-paint')[0];
         return {dom_content_loaded_ms: n.domContentLoadedEventEnd - n.startTime,
                 first_contentful_paint_ms: p ? p.startTime : null,
                 page_bytes: n.transferSize, decoded_bytes: n.decodedBodySize};",
        json!([]),
    );
    for p in [&a, &b] {
        p.wait_text("#live", "live", 20);
        assert_eq!(p.text("#h-prompts"), "Waiting for you");
        p.wait_text("#no-prompts", "Nothing to answer", 5);
    }
    let mut n = 0;
    shot(&a, shots, &mut n, "alice-start");
    shot(&b, shots, &mut n, "bob-start");

    // Alice's transport mode travels with a rule (issue 35 part 6).
    let r = ctl_blocking(
        ha,
        &Request::SetUsageRule {
            field: "transport_mode".into(),
            purpose: true,
            expires_after: Some("30d".into()),
            no_reshare: true,
            clear: false,
        },
    );
    assert_eq!(r["ok"], true, "{r}");

    // The dinner, started at Alice's control socket.
    let r = ctl_blocking(ha, &start_request(bob, "Coordinate dinner on Friday"));
    assert_eq!(r["ok"], true, "{r}");

    let mut clicks = json!({});
    let end = Instant::now() + Duration::from_secs(90);
    let mut answered = Vec::new();
    loop {
        assert!(
            Instant::now() < end,
            "the dinner did not complete: {answered:?}"
        );
        let done = [&a, &b]
            .iter()
            .all(|p| p.text("#thread-list").contains("COMPLETED"));
        if done {
            break;
        }
        for (who, p) in [("alice", &a), ("bob", &b)] {
            if p.count(".prompt.consent") > 0 {
                let card = p.text(".prompt.consent");
                assert!(card.contains("is asking for"), "{card}");
                assert!(p.count(".prompt.consent button.no") > 0);
                assert!(p.count(".prompt.consent button.share") == 1);
                assert!(p.count(".prompt.consent button.decline") == 1);
                if who == "bob" {
                    assert!(!scrolls_sideways(p), "Bob's phone page scrolls sideways");
                }
                shot(p, shots, &mut n, &format!("{who}-consent"));
                let id = prompt_id(p, ".prompt.consent");
                let fields = p.count(".prompt.consent .field");
                let mut c = 0;
                for k in 1..=fields {
                    let css = format!(".prompt.consent .field:nth-of-type({k}) button.value");
                    if p.count(&css) > 0 {
                        p.click(&css);
                        c += 1;
                        assert_eq!(
                            p.script(
                                "return document.querySelector(arguments[0]).getAttribute('aria-pressed');",
                                json!([css]),
                            ),
                            "true"
                        );
                    }
                }
                p.click(".prompt.consent button.share");
                c += 1;
                clicks[format!("{who}_consent")] = json!(c);
                answered.push(format!("{who} consent"));
                wait_closed(p, &id);
                shot(p, shots, &mut n, &format!("{who}-consent-answered"));
            }
            if p.count(".prompt.resolution") > 0 {
                let card = p.text(".prompt.resolution");
                for label in [
                    "Confirm",
                    "A different time",
                    "A different place",
                    "Make an excuse",
                ] {
                    assert!(card.contains(label), "{label} in {card}");
                }
                if who == "bob" {
                    assert!(!scrolls_sideways(p), "Bob's phone page scrolls sideways");
                }
                shot(p, shots, &mut n, &format!("{who}-proposal"));
                let id = prompt_id(p, ".prompt.resolution");
                p.click(".prompt.resolution button.confirm");
                clicks[format!("{who}_confirm")] = json!(1);
                answered.push(format!("{who} confirm"));
                wait_closed(p, &id);
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    for (who, p) in [("alice", &a), ("bob", &b)] {
        p.wait_text("#no-prompts", "Nothing to answer", 10);
        assert!(p.text(".thread").contains("Coordinate dinner on Friday"));
        // The timeline, opened.
        p.click(".thread button.timeline-toggle");
        p.wait_for(".thread .timeline li", 10);
        shot(p, shots, &mut n, &format!("{who}-completed"));
        // What the person shared and confirmed, signed (issue 35 part 3).
        p.wait_text("#receipt-list", "Confirmed", 10);
        let list = p.text("#receipt-list");
        assert!(
            list.contains("Shared: ") && list.contains("at prompt"),
            "{who}: {list}"
        );
        assert!(
            list.contains("The proposal, confirmed by you"),
            "{who}: {list}"
        );
    }
    assert!(
        answered.iter().any(|s| s == "alice consent"),
        "{answered:?}"
    );
    assert!(
        answered.iter().any(|s| s == "alice confirm"),
        "{answered:?}"
    );

    // Bob's page shows the rule Alice's value came with; Alice's receipt records it.
    b.wait_text(
        ".thread",
        "They shared transport_mode \u{2014} only for scheduling; deleted at ",
        10,
    );
    assert!(b.text(".thread").contains("not to be passed on"));
    assert!(a.text("#receipt-list").contains("not to be passed on"));

    // Taking back from the page (issue 35 part 5): one tap on what Alice shared; Bob's
    // agent deletes it and confirms, signed, and both pages say so.
    let field = "transport_mode";
    let css = format!(".thread button.retract[data-field=\"{field}\"]");
    a.wait_for(&css, 10);
    a.click(&css);
    a.wait_text("#status", &format!("to delete {field}"), 10);
    a.wait_text(".thread", "they confirmed, signed", 30);
    b.wait_text(
        ".thread",
        &format!("They took back {field} (deleted here)"),
        30,
    );
    clicks["alice_retract"] = json!(1);
    shot(&a, shots, &mut n, "alice-took-back");
    shot(&b, shots, &mut n, "bob-deleted");

    // A peer's hostile summary: Bob's page shows it as text, and nothing runs.
    let r = ctl_blocking(ha, &start_request(bob, HOSTILE));
    assert_eq!(r["ok"], true, "{r}");
    let before = b.count("body *");
    b.wait_text("#thread-list", "onerror", 30);
    std::thread::sleep(Duration::from_millis(500));
    let list = b.text("#thread-list");
    assert!(list.contains("<img src=x"), "shown as text: {list}");
    assert!(
        !list.contains('\u{1b}') && !list.contains('\u{202e}'),
        "{list:?}"
    );
    assert_eq!(b.count("img"), 0, "an element was injected");
    assert_eq!(b.count("#thread-list script, #prompt-list script"), 0);
    assert_eq!(b.count("script"), 1, "the page's own script only");
    assert!(b.count("body *") > before, "the new thread's card is there");
    assert_eq!(
        b.script("return window.__pwned === undefined;", json!([])),
        true
    );
    assert!(!scrolls_sideways(&b));
    shot(&b, shots, &mut n, "bob-hostile-summary");
    // Any prompt the hostile thread opens is escaped alike.
    assert_eq!(a.count("img"), 0);
    assert_eq!(
        a.script("return window.__pwned === undefined;", json!([])),
        true
    );

    // A forged POST: the page's own origin, without the CSRF token.
    let forged = a.script_async(
        "var done = arguments[arguments.length - 1];
         fetch('/api/control', {method: 'POST', headers: {'content-type': 'application/json'},
               body: JSON.stringify({cmd: 'answer', prompt_id: 1, args: ['confirm']})})
           .then(function (r) { return r.text().then(function (t) { done([r.status, t]); }); });",
        json!([]),
    );
    assert_eq!(forged[0], 403, "{forged}");
    assert!(
        forged[1].as_str().unwrap().contains("CSRF token"),
        "{forged}"
    );
    let _ = hb;
    json!({
        "clicks": clicks,
        "first_render": render,
        "screenshots": n,
    })
}

/// The prompt number of the first card matching `css`.
fn prompt_id(p: &Browser, css: &str) -> String {
    p.script(
        "return document.querySelector(arguments[0]).dataset.prompt;",
        json!([css]),
    )
    .as_str()
    .unwrap()
    .to_string()
}

/// Waits until the card of prompt `id` leaves the page (the answer reached the agent and
/// the event stream told the page), and the page says it was answered.
fn wait_closed(p: &Browser, id: &str) {
    let end = Instant::now() + Duration::from_secs(15);
    while p.count(&format!("[data-prompt=\"{id}\"]")) > 0 {
        assert!(Instant::now() < end, "prompt #{id} still shown");
        std::thread::sleep(Duration::from_millis(50));
    }
    p.wait_text("#status", &format!("prompt #{id} answered"), 5);
}

fn start_request(bob: &str, summary: &str) -> Request {
    let a2acp_core::agent::Command::StartThread { context, .. } = start_dinner(
        a2acp_core::Address::parse(bob).unwrap(),
        &next_friday(a2acp_runtime::now()),
    ) else {
        unreachable!()
    };
    Request::StartThread {
        to: bob.to_string().into(),
        category: "scheduling".into(),
        summary: summary.into(),
        context: Some(context),
        urgent: false,
        quorum: None,
        sequential: false,
    }
}
