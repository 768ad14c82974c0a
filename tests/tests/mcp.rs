//! The MCP bridge (§17) against the official MCP Python SDK (`mcp` on PyPI, installed by
//! `.ci/run` into `target/mcp-venv`): `tests/mcp/negotiate.py` is an MCP host for Alice and
//! one for Bob, each talking to its person's running agent through `a2acp mcp` on stdio.
//! Alice's host starts the dinner; each host answers the agent's prompts by asking its
//! person (MCP elicitation); a host that cannot ask its person is refused and the prompt
//! stays open; the person refusing to loosen a permission changes nothing; subscribed
//! hosts hear of prompts and threads; both threads end COMPLETED — on agents running on
//! tokio and on smol. With `--host-answers`, a host without elicitation answers with the
//! call's arguments.

use std::path::PathBuf;
use std::process::Stdio;

use a2acp_runtime::control::Request;
use a2acp_runtime::home::Home;
use a2acp_runtime::scripted::next_friday;
use a2acp_tests::*;

per_runtime!(an_mcp_host_negotiates_a_dinner_and_its_person_answers_the_prompts);

/// The mcp venv's interpreter, or why the test skips.
fn python() -> Option<PathBuf> {
    venv_python(
        "mcp",
        "A2ACP_MCP_PYTHON",
        "bash .ci/python-venv mcp mcp==2.3.0",
        &[],
    )
}

fn bridge(home: &Home) -> String {
    serde_json::to_string(&[
        env!("CARGO_BIN_EXE_mcp_bridge"),
        "--home",
        home.dir().to_str().unwrap(),
    ])
    .unwrap()
}

async fn an_mcp_host_negotiates_a_dinner_and_its_person_answers_the_prompts(rt: Runtime) {
    let Some(python) = python() else { return };
    let dir = tmp();
    let relay = rt.relay("127.0.0.1:0", &dir.path().join("relay")).await;
    let DinnerHomes {
        bob_cfg,
        alice: ha,
        bob: hb,
        ..
    } = dinner_homes(dir.path(), &relay.url());
    let alice = rt.agent(&ha, "alice", None);
    let bob = rt.agent(&hb, "bob", None);
    wait_online(&alice).await;
    wait_online(&bob).await;

    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("mcp/negotiate.py");
    let date = next_friday(a2acp_runtime::now());
    let run = tokio::process::Command::new(&python)
        .arg(&script)
        .arg(bridge(&ha))
        .arg(bridge(&hb))
        .arg(bob_cfg.address.to_string())
        .arg(&date)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(std::time::Duration::from_secs(150), run)
        .await
        .expect("the MCP host finished within 150 s")
        .expect("run the MCP host");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the MCP host failed:\n{stdout}\n{stderr}"
    );
    let report: serde_json::Value =
        serde_json::from_str(stdout.lines().last().unwrap_or("{}")).expect("the host's report");
    assert_eq!(report["protocol"], "2025-11-25");
    assert_eq!(report["refused_without_elicitation"], true);
    let thread_id = report["thread_id"].as_str().unwrap().to_string();

    // What the agents say, read without MCP: completed on both sides, every prompt
    // answered by a person, Alice's permissions narrowed but never loosened.
    for home in [&ha, &hb] {
        let r = ctl(
            home,
            Request::Thread {
                id: thread_id.clone(),
            },
        )
        .await;
        assert!(r.ok, "{r:?}");
        assert_eq!(r.data["state"], "COMPLETED", "{}", r.data);
        let r = ctl(home, Request::Prompts).await;
        assert_eq!(r.data, serde_json::json!([]), "prompts left open");
    }
    let perms = ctl(&ha, Request::Permissions).await;
    let text = perms.data.to_string();
    assert!(text.contains("budget_range"), "{text}");
    assert!(
        !text.contains("\"health\":\"always_share\""),
        "a refused permission was set: {text}"
    );
    alice.stop().await;
    bob.stop().await;
}

/// A host the person declared shows them every tool call (`--host-answers`): a host
/// without elicitation then answers with the call's arguments — and without them is told
/// to give them.
const HOST_ANSWERS: &str = r#"
import json, sys, anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

async def main(cmd):
    async with stdio_client(StdioServerParameters(command=cmd[0], args=cmd[1:])) as (r, w):
        async with ClientSession(r, w) as s:
            await s.initialize()
            out = {}
            for name, args in [
                ("answer", {"prompt_id": 99}),
                ("answer", {"prompt_id": 99, "args": ["confirm"]}),
                ("set_permission", {"field": "transport_mode", "tier": "always_share"}),
            ]:
                res = await s.call_tool(name, args)
                out[f"{name}{len(args)}"] = [bool(res.is_error), " ".join(c.text for c in res.content)]
            print(json.dumps(out))

anyio.run(main, json.loads(sys.argv[1]))
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_host_answers_the_call_carries_the_answer() {
    let Some(python) = python() else { return };
    let dir = tmp();
    let relay = Runtime::Tokio
        .relay("127.0.0.1:0", &dir.path().join("relay"))
        .await;
    let DinnerHomes { alice: ha, .. } = dinner_homes(dir.path(), &relay.url());
    let alice = Runtime::Tokio.agent(&ha, "alice", None);
    wait_online(&alice).await;
    let mut cmd: Vec<String> = serde_json::from_str(&bridge(&ha)).unwrap();
    cmd.push("--host-answers".into());
    let out = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        tokio::process::Command::new(&python)
            .arg("-c")
            .arg(HOST_ANSWERS)
            .arg(serde_json::to_string(&cmd).unwrap())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the host finished within 60 s")
    .expect("run the host");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
    // No answer in the call: the bridge asks for it instead of asking the person.
    assert_eq!(r["answer1"][0], true);
    assert!(r["answer1"][1].as_str().unwrap().contains("args"), "{r}");
    // The answer in the call reaches the agent (which has no prompt 99).
    assert_eq!(r["answer2"][0], true);
    assert!(
        !r["answer2"][1].as_str().unwrap().contains("elicitation"),
        "{r}"
    );
    // A loosening goes through without a question.
    assert_eq!(r["set_permission2"][0], false, "{r}");
    let perms = ctl(&ha, Request::Permissions).await.data;
    let tier = |t: &str| perms["tiers"][t].to_string();
    assert!(tier("always_share").contains("transport_mode"), "{perms}");
    assert!(!tier("ask_first").contains("transport_mode"), "{perms}");
    alice.stop().await;
}
