//! A small blocking HTTP/1.1 client over std sockets for driving the scripted engine.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use inferrail_wire::{BodyFraming, ChunkedDecoder, Method, ResponseHead};

/// Every socket read and write gives up after this long.
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);

pub fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect_timeout(&addr, IO_TIMEOUT).expect("connect");
    s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    s.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

pub fn post(path: &str, body: &str, extra_headers: &str) -> Vec<u8> {
    format!(
        "POST {path} HTTP/1.1\r\nHost: engine\r\nContent-Type: application/json\r\n{extra_headers}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

pub fn get(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: engine\r\n\r\n").into_bytes()
}

pub const CHAT: &str = r#"{"model":"tiny","messages":[{"role":"user","content":"Say hello in three words."}],"max_tokens":2,"temperature":0}"#;
pub const CHAT_STREAM: &str = r#"{"model":"tiny","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}"#;

pub fn chat() -> Vec<u8> {
    post("/v1/chat/completions", CHAT, "")
}

/// One parsed response.
#[derive(Debug)]
pub struct Response {
    pub head: ResponseHead,
    /// The body, de-chunked.
    pub body: Vec<u8>,
    /// Every byte of the response as received.
    pub raw: Vec<u8>,
    /// When the first byte arrived and when the last did.
    pub first_byte: Instant,
    pub last_byte: Instant,
}

impl Response {
    pub fn status(&self) -> u16 {
        self.head.status
    }
    pub fn header(&self, name: &str) -> Option<String> {
        self.head
            .header(name)
            .map(|v| String::from_utf8_lossy(v).into_owned())
    }
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("JSON body")
    }
    /// The `data:` payloads of an SSE body, in order.
    pub fn events(&self) -> Vec<String> {
        let text = String::from_utf8(self.body.clone()).unwrap();
        assert!(text.ends_with("\n\n"), "SSE body ends with a blank line");
        text.split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| e.strip_prefix("data: ").expect("data: prefix").to_owned())
            .collect()
    }
}

/// A connection with a read buffer, so pipelined responses can be read one by one.
pub struct Client {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    pub fn new(addr: SocketAddr) -> Client {
        Client {
            stream: connect(addr),
            buf: Vec::new(),
        }
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("write");
    }

    fn fill(&mut self) -> usize {
        let mut chunk = [0u8; 16384];
        let n = self.stream.read(&mut chunk).expect("read (timed out?)");
        self.buf.extend_from_slice(&chunk[..n]);
        n
    }

    /// Reads one whole response (skipping 100 Continue).
    pub fn response(&mut self) -> Response {
        let mut first_byte = None;
        loop {
            if first_byte.is_none() && !self.buf.is_empty() {
                first_byte = Some(Instant::now());
            }
            if let Some((head, used)) = ResponseHead::parse(&self.buf, Method::Post).expect("head")
            {
                if head.status == 100 {
                    self.buf.drain(..used);
                    continue;
                }
                let mut raw: Vec<u8> = self.buf[..used].to_vec();
                self.buf.drain(..used);
                let mut body = Vec::new();
                match head.framing {
                    BodyFraming::Length(n) => {
                        let n = n as usize;
                        while self.buf.len() < n {
                            assert!(self.fill() > 0, "EOF inside a body");
                        }
                        body.extend_from_slice(&self.buf[..n]);
                        raw.extend_from_slice(&self.buf[..n]);
                        self.buf.drain(..n);
                    }
                    BodyFraming::Chunked => {
                        let mut d = ChunkedDecoder::new();
                        loop {
                            let p = d.feed(&self.buf, Some(&mut body)).expect("chunked");
                            raw.extend_from_slice(&self.buf[..p.consumed]);
                            self.buf.drain(..p.consumed);
                            if p.done {
                                break;
                            }
                            assert!(self.fill() > 0, "EOF inside a chunked body");
                        }
                    }
                    BodyFraming::UntilClose => {
                        while self.fill() > 0 {}
                        body = std::mem::take(&mut self.buf);
                        raw.extend_from_slice(&body);
                    }
                }
                return Response {
                    head,
                    body,
                    raw,
                    first_byte: first_byte.unwrap_or_else(Instant::now),
                    last_byte: Instant::now(),
                };
            }
            assert!(self.fill() > 0, "EOF before a response head");
        }
    }

