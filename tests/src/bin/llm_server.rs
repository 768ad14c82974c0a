//! A scripted OpenAI-compatible chat-completions server for the tests, run as a separate
//! process: `llm_server [--secret VALUE]` prints `listening HOST:PORT` and serves
//! `POST /chat/completions` until killed; `GET /stats` answers the calls seen per model.
//!
//! The request's `model` is the script: `KIND` or `KIND*N` (the first N calls of that
//! model behave as KIND, later ones as `ok`), with KIND one of
//! - `ok`: the deterministic negotiator's decision on the prompt's thread (read back from
//!   the layers), with a confidence of 0.9;
//! - `lowconf`: the same with a confidence of 0.2;
//! - `429`: HTTP 429 with `Retry-After: 1`; `500`: HTTP 500;
//! - `hang`: the head and half a body, then nothing (a response that never finishes);
//! - `slow`: the first byte after 1.5 s, then `ok`;
//! - `malformed`: HTTP 200 whose body is not JSON;
//! - `prose`: a completion whose content is prose, not JSON;
//! - `violate`: a completion whose content breaks the schema (`{"decision":"teleport"}`);
//! - `leak`: a completion escalating with the `--secret` value in its reason;
//! - `obey`: a completion that does what an injected peer instruction asked: proposes
//!   with the `--secret` value in the details.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use a2acp_core::agent::{prompt_thread, LlmLayer, PEER_DATA_LAYER};
use a2acp_core::negotiator::{self, Rejected, View};
use a2acp_core::packet::{Context, Intent};
use a2acp_core::Address;
use serde_json::{json, Value};

type Stats = Arc<Mutex<BTreeMap<String, u64>>>;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let secret = args
        .iter()
        .position(|a| a == "--secret")
        .and_then(|i| args.get(i + 1).cloned())
        .unwrap_or_default();
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    println!("listening {}", listener.local_addr().expect("addr"));
    let _ = std::io::stdout().flush();
    let stats: Stats = Arc::default();
    for conn in listener.incoming().flatten() {
        let stats = stats.clone();
        let secret = secret.clone();
        std::thread::spawn(move || {
            let _ = serve(conn, &stats, &secret);
        });
    }
}

fn serve(mut conn: TcpStream, stats: &Stats, secret: &str) -> std::io::Result<()> {
    // The head and the body go in two writes: without this the body would wait for the
    // client's delayed ACK of the head on a kept-alive connection.
    conn.set_nodelay(true)?;
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut first = String::new();
    reader.read_line(&mut first)?;
    let mut len = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                len = v.trim().parse().unwrap_or(0);
            }
        }
    }
    let mut body = vec![0u8; len.min(16 << 20)];
    reader.read_exact(&mut body)?;
    if first.starts_with("GET /stats") {
        let s = serde_json::to_string(&*stats.lock().unwrap()).unwrap_or_default();
        return respond(&mut conn, 200, &[], &s);
    }
    let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let model = req["model"].as_str().unwrap_or("ok").to_string();
    let n = {
        let mut s = stats.lock().unwrap();
        let c = s.entry(model.clone()).or_insert(0);
        *c += 1;
        *c
    };
    let (kind, times) = match model.split_once('*') {
        Some((k, t)) => (k, t.parse::<u64>().unwrap_or(1)),
        None => (model.as_str(), u64::MAX),
    };
    let kind = if n > times { "ok" } else { kind };
    let completion = |content: String| {
        json!({"id": "chatcmpl-1", "object": "chat.completion", "model": model,
               "choices": [{"index": 0, "finish_reason": "stop",
                            "message": {"role": "assistant", "content": content}}]})
        .to_string()
    };
    match kind {
        "429" => respond(&mut conn, 429, &[("Retry-After", "1")], "{\"error\":\"rate\"}"),
        "500" => respond(&mut conn, 500, &[], "{\"error\":\"boom\"}"),
        "hang" => {
            write!(
                conn,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 1000\r\nConnection: close\r\n\r\n{{\"choices\": ["
            )?;
            conn.flush()?;
            std::thread::sleep(Duration::from_secs(3600));
            Ok(())
        }
        "malformed" => respond(&mut conn, 200, &[], "{\"choices\": [ this is not json"),
        "prose" => respond(
            &mut conn,
            200,
            &[],
            &completion("Sure! Dinner sounds lovely, let me know.".into()),
        ),
        "violate" => respond(
            &mut conn,
            200,
            &[],
            &completion("{\"decision\": \"teleport\", \"needs\": 7}".into()),
        ),
        "leak" => respond(
            &mut conn,
            200,
            &[],
            &completion(
                json!({"decision": "escalate", "reason": format!("the user has {secret}"), "summary": secret})
                    .to_string(),
            ),
        ),
        "obey" => {
            let d = decide(&req).unwrap_or(json!({"decision": "wait"}));
            let mut d = d;
            if d["decision"] == "propose" {
                d["proposal"]["details"]["health_info"] = json!(secret);
            } else {
                d = json!({"decision": "escalate", "reason": "as the peer asked", "summary": secret});
            }
            respond(&mut conn, 200, &[], &completion(d.to_string()))
        }
        _ => {
            if kind == "slow" {
                std::thread::sleep(Duration::from_millis(1500));
            }
            let mut d = decide(&req).unwrap_or(json!({"decision": "wait"}));
            d["confidence"] = json!(if kind == "lowconf" { 0.2 } else { 0.9 });
            respond(&mut conn, 200, &[], &completion(d.to_string()))
        }
    }
}

fn respond(
    conn: &mut TcpStream,
    status: u16,
    headers: &[(&str, &str)],
    body: &str,
) -> std::io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    conn.write_all(head.as_bytes())?;
    conn.write_all(body.as_bytes())?;
    conn.flush()
}

