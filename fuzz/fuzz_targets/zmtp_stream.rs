//! ZMTP byte streams: the message decoder never panics, whatever the bytes and however they are
//! cut (the first byte picks the piece size), never returns a message over its bound, and the
//! handshake refuses or accepts any 64-byte greeting plus READY without panicking.
#![no_main]
use std::io::{self, Read, Write};

use inferrail_events::zmtp::{self, decoder::MessageDecoder};
use libfuzzer_sys::fuzz_target;

/// The fuzz input as the peer's side of a socket; what we write is dropped.
struct Peer<'a>(&'a [u8]);

impl Read for Peer<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.read(buf)
    }
}

impl Write for Peer<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&cut, rest)) = data.split_first() else {
        return;
    };
    let mut d = MessageDecoder::new(4096, 8);
    'feed: for piece in rest.chunks(usize::from(cut).max(1)) {
        d.feed(piece);
        loop {
            match d.next_message() {
                Ok(Some(m)) => assert!(m.frames.iter().map(Vec::len).sum::<usize>() <= 4096),
                Ok(None) => break,
                Err(_) => break 'feed,
            }
        }
    }
    let _ = zmtp::handshake(&mut Peer(rest), b"SUB", &[b"PUB", b"XPUB"]);
});
