//! Frames and messages from a byte stream that arrives in pieces (sans-IO): bytes go in with
//! [`MessageDecoder::feed`] as the socket yields them, whole messages come out of
//! [`MessageDecoder::next_message`]. Nothing is lost when a read times out half-way through a
//! frame, and a peer cannot make it hold more than one message of `max_message` bytes (plus one
//! read) however it frames them.

use super::Frame;

/// Why the byte stream cannot be read as ZMTP frames any more. The peer sent it; the
/// connection must be dropped (a reconnect starts clean).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// A frame's flags byte has bits ZMTP 3 does not define.
    #[error("ZMTP frame with reserved flag bits {0:#04x}")]
    Flags(u8),
    /// A message (all its frames) is larger than the bound.
    #[error("ZMTP message of more than {max} bytes")]
    TooLarge {
        /// The bound.
        max: usize,
    },
    /// A message has more frames than the bound.
    #[error("ZMTP message of more than {max} frames")]
    TooManyFrames {
        /// The bound.
        max: usize,
    },
}

/// One message: its frames in order. Commands (READY, PING, SUBSCRIBE, ...) come out on their
/// own, as one-frame messages with `command` set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// The frames' bodies.
    pub frames: Vec<Vec<u8>>,
    /// A command frame rather than message data.
    pub command: bool,
}

/// Cuts a byte stream into ZMTP messages.
#[derive(Debug)]
pub struct MessageDecoder {
    buf: Vec<u8>,
    /// Bytes of `buf` already consumed.
    start: usize,
    partial: Vec<Vec<u8>>,
    partial_bytes: usize,
    max_message: usize,
    max_frames: usize,
}

impl MessageDecoder {
    /// A decoder refusing messages over `max_message` bytes or `max_frames` frames.
    pub fn new(max_message: usize, max_frames: usize) -> Self {
        MessageDecoder {
            buf: Vec::new(),
            start: 0,
            partial: Vec::new(),
            partial_bytes: 0,
            max_message,
            max_frames,
        }
    }

    /// Appends bytes read from the peer.
    pub fn feed(&mut self, bytes: &[u8]) {
        if self.start > 0 && self.start == self.buf.len() {
            self.buf.clear();
            self.start = 0;
        } else if self.start > 64 * 1024 && self.start * 2 > self.buf.len() {
            self.buf.drain(..self.start);
            self.start = 0;
        }
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes fed but not yet returned in a message.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.start + self.partial_bytes
    }

    /// The next complete frame, if the bytes for it are in.
    fn next_frame(&mut self) -> Result<Option<Frame>, FrameError> {
        let avail = &self.buf[self.start..];
        let Some(&flags) = avail.first() else {
            return Ok(None);
        };
        if flags & !0x07 != 0 {
            return Err(FrameError::Flags(flags));
        }
        let (header, len) = if flags & 0x02 != 0 {
            if avail.len() < 9 {
                return Ok(None);
            }
            let mut b = [0u8; 8];
            b.copy_from_slice(&avail[1..9]);
            (9, u64::from_be_bytes(b))
        } else {
            if avail.len() < 2 {
                return Ok(None);
            }
            (2, u64::from(avail[1]))
        };
        let room = self.max_message - self.partial_bytes.min(self.max_message);
        if len > room as u64 {
            return Err(FrameError::TooLarge {
                max: self.max_message,
            });
        }
        let len = len as usize;
        if avail.len() < header + len {
            return Ok(None);
        }
        let body = avail[header..header + len].to_vec();
        self.start += header + len;
        Ok(Some(Frame {
            more: flags & 0x01 != 0,
            command: flags & 0x04 != 0,
            body,
        }))
    }