/// The layers of the chat request read back: the system message's `## layer: NAME`
/// sections, the user message's peer-data block.
fn layers(req: &Value) -> Vec<LlmLayer> {
    let mut out = Vec::new();
    let system = req
        .pointer("/messages/0/content")
        .and_then(Value::as_str)
        .unwrap_or("");
    for section in system.split("## layer: ").skip(1) {
        if let Some((name, content)) = section.split_once('\n') {
            out.push(LlmLayer {
                name: name.to_string(),
                // A layer ends at the blank line before the next section.
                content: content.split("\n\n").next().unwrap_or("").to_string(),
                untrusted: false,
            });
        }
    }
    let user = req
        .pointer("/messages/1/content")
        .and_then(Value::as_str)
        .unwrap_or("");
    if let (Some(a), Some(b)) = (user.find("<<<PEER_DATA "), user.rfind("<<<END_PEER_DATA ")) {
        let end = user[b..]
            .find(">>>")
            .map(|e| b + e + 3)
            .unwrap_or(user.len());
        out.push(LlmLayer {
            name: PEER_DATA_LAYER.into(),
            content: user[a..end].to_string(),
            untrusted: true,
        });
    }
    out
}

/// What the deterministic negotiator decides on the prompt's thread.
fn decide(req: &Value) -> Option<Value> {
    let v = Value::Object(prompt_thread(&layers(req))?);
    let intent: Intent = serde_json::from_value(v.get("intent")?.clone()).ok()?;
    let me: Address = serde_json::from_value(v.get("me")?.clone()).ok()?;
    let peer: Address = serde_json::from_value(v.get("peer")?.clone()).ok()?;
    let obj = |k: &str| -> Context {
        v.get(k)
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default()
    };
    let set = |k: &str| {
        v.get(k)
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default()
    };
    let (mine, asked, unavailable, usually_declined) = (
        obj("mine"),
        set("asked"),
        set("unavailable"),
        set("usually_declined"),
    );
    let theirs = obj("theirs");
    let remembered = obj("remembered");
    let rejected: Vec<Rejected> = v
        .get("rejected")
        .and_then(|r| serde_json::from_value(r.clone()).ok())
        .unwrap_or_default();
    let view = View {
        intent: &intent,
        i_am_initiator: v.get("initiator")?.as_bool()?,
        me: &me,
        peer: &peer,
        mine: &mine,
        theirs: &theirs,
        asked: &asked,
        unavailable: &unavailable,
        remembered: &remembered,
        usually_declined: &usually_declined,
        rejected: &rejected,
        round_trips: v.get("round_trips").and_then(Value::as_u64).unwrap_or(0) as u32,
    };
    serde_json::to_value(negotiator::decide(&view)).ok()
}
