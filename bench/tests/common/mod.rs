//! A tiny blocking HTTP/1.1 server for the generator's tests: one thread per connection,
//! keep-alive, answers by path.
#![allow(dead_code)] // each test binary uses a different part

pub mod fleet;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use inferrail_bench::{parse_load_args, LoadConfig};
use inferrail_wire::{encode_chunk, BodyFraming, RequestHead, LAST_CHUNK};

/// A running test server.
pub struct TestServer {
    pub addr: SocketAddr,
    /// Requests answered (or swallowed, for /hang).
    pub requests: Arc<AtomicU64>,
}

impl TestServer {
    /// Paths: /ok → 200 with content-length, /chunked → 200 chunked, /fail → 503,
    /// /close → 200 then close, /hang → never answers, /sse → a chunked event stream ending in
    /// `data: [DONE]` (events split across chunks), /sse-cut → the same without `[DONE]`,
    /// /garbage → bytes that are not an HTTP response.
    pub fn start() -> TestServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let requests = Arc::new(AtomicU64::new(0));
        let counter = Arc::clone(&requests);
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let counter = Arc::clone(&counter);
                std::thread::spawn(move || serve(stream, &counter));
            }
        });
        TestServer { addr, requests }
    }

    /// A load config for `path` on this server, from extra command-line flags.
    pub fn config(&self, path: &str, flags: &str) -> LoadConfig {
        let mut args = vec!["--url".to_string(), format!("http://{}{path}", self.addr)];
        args.extend(flags.split_whitespace().map(String::from));
        parse_load_args(args).unwrap().config
    }
}

fn serve(mut stream: TcpStream, counter: &AtomicU64) {
    let _ = stream.set_nodelay(true);
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let (head, used) = loop {
            if let Some(parsed) = RequestHead::parse(&buf).unwrap() {
                break parsed;
            }
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let BodyFraming::Length(len) = head.framing else {
            panic!("test client sends content-length")
        };
        while buf.len() < used + len as usize {
            match stream.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        buf.drain(..used + len as usize);
        counter.fetch_add(1, Ordering::SeqCst);
        let body = br#"{"object":"chat.completion"}"#;
        let response = match head.path() {
            b"/ok" => ok(body, ""),
            b"/close" => ok(body, "connection: close\r\n"),
            b"/fail" => b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 2\r\n\r\n{}".to_vec(),
            b"/chunked" => {
                let mut r = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
                encode_chunk(&mut r, b"{\"object\":");
                encode_chunk(&mut r, b"\"chat.completion\"}");
                r.extend_from_slice(LAST_CHUNK);
                r
            }
            b"/garbage" => b"NOT HTTP AT ALL\r\n\r\n".to_vec(),
            b"/sse" => sse(true),
            b"/sse-cut" => sse(false),
            b"/hang" => {
                std::thread::sleep(Duration::from_secs(30));
                return;
            }
            _ => b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n".to_vec(),
        };
        let closes = matches!(head.path(), b"/close" | b"/garbage");
        if stream.write_all(&response).is_err() || closes {
            return;
        }
    }
}

fn ok(body: &[u8], extra: &str) -> Vec<u8> {
    let mut r = format!(
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n{extra}content-length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    r.extend_from_slice(body);
    r
}

/// A vLLM-shaped chunked SSE response: role chunk, two tokens, usage chunk, then `[DONE]` when
/// `done`. One event is split across two HTTP chunks, as a proxy may re-chunk a stream.
fn sse(done: bool) -> Vec<u8> {
    let mut r =
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
            .to_vec();
    encode_chunk(
        &mut r,
        b"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"},\"finish_reason\":null}]}\n\n",
    );
    encode_chunk(
        &mut r,
        b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"},",
    );
    encode_chunk(&mut r, b"\"finish_reason\":null}]}\n\n");
    encode_chunk(
        &mut r,
        b"data: {\"choices\":[{\"delta\":{\"content\":\"b\"},\"finish_reason\":\"length\"}]}\n\n",
    );
    encode_chunk(
        &mut r,
        b"data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}\n\n",
    );
    if done {
        encode_chunk(&mut r, b"data: [DONE]\n\n");
    }
    r.extend_from_slice(LAST_CHUNK);
    r
}
