//! A minimal hand-written ZMTP 3.0 client (NULL mechanism) over one TCP connection, for the
//! KV event tests: SUB for the PUB socket, DEALER for the replay ROUTER.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

pub struct Zmtp {
    pub s: TcpStream,
}

pub fn frame(out: &mut Vec<u8>, body: &[u8], more: bool, command: bool) {
    let flags = u8::from(more) | if command { 4 } else { 0 };
    if body.len() > 255 {
        out.push(flags | 2);
        out.extend_from_slice(&(body.len() as u64).to_be_bytes());
    } else {
        out.push(flags);
        out.push(body.len() as u8);
    }
    out.extend_from_slice(body);
}

impl Zmtp {
    /// Connects as `own` and checks the peer announces `peer`.
    pub fn connect(addr: SocketAddr, own: &str, peer: &str) -> Zmtp {
        Zmtp::handshake(TcpStream::connect(addr).unwrap(), own, peer)
    }

    /// Runs the ZMTP handshake on an established connection (either side may have dialled).
    pub fn handshake(mut s: TcpStream, own: &str, peer: &str) -> Zmtp {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut g = [0u8; 64];
        g[0] = 0xff;
        g[9] = 0x7f;
        g[10] = 3;
        g[12..16].copy_from_slice(b"NULL");
        s.write_all(&g).unwrap();
        let mut theirs = [0u8; 64];
        s.read_exact(&mut theirs).unwrap();
        assert_eq!((theirs[0], theirs[9], theirs[10]), (0xff, 0x7f, 3));
        assert_eq!(&theirs[12..16], b"NULL");
        let mut ready = vec![5];
        ready.extend_from_slice(b"READY");
        ready.push(11);
        ready.extend_from_slice(b"Socket-Type");
        ready.extend_from_slice(&(own.len() as u32).to_be_bytes());
        ready.extend_from_slice(own.as_bytes());
        let mut out = Vec::new();
        frame(&mut out, &ready, false, true);
        s.write_all(&out).unwrap();
        let mut z = Zmtp { s };
        let (more, command, body) = z.read_frame();
        assert!(!more && command);
        assert_eq!(&body[..6], b"\x05READY");
        let mut prop = b"\x0bSocket-Type".to_vec();
        prop.extend_from_slice(&(peer.len() as u32).to_be_bytes());
        prop.extend_from_slice(peer.as_bytes());
        assert!(
            body.windows(prop.len()).any(|w| w == prop),
            "peer is not {peer}"
        );
        z
    }

    pub fn subscribe(&mut self, topic: &[u8]) {
        let mut out = Vec::new();
        frame(&mut out, &[&[1u8][..], topic].concat(), false, false);
        self.s.write_all(&out).unwrap();
    }

    /// ZMTP 3.1 SUBSCRIBE command.
    pub fn subscribe_command(&mut self, topic: &[u8]) {
        let mut out = Vec::new();
        frame(
            &mut out,
            &[&b"\x09SUBSCRIBE"[..], topic].concat(),
            false,
            true,
        );
        self.s.write_all(&out).unwrap();
    }

    pub fn send(&mut self, frames: &[&[u8]]) {
        let mut out = Vec::new();
        for (i, f) in frames.iter().enumerate() {
            frame(&mut out, f, i + 1 < frames.len(), false);
        }
        self.s.write_all(&out).unwrap();
    }

    pub fn read_frame(&mut self) -> (bool, bool, Vec<u8>) {
        let mut f = [0u8; 1];
        self.s.read_exact(&mut f).unwrap();
        let len = if f[0] & 2 != 0 {
            let mut b = [0u8; 8];
            self.s.read_exact(&mut b).unwrap();
            u64::from_be_bytes(b) as usize
        } else {
            let mut b = [0u8; 1];
            self.s.read_exact(&mut b).unwrap();
            b[0] as usize
        };
        let mut body = vec![0u8; len];
        self.s.read_exact(&mut body).unwrap();
        (f[0] & 1 != 0, f[0] & 4 != 0, body)
    }

    pub fn recv(&mut self) -> Vec<Vec<u8>> {
        let mut frames = Vec::new();
        loop {
            let (more, command, body) = self.read_frame();
            assert!(!command);
            frames.push(body);
            if !more {
                return frames;
            }
        }
    }

    /// Sends a replay request for `start` (as a DEALER) and collects the replies up to and
    /// including the end marker.
    pub fn replay(&mut self, start: u64) -> Vec<Vec<Vec<u8>>> {
        self.send(&[b"", &start.to_be_bytes()]);
        let mut out = Vec::new();
        loop {
            let m = self.recv();
            let end = m.len() == 4 && m[2] == [0xff; 8];
            out.push(m);
            if end {
                return out;
            }
        }
    }
}