    /// The next complete message, if its bytes are all in.
    pub fn next_message(&mut self) -> Result<Option<Message>, FrameError> {
        while let Some(frame) = self.next_frame()? {
            if frame.command {
                // Commands are single frames and do not interleave with a message's frames.
                return Ok(Some(Message {
                    frames: vec![frame.body],
                    command: true,
                }));
            }
            if self.partial.len() == self.max_frames {
                return Err(FrameError::TooManyFrames {
                    max: self.max_frames,
                });
            }
            self.partial_bytes += frame.body.len();
            self.partial.push(frame.body);
            if !frame.more {
                self.partial_bytes = 0;
                return Ok(Some(Message {
                    frames: std::mem::take(&mut self.partial),
                    command: false,
                }));
            }
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zmtp::write_frame;
    use proptest::prelude::*;

    fn wire(msgs: &[&[&[u8]]]) -> Vec<u8> {
        let mut out = Vec::new();
        for m in msgs {
            for (i, f) in m.iter().enumerate() {
                write_frame(&mut out, f, i + 1 < m.len(), false);
            }
        }
        out
    }

    #[test]
    fn messages_come_out_whole_however_the_bytes_are_cut() {
        let big = vec![7u8; 300];
        let bytes = wire(&[&[b"kv", &5u64.to_be_bytes(), &big], &[b"", b"x"]]);
        for cut in 1..bytes.len() {
            let mut d = MessageDecoder::new(1 << 20, 8);
            let mut got = Vec::new();
            for chunk in bytes.chunks(cut) {
                d.feed(chunk);
                while let Some(m) = d.next_message().unwrap() {
                    got.push(m.frames);
                }
            }
            assert_eq!(
                got,
                vec![
                    vec![b"kv".to_vec(), 5u64.to_be_bytes().to_vec(), big.clone()],
                    vec![b"".to_vec(), b"x".to_vec()]
                ],
                "cut {cut}"
            );
            assert_eq!(d.buffered(), 0);
        }
    }

    #[test]
    fn bounds_hold_across_frames_and_before_the_body_arrives() {
        // One frame claiming 2 GB: refused from its header alone.
        let mut d = MessageDecoder::new(1 << 20, 8);
        d.feed(&[0x02, 0, 0, 0, 0, 0x80, 0, 0, 0]);
        assert_eq!(d.next_message(), Err(FrameError::TooLarge { max: 1 << 20 }));
        // Many small frames adding up past the bound.
        let mut d = MessageDecoder::new(10, 100);
        d.feed(&wire(&[&[b"aaaa", b"bbbb", b"cccc"]]));
        assert_eq!(d.next_message(), Err(FrameError::TooLarge { max: 10 }));
        let mut d = MessageDecoder::new(1 << 20, 2);
        d.feed(&wire(&[&[b"a", b"b", b"c"]]));
        assert_eq!(d.next_message(), Err(FrameError::TooManyFrames { max: 2 }));
        let mut d = MessageDecoder::new(1 << 20, 2);
        d.feed(&[0x40, 0]);
        assert_eq!(d.next_message(), Err(FrameError::Flags(0x40)));
    }

    #[test]
    fn commands_come_out_on_their_own() {
        let mut out = Vec::new();
        write_frame(&mut out, b"\x04PING", false, true);
        write_frame(&mut out, b"t", false, false);
        let mut d = MessageDecoder::new(1 << 20, 8);
        d.feed(&out);
        assert!(d.next_message().unwrap().unwrap().command);
        assert_eq!(
            d.next_message().unwrap().unwrap().frames,
            vec![b"t".to_vec()]
        );
        assert_eq!(d.next_message().unwrap(), None);
    }

    proptest! {
        /// Arbitrary bytes in arbitrary pieces never panic, and what is buffered stays within
        /// one message bound plus the bytes not yet cut.
        #[test]
        fn arbitrary_streams_never_panic(
            bytes in proptest::collection::vec(any::<u8>(), 0..2048),
            cut in 1usize..64,
        ) {
            let mut d = MessageDecoder::new(512, 4);
            'feed: for chunk in bytes.chunks(cut) {
                d.feed(chunk);
                loop {
                    match d.next_message() {
                        Ok(Some(m)) => prop_assert!(m.frames.iter().map(Vec::len).sum::<usize>() <= 512),
                        Ok(None) => break,
                        Err(_) => break 'feed,
                    }
                }
            }
        }
    }
}
