//! ZMTP 3.0 over TCP with the NULL mechanism, the part of ZeroMQ's wire protocol KV events
//! use: endpoints as vLLM writes them, the 64-byte greeting, the READY handshake naming each
//! side's socket type, and frames (flags, a 1- or 8-byte size, the body). Blocking helpers on
//! any `Read`/`Write`; every length read from the peer is checked against a caller's bound
//! before anything is allocated for it.

use std::io::{self, Read, Write};

pub mod decoder;

/// The largest READY command accepted from a peer (its metadata is a few properties).
const MAX_READY: u64 = 64 * 1024;

/// A `tcp://host:port` endpoint that is not one (the endpoint as given).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unsupported KV events endpoint {0:?} (expected tcp://host:port)")]
pub struct EndpointError(pub String);

/// Where the socket goes: bind or connect, and to what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Bind this `host:port` (the endpoint had `*` or `::`).
    Bind(String),
    /// Connect to this `host:port`.
    Connect(String),
}

/// Where a socket given `endpoint` goes, as vLLM decides: it binds when the endpoint contains
/// `*` or `::` (`*` is every IPv4 interface) and connects otherwise. Only `tcp://` is supported.
pub fn parse_endpoint(endpoint: &str) -> Result<Target, EndpointError> {
    let bad = || EndpointError(endpoint.to_string());
    let rest = endpoint.strip_prefix("tcp://").ok_or_else(bad)?;
    let (host, port) = rest.rsplit_once(':').ok_or_else(bad)?;
    port.parse::<u16>().map_err(|_| bad())?;
    if host.is_empty() {
        return Err(bad());
    }
    if endpoint.contains('*') || endpoint.contains("::") {
        let host = match host {
            "*" => "0.0.0.0",
            "[*]" | "[::]" | "::" => "[::]",
            h => h,
        };
        Ok(Target::Bind(format!("{host}:{port}")))
    } else {
        Ok(Target::Connect(rest.to_string()))
    }
}

/// The 64-byte ZMTP 3.0 greeting for the NULL mechanism.
pub fn greeting() -> [u8; 64] {
    let mut g = [0u8; 64];
    g[0] = 0xff;
    g[9] = 0x7f;
    g[10] = 3;
    g[11] = 0;
    g[12..16].copy_from_slice(b"NULL");
    g
}

pub(crate) fn invalid(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_string())
}

/// The ZMTP 3.0 NULL handshake as `own_type`, refusing a peer whose socket type is not one
/// of `peer_types`.
pub fn handshake(
    stream: &mut (impl Read + Write),
    own_type: &[u8],
    peer_types: &[&[u8]],
) -> io::Result<()> {
    stream.write_all(&greeting())?;
    let mut peer = [0u8; 64];
    stream.read_exact(&mut peer)?;
    if peer[0] != 0xff || peer[9] & 1 != 1 {
        return Err(invalid("not a ZMTP peer"));
    }
    if peer[10] < 3 {
        return Err(invalid("ZMTP version below 3.0"));
    }
    if &peer[12..16] != b"NULL" || peer[16..32].iter().any(|&b| b != 0) {
        return Err(invalid("only the NULL mechanism is supported"));
    }
    let mut ready = Vec::new();
    write_frame(&mut ready, &ready_body(own_type), false, true);
    stream.write_all(&ready)?;
    let frame = read_frame(stream, MAX_READY)?;
    if !frame.command {
        return Err(invalid("expected READY"));
    }
    let (name, props) = split_command(&frame.body)?;
    if name != b"READY" {
        return Err(invalid("expected READY"));
    }
    match property(props, b"Socket-Type") {
        Some(t) if peer_types.contains(&t) => Ok(()),
        _ => Err(invalid("unexpected peer socket type")),
    }
}

/// A READY command's body announcing `socket_type`.
pub fn ready_body(socket_type: &[u8]) -> Vec<u8> {
    let mut b = Vec::new();
    b.push(5);
    b.extend_from_slice(b"READY");
    b.push(11);
    b.extend_from_slice(b"Socket-Type");
    b.extend_from_slice(&(socket_type.len() as u32).to_be_bytes());
    b.extend_from_slice(socket_type);
    b
}

