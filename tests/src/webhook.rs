//! A real HTTP receiver on loopback for the transparency channel's webhooks: it records
//! every request (method, path, headers, body) and answers `200 ok` — or, started
//! [`Receiver::silent`], reads each request and never answers.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

/// One request received.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub path: String,
    /// Header names in lower case.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_default()
    }
}

/// A receiver listening on `127.0.0.1`, on threads of its own.
pub struct Receiver {
    pub addr: SocketAddr,
    got: Arc<Mutex<Vec<Request>>>,
}

impl Receiver {
    /// Answers every request `200 ok`.
    pub fn answering() -> Receiver {
        Receiver::start(true)
    }

    /// Reads every request and never answers (holding the connection until the client
    /// gives up).
    pub fn silent() -> Receiver {
        Receiver::start(false)
    }

    fn start(answer: bool) -> Receiver {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let got = Arc::new(Mutex::new(Vec::new()));
        let g = got.clone();
        std::thread::spawn(move || {
            for s in l.incoming() {
                let Ok(s) = s else { return };
                let g = g.clone();
                std::thread::spawn(move || serve(s, &g, answer));
            }
        });
        Receiver { addr, got }
    }

    /// `http://127.0.0.1:PORT` + `path`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// The requests so far.
    pub fn requests(&self) -> Vec<Request> {
        self.got.lock().unwrap().clone()
    }
}

fn serve(s: TcpStream, got: &Mutex<Vec<Request>>, answer: bool) {
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    loop {
        let mut first = String::new();
        if r.read_line(&mut first).unwrap_or(0) == 0 {
            return;
        }
        let mut parts = first.split_whitespace();
        let method = parts.next().unwrap_or("").to_string();
        let path = parts.next().unwrap_or("").to_string();
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
            }
        }
        let len: usize = headers
            .iter()
            .find(|(k, _)| k == "content-length")
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0; len];
        if r.read_exact(&mut body).is_err() {
            return;
        }
        got.lock().unwrap().push(Request {
            method,
            path,
            headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        });
        if !answer {
            // Never answer: wait for the client to give up and close.
            let mut sink = Vec::new();
            let _ = r.read_to_end(&mut sink);
            return;
        }
        if w.write_all(
            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-type: text/plain\r\n\r\nok",
        )
        .is_err()
        {
            return;
        }
    }
}
