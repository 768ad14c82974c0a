//! The consent page's figures, printed: clicks from a consent prompt's arrival to the
//! packet sent (and for the proposal), on the page against the terminal's keys; the
//! page's size in bytes; its time to first render in headless Chromium (Navigation Timing
//! and Paint Timing, read through WebDriver), over several loads. Alice's agent (tokio,
//! `--web` on loopback) in the spec's dinner with Bob's scripted agent, in this process.
//!
//! `cargo bench -p a2acp-tests --bench consent_page` (`CONSENT_PAGE_BENCH_LOADS=N`; needs
//! Chromium and chromedriver: `bash .ci/chromium`).

use a2acp_runtime::scripted::ScriptedUser;
use a2acp_tests::webdriver::Driver;
use a2acp_tests::*;
use serde_json::json;

fn main() {
    let loads: usize = std::env::var("CONSENT_PAGE_BENCH_LOADS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dir = tmp();
        let relay = Runtime::Tokio
            .relay(&free_addr(), &dir.path().join("relay"))
            .await;
        let DinnerHomes {
            bob_cfg,
            alice: ha,
            bob: hb,
            ..
        } = dinner_homes(dir.path(), &relay.url());
        let alice = Runtime::Tokio.agent_with_web(&ha, "alice");
        let bob = Runtime::Tokio.agent(&hb, "bob", Some(ScriptedUser::dinner()));
        wait_online(&alice).await;
        wait_online(&bob).await;
        let url = format!("http://{}/", alice.web_addr().unwrap());

        // The page's bytes, as served.
        let mut bytes = Vec::new();
        for path in ["", "app.js", "app.css"] {
            let mut r = ureq::get(format!("{url}{path}")).call().unwrap();
            bytes.push((path, r.body_mut().read_to_vec().unwrap().len()));
        }
        let total: usize = bytes.iter().map(|(_, n)| n).sum();

        let u = url.clone();
        let (dcl, fcp) = tokio::task::spawn_blocking(move || {
            let driver = Driver::start();
            let (mut dcl, mut fcp) = (Vec::new(), Vec::new());
            for _ in 0..loads {
                // A fresh window each time: no cached script or style.
                let b = driver.browser(390, 844);
                b.goto(&u);
                let t = b.script(
                    "var n = performance.getEntriesByType('navigation')[0];
                     var p = performance.getEntriesByName('first-contentful-paint')[0];
                     return [n.domContentLoadedEventEnd - n.startTime, p ? p.startTime : -1];",
                    json!([]),
                );
                dcl.push(t[0].as_f64().unwrap());
                fcp.push(t[1].as_f64().unwrap());
            }
            (dcl, fcp)
        })
        .await
        .unwrap();

        // Clicks: the consent prompt arrives on the open page; one click sends it.
        let before = threads(&alice).await.len();
        let u = url.clone();
        let browser = tokio::task::spawn_blocking(move || {
            let driver = Driver::start();
            let b = driver.browser(390, 844);
            b.goto(&u);
            b.wait_text("#live", "live", 20);
            (driver, b)
        })
        .await
        .unwrap();
        alice
            .tell(a2acp_runtime::scripted::start_dinner(
                bob_cfg.address.clone(),
                &a2acp_runtime::scripted::next_friday(a2acp_runtime::now()),
            ))
            .await;
        let (consent_clicks, browser) = tokio::task::spawn_blocking(move || {
            let (_, b) = &browser;
            b.wait_for(".prompt.consent", 30);
            b.click(".prompt.consent button.share");
            b.wait_text("#status", "answered", 10);
            (1, browser)
        })
        .await
        .unwrap();
        eventually(30, "Alice's reply sent", || async {
            let t = threads(&alice).await;
            (t.len() > before && t[0].packets >= 3).then_some(())
        })
        .await;
        let (confirm_clicks, _browser) = tokio::task::spawn_blocking(move || {
            let (_, b) = &browser;
            b.wait_for(".prompt.resolution", 30);
            b.click(".prompt.resolution button.confirm");
            b.wait_text("#status", "answered", 10);
            (1, browser)
        })
        .await
        .unwrap();
        wait_state(&alice, "COMPLETED", 30).await;

        let median = |v: &mut Vec<f64>| {
            v.sort_by(|a, b| a.partial_cmp(b).unwrap());
            v[v.len() / 2]
        };
        let (mut dcl, mut fcp) = (dcl, fcp);
        println!("consent page ({loads} loads in headless Chromium, 390x844):");
        println!(
            "  bytes: {total} in all ({})",
            bytes
                .iter()
                .map(|(p, n)| format!("/{p} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
        println!(
            "  DOMContentLoaded: median {:.1} ms, worst {:.1} ms",
            median(&mut dcl),
            dcl.last().unwrap()
        );
        println!(
            "  first contentful paint: median {:.1} ms, worst {:.1} ms",
            median(&mut fcp),
            fcp.last().unwrap()
        );
        println!(
            "  taps from the consent prompt's arrival to the packet sent: page {consent_clicks} click (\"Share selected\", known values preselected), terminal 1 key (`a`); choosing each value first: 1 + one per field"
        );
        println!(
            "  taps to confirm the proposal: page {confirm_clicks} click (\"Confirm\"), terminal 1 key (`c`)"
        );
        alice.stop().await;
        bob.stop().await;
    });
}