/// The value of a property in a READY command's metadata.
fn property<'a>(mut props: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    while let Some((&n, rest)) = props.split_first() {
        let n = usize::from(n);
        if rest.len() < n + 4 {
            return None;
        }
        let (key, rest) = rest.split_at(n);
        let len = u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]]) as usize;
        let rest = &rest[4..];
        if rest.len() < len {
            return None;
        }
        let (value, rest) = rest.split_at(len);
        if key.eq_ignore_ascii_case(name) {
            return Some(value);
        }
        props = rest;
    }
    None
}

/// A command frame's name and data.
pub fn split_command(body: &[u8]) -> io::Result<(&[u8], &[u8])> {
    let (&n, rest) = body.split_first().ok_or_else(|| invalid("empty command"))?;
    let n = usize::from(n);
    if rest.len() < n {
        return Err(invalid("truncated command"));
    }
    Ok(rest.split_at(n))
}

/// Appends one ZMTP frame (flags, size, body) to `out`.
pub fn write_frame(out: &mut Vec<u8>, body: &[u8], more: bool, command: bool) {
    let mut flags = 0u8;
    if more {
        flags |= 0x01;
    }
    if command {
        flags |= 0x04;
    }
    if body.len() > 255 {
        out.push(flags | 0x02);
        out.extend_from_slice(&(body.len() as u64).to_be_bytes());
    } else {
        out.push(flags);
        out.push(body.len() as u8);
    }
    out.extend_from_slice(body);
}

/// One frame as read from the wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// More frames of the same message follow.
    pub more: bool,
    /// A command (READY, SUBSCRIBE, ...), not message data.
    pub command: bool,
    /// The frame's bytes.
    pub body: Vec<u8>,
}

/// Reads one frame, refusing (`InvalidData`) one longer than `max` bytes before allocating it.
pub fn read_frame(r: &mut impl Read, max: u64) -> io::Result<Frame> {
    let mut flags = [0u8; 1];
    r.read_exact(&mut flags)?;
    let flags = flags[0];
    let len = if flags & 0x02 != 0 {
        let mut b = [0u8; 8];
        r.read_exact(&mut b)?;
        u64::from_be_bytes(b)
    } else {
        let mut b = [0u8; 1];
        r.read_exact(&mut b)?;
        u64::from(b[0])
    };
    if len > max {
        return Err(invalid("frame too large"));
    }
    let mut body = vec![0u8; len as usize];
    r.read_exact(&mut body)?;
    Ok(Frame {
        more: flags & 0x01 != 0,
        command: flags & 0x04 != 0,
        body,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_bind_or_connect_like_vllm() {
        assert_eq!(
            parse_endpoint("tcp://*:5557").unwrap(),
            Target::Bind("0.0.0.0:5557".into())
        );
        assert_eq!(
            parse_endpoint("tcp://[::]:5557").unwrap(),
            Target::Bind("[::]:5557".into())
        );
        assert_eq!(
            parse_endpoint("tcp://127.0.0.1:18957").unwrap(),
            Target::Connect("127.0.0.1:18957".into())
        );
        assert_eq!(
            parse_endpoint("tcp://localhost:1").unwrap(),
            Target::Connect("localhost:1".into())
        );
        assert!(parse_endpoint("ipc:///tmp/x").is_err());
        assert!(parse_endpoint("tcp://*:x").is_err());
        assert!(parse_endpoint("tcp://:1").is_err());
    }

    #[test]
    fn frames_short_and_long() {
        let mut out = Vec::new();
        write_frame(&mut out, b"kv", true, false);
        assert_eq!(out, [0x01, 2, b'k', b'v']);
        out.clear();
        write_frame(&mut out, &[7u8; 300], false, false);
        assert_eq!(out[..9], [0x02, 0, 0, 0, 0, 0, 0, 1, 44]);
        let f = read_frame(&mut &out[..], 1 << 20).unwrap();
        assert_eq!(f.body.len(), 300);
        assert!(!f.more && !f.command);
    }

    #[test]
    fn ready_properties_parse() {
        let body = ready_body(b"SUB");
        let (name, props) = split_command(&body).unwrap();
        assert_eq!(name, b"READY");
        assert_eq!(property(props, b"socket-type"), Some(&b"SUB"[..]));
        assert_eq!(property(props, b"Identity"), None);
    }
}