    /// Reads until the engine closes; returns everything still unread.
    pub fn read_to_eof(&mut self) -> Vec<u8> {
        loop {
            let mut chunk = [0u8; 16384];
            match self.stream.read(&mut chunk) {
                Ok(0) => return std::mem::take(&mut self.buf),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                    return std::mem::take(&mut self.buf)
                }
                Err(e) => panic!("expected EOF, got {e}"),
            }
        }
    }
}

/// One request on a fresh connection.
pub fn exchange(addr: SocketAddr, request: &[u8]) -> Response {
    let mut c = Client::new(addr);
    c.send(request);
    c.response()
}

/// Polls `f` until it holds, for at most `limit`.
pub fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Status line, headers and de-chunked body of raw response bytes, as the capture tests compare them.
pub struct Raw {
    pub status_line: String,
    pub headers: Vec<(String, String)>,
    /// HTTP chunk payloads (streams), without the terminator.
    pub chunks: Option<Vec<Vec<u8>>>,
    pub body: Vec<u8>,
}

/// Splits raw response bytes into a [`Raw`], checking the chunked framing.
pub fn parse_raw(raw: &[u8]) -> Raw {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("end of head");
    let head = std::str::from_utf8(&raw[..end]).expect("ASCII head");
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap().to_owned();
    let headers: Vec<(String, String)> = lines
        .map(|l| {
            let (n, v) = l.split_once(": ").expect("header line");
            (n.to_owned(), v.to_owned())
        })
        .collect();
    let rest = &raw[end + 4..];
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v == "chunked");
    if !chunked {
        return Raw {
            status_line,
            headers,
            chunks: None,
            body: rest.to_vec(),
        };
    }
    let mut chunks = Vec::new();
    let mut body = Vec::new();
    let mut p = 0;
    loop {
        let eol = p + rest[p..]
            .windows(2)
            .position(|w| w == b"\r\n")
            .expect("chunk size line");
        let size = usize::from_str_radix(std::str::from_utf8(&rest[p..eol]).unwrap(), 16).unwrap();
        p = eol + 2;
        if size == 0 {
            assert_eq!(&rest[p..], b"\r\n", "terminator ends the body");
            break;
        }
        chunks.push(rest[p..p + size].to_vec());
        body.extend_from_slice(&rest[p..p + size]);
        assert_eq!(&rest[p + size..p + size + 2], b"\r\n");
        p += size + 2;
    }
    Raw {
        status_line,
        headers,
        chunks: Some(chunks),
        body,
    }
}

impl Raw {
    /// The first header named exactly `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// Header names in order.
    pub fn names(&self) -> Vec<&str> {
        self.headers.iter().map(|(n, _)| n.as_str()).collect()
    }

    /// The body parsed as JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("JSON body")
    }

    /// The HTTP chunk payloads (empty when the body was not chunked).
    pub fn chunk_payloads(&self) -> &[Vec<u8>] {
        self.chunks.as_deref().unwrap_or(&[])
    }
}

/// The object keys of a JSON text, in textual order (nested ones included).
pub fn keys(text: &[u8]) -> Vec<String> {
    let s = std::str::from_utf8(text).unwrap();
    let b = s.as_bytes();
    let (mut out, mut i) = (Vec::new(), 0);
    while i < b.len() {
        if b[i] == b'"' {
            let st = i;
            i += 1;
            while b[i] != b'"' {
                i += if b[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            if b.get(i) == Some(&b':') {
                out.push(s[st + 1..i - 1].to_owned());
            }
        } else {
            i += 1;
        }
    }
    out
}
