//! A small blocking HTTP/1.1 client over `std::net`, for the demo and the integration tests.
//! Not used on any request path.

use inferrail_wire::{BodyFraming, ChunkedDecoder, Method, ResponseHead};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// A response read in full.
#[derive(Debug, Clone)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Header lines in wire order (names as sent).
    pub headers: Vec<(String, String)>,
    /// The body with transfer framing removed.
    pub body: Vec<u8>,
    /// Every byte received for this response, head and framing included.
    pub raw: Vec<u8>,
}

impl Response {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as UTF-8 text (lossy).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// One keep-alive client connection.
pub struct Connection {
    stream: TcpStream,
    buf: Vec<u8>,
}

fn invalid(msg: impl Into<String>) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, msg.into())
}

impl Connection {
    /// Connects with a read timeout on every socket read.
    pub fn open(addr: SocketAddr, read_timeout: Duration) -> std::io::Result<Connection> {
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
        stream.set_read_timeout(Some(read_timeout))?;
        stream.set_nodelay(true)?;
        Ok(Connection {
            stream,
            buf: Vec::new(),
        })
    }

    /// The socket, to write raw bytes or shut it down.
    pub fn stream(&mut self) -> &mut TcpStream {
        &mut self.stream
    }

    /// Sends a request with a content-length body (when given).
    pub fn send(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> std::io::Result<()> {
        let mut req = format!("{method} {path} HTTP/1.1\r\nhost: inferrail\r\n");
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        if let Some(b) = body {
            req.push_str(&format!(
                "content-type: application/json\r\ncontent-length: {}\r\n",
                b.len()
            ));
        }
        req.push_str("\r\n");
        let mut bytes = req.into_bytes();
        if let Some(b) = body {
            bytes.extend_from_slice(b);
        }
        self.stream.write_all(&bytes)
    }

    fn fill(&mut self) -> std::io::Result<usize> {
        let mut chunk = [0u8; 16 * 1024];
        let n = self.stream.read(&mut chunk)?;
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(n)
    }

    /// Reads one response to a request made with `method`, calling `on_body` with each piece of
    /// decoded body as it arrives.
    pub fn read_response_with(
        &mut self,
        method: &str,
        mut on_body: impl FnMut(&[u8]),
    ) -> std::io::Result<Response> {
        let m = if method == "HEAD" {
            Method::Head
        } else {
            Method::Post
        };
        let (head, head_len) = loop {
            match ResponseHead::parse(&self.buf, m).map_err(|e| invalid(e.to_string()))? {
                Some((h, len)) if h.status < 200 => {
                    self.buf.drain(..len);
                }
                Some(found) => break found,
                None => {
                    if self.fill()? == 0 {
                        return Err(std::io::ErrorKind::UnexpectedEof.into());
                    }
                }
            }
        };
        let mut raw: Vec<u8> = self.buf.drain(..head_len).collect();
        let mut body = Vec::new();
        match head.framing {
            BodyFraming::Length(n) => {
                let n = n as usize;
                while self.buf.len() < n {
                    if self.fill()? == 0 {
                        return Err(std::io::ErrorKind::UnexpectedEof.into());
                    }
                }
                body.extend(self.buf.drain(..n));
                on_body(&body);
                raw.extend_from_slice(&body);
            }
            BodyFraming::Chunked => {
                let mut d = ChunkedDecoder::new();
                loop {
                    let before = body.len();
                    let p = d
                        .feed(&self.buf, Some(&mut body))
                        .map_err(|e| invalid(e.to_string()))?;
                    raw.extend(self.buf.drain(..p.consumed));
                    if body.len() > before {
                        on_body(&body[before..]);
                    }
                    if p.done {
                        break;
                    }
                    if self.fill()? == 0 {
                        return Err(std::io::ErrorKind::UnexpectedEof.into());
                    }
                }
            }
            BodyFraming::UntilClose => loop {
                if !self.buf.is_empty() {
                    on_body(&self.buf);
                    body.extend_from_slice(&self.buf);
                    raw.append(&mut self.buf);
                }
                if self.fill()? == 0 {
                    break;
                }
            },
        }
        let headers = head
            .header_lines()
            .map(|(n, v)| {
                (
                    String::from_utf8_lossy(n).into_owned(),
                    String::from_utf8_lossy(v).into_owned(),
                )
            })
            .collect();
        Ok(Response {
            status: head.status,
            headers,
            body,
            raw,
        })
    }

    /// Reads one whole response.
    pub fn read_response(&mut self, method: &str) -> std::io::Result<Response> {
        self.read_response_with(method, |_| {})
    }

    /// Sends a request and reads its response.
    pub fn call(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> std::io::Result<Response> {
        self.send(method, path, headers, body)?;
        self.read_response(method)
    }
}

/// One request on a fresh connection (10 s read timeout).
pub fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> std::io::Result<Response> {
    Connection::open(addr, Duration::from_secs(10))?.call(method, path, headers, body)
}
