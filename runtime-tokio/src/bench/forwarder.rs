//! The baseline of `a2acp bench relay`: a bare WebSocket forwarder with no protocol
//! at all (`a2acp bench forwarder`, a child process), and the load driven through it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_tungstenite::tungstenite::{Bytes, Message};
use futures_util::{SinkExt, StreamExt};

use super::relay::{measure, percentile, Stats};
use super::*;

/// The hidden forwarder baseline's arguments.
#[derive(Debug, Clone, clap::Args)]
pub struct ForwarderArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: String,
}

pub(super) async fn drive_forwarder(
    url: &str,
    n: usize,
    frame_len: usize,
    a: &BenchArgs,
    pid: u32,
) -> Result<Figures, BenchError> {
    let stats = Arc::new(Stats {
        delivered: AtomicU64::new(0),
        accepted: AtomicU64::new(0),
        measuring: AtomicBool::new(false),
        start: Instant::now(),
    });
    let stop = Arc::new(AtomicBool::new(false));
    let mut conns = Vec::with_capacity(n);
    for chunk in (0..n).collect::<Vec<_>>().chunks(64) {
        for (i, r) in chunk.iter().zip(
            futures_util::future::join_all(chunk.iter().map(|_| crate::ws::connect(url))).await,
        ) {
            let mut ws = r.map_err(|e| e.to_string())?;
            ws.send(Message::Binary(Bytes::from(
                (*i as u32).to_le_bytes().to_vec(),
            )))
            .await
            .map_err(|e| e.to_string())?;
            conns.push(ws);
        }
    }
    let per_agent_interval = a
        .rate
        .map(|r| Duration::from_secs_f64(n as f64 / r.max(1) as f64));
    let mut tasks = Vec::new();
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    for (i, ws) in conns.into_iter().enumerate() {
        let (stats, stop) = (stats.clone(), stop.clone());
        let window = a.window.max(1);
        let targets: Vec<u32> = (0..8)
            .map(|_| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let j = (rng % n as u64) as usize;
                (if j == i { (j + 1) % n } else { j }) as u32
            })
            .collect();
        tasks.push(tokio::spawn(async move {
            let (mut sink, mut source) = ws.split();
            let mut lat = Vec::new();
            let mut outstanding = 0usize;
            let mut next = 0usize;
            let mut tick = per_agent_interval.map(|d| tokio::time::interval_at(tokio::time::Instant::now() + d.mul_f64((i as f64 * 0.618).fract()), d));
            let mut msg = vec![b'x'; frame_len.max(16)];
            let mut first = true;
            loop {
                if stop.load(Ordering::Relaxed) { break; }
                let mut to_send = 0usize;
                if first && tick.is_none() {
                    to_send = window;
                    first = false;
                } else {
                tokio::select! {
                    m = source.next() => {
                        let Some(Ok(Message::Binary(b))) = m else { break };
                        if b.len() == 1 {
                            outstanding = outstanding.saturating_sub(1);
                            continue;
                        }
                        if b.len() >= 12 && stats.measuring.load(Ordering::Relaxed) {
                            let at = u64::from_le_bytes(b[4..12].try_into().unwrap_or([0; 8]));
                            lat.push(stats.ns().saturating_sub(at));
                            stats.delivered.fetch_add(1, Ordering::Relaxed);
                        }
                        // The sender's window is freed by a one-byte receipt, as `accepted` does.
                        let from = u32::from_le_bytes(b[12..16].try_into().unwrap_or([0; 4]));
                        let mut r = from.to_le_bytes().to_vec();
                        r.push(1);
                        if sink.feed(Message::Binary(Bytes::from(r))).await.is_err() { break; }
                    }
                    _ = async { match tick.as_mut() { Some(t) => { t.tick().await; } None => std::future::pending().await } } => { to_send = 1; }
                }
                }
                if tick.is_none() {
                    to_send = window.saturating_sub(outstanding);
                }
                for _ in 0..to_send {
                    let to = targets[next % targets.len()];
                    next += 1;
                    msg[0..4].copy_from_slice(&to.to_le_bytes());
                    msg[4..12].copy_from_slice(&stats.ns().to_le_bytes());
                    msg[12..16].copy_from_slice(&(i as u32).to_le_bytes());
                    outstanding += 1;
                    if sink.feed(Message::Binary(Bytes::from(msg.clone()))).await.is_err() { break; }
                }
                if sink.flush().await.is_err() { break; }
            }
            lat
        }));
    }
    let (delivered, secs, cpu) = measure(&stats, a.duration, pid).await;
    stop.store(true, Ordering::Relaxed);
    let mut lat = Vec::new();
    for mut t in tasks {
        match tokio::time::timeout(Duration::from_secs(2), &mut t).await {
            Ok(Ok(l)) => lat.extend(l),
            _ => t.abort(),
        }
    }
    Ok(Figures {
        per_sec: delivered as f64 / secs,
        p50_ms: percentile(&mut lat, 0.5),
        p99_ms: percentile(&mut lat, 0.99),
        delivered,
        accepted: 0,
        cpu,
    })
}

/// Runs the bare forwarder (a child of `bench relay`): the first binary message of a
/// connection is its 4-byte number; every later one starts with its target's number
/// (a 5-byte message is a receipt for the number it starts with) and is forwarded as is.
pub async fn forwarder(a: ForwarderArgs) -> Result<(), BenchError> {
    use tokio::sync::mpsc;
    let l = tokio::net::TcpListener::bind(&a.listen)
        .await
        .map_err(|e| e.to_string())?;
    println!(
        "forwarder listening on ws://{}",
        l.local_addr().map_err(|e| e.to_string())?
    );
    let peers: Arc<std::sync::RwLock<HashMap<u32, mpsc::UnboundedSender<Message>>>> =
        Arc::default();
    loop {
        let (s, _) = l.accept().await.map_err(|e| e.to_string())?;
        let _ = s.set_nodelay(true);
        let peers = peers.clone();
        tokio::spawn(async move {
            let Ok(ws) =
                async_tungstenite::tokio::accept_async_with_config(s, Some(crate::ws::config()))
                    .await
            else {
                return;
            };
            let (mut sink, mut source) = ws.split();
            let Some(Ok(Message::Binary(hello))) = source.next().await else {
                return;
            };
            let me = u32::from_le_bytes(hello[..4].try_into().unwrap_or([0; 4]));
            let (tx, mut rx) = mpsc::unbounded_channel();
            if let Ok(mut p) = peers.write() {
                p.insert(me, tx);
            }
            let writer = async {
                while let Some(m) = rx.recv().await {
                    if sink.feed(m).await.is_err() {
                        return;
                    }
                    while let Ok(m) = rx.try_recv() {
                        if sink.feed(m).await.is_err() {
                            return;
                        }
                    }
                    if sink.flush().await.is_err() {
                        return;
                    }
                }
            };
            let reader = async {
                while let Some(Ok(m)) = source.next().await {
                    let Message::Binary(b) = m else { continue };
                    if b.len() < 4 {
                        continue;
                    }
                    let to = u32::from_le_bytes(b[..4].try_into().unwrap_or([0; 4]));
                    let msg = if b.len() == 5 {
                        Message::Binary(Bytes::from_static(&[1]))
                    } else {
                        Message::Binary(b)
                    };
                    let tx = peers.read().ok().and_then(|p| p.get(&to).cloned());
                    if let Some(tx) = tx {
                        let _ = tx.send(msg);
                    }
                }
            };
            tokio::select! { _ = writer => {}, _ = reader => {} }
        });
    }
}
