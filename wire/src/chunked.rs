//! An incremental `Transfer-Encoding: chunked` decoder.
//!
//! The same state machine serves two jobs: de-chunking a request body into a buffer (with `out`),
//! and following a chunked response that is passed through untouched, only to learn where it ends
//! (without `out`). It accepts input split at any byte.

/// Why a chunked body is malformed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChunkedError {
    /// A chunk-size line is not hexadecimal, or overflows.
    #[error("invalid chunk size")]
    BadSize,
    /// A line does not end with CRLF where the grammar requires it.
    #[error("missing CRLF in chunked framing")]
    BadLineEnd,
    /// A size line or trailer line is longer than the decoder accepts.
    #[error("chunked framing line too long")]
    LineTooLong,
}

/// What one [`ChunkedDecoder::feed`] call did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Progress {
    /// Bytes of the input that belong to this body (all of them unless `done`).
    pub consumed: usize,
    /// The terminating chunk and trailers have been read.
    pub done: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Size { digits: u8 },
    Extension,
    SizeLf,
    Data,
    DataCr,
    DataLf,
    TrailerStart,
    Trailer,
    TrailerLf,
    FinalLf,
    Done,
}

/// Longest chunk-extension or trailer line accepted.
const MAX_LINE: usize = 4096;

/// Incremental chunked-body decoder. Feed it bytes as they arrive.
#[derive(Debug, Clone)]
pub struct ChunkedDecoder {
    state: State,
    remaining: u64,
    line_len: usize,
    decoded: u64,
}

impl Default for ChunkedDecoder {
    fn default() -> Self {
        Self::new()
    }
}

impl ChunkedDecoder {
    /// A decoder at the start of a chunked body.
    pub fn new() -> Self {
        ChunkedDecoder {
            state: State::Size { digits: 0 },
            remaining: 0,
            line_len: 0,
            decoded: 0,
        }
    }

    /// True once the whole body (terminating chunk and trailers) has been seen.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Total payload bytes decoded so far (chunk data only, no framing).
    pub fn decoded_len(&self) -> u64 {
        self.decoded
    }

    /// Consumes framing and data from `input`, appending chunk data to `out` when given.
    /// Stops right after the body ends; bytes after that are not consumed.
    pub fn feed(
        &mut self,
        input: &[u8],
        mut out: Option<&mut Vec<u8>>,
    ) -> Result<Progress, ChunkedError> {
        let mut i = 0;
        while i < input.len() && self.state != State::Done {
            let b = input[i];
            match self.state {
                State::Size { digits } => {
                    if let Some(v) = hex_value(b) {
                        if digits >= 16 {
                            return Err(ChunkedError::BadSize);
                        }
                        self.remaining = (self.remaining << 4) | u64::from(v);
                        self.state = State::Size { digits: digits + 1 };
                    } else if digits == 0 {
                        return Err(ChunkedError::BadSize);
                    } else if b == b';' || b == b' ' || b == b'\t' {
                        self.line_len = 0;
                        self.state = State::Extension;
                    } else if b == b'\r' {
                        self.state = State::SizeLf;
                    } else {
                        return Err(ChunkedError::BadSize);
                    }
                    i += 1;
                }
                State::Extension => {
                    if b == b'\r' {
                        self.state = State::SizeLf;
                    } else if b == b'\n' {
                        return Err(ChunkedError::BadLineEnd);
                    } else {
                        self.line_len += 1;
                        if self.line_len > MAX_LINE {
                            return Err(ChunkedError::LineTooLong);
                        }
                    }
                    i += 1;
                }
                State::SizeLf => {
                    if b != b'\n' {
                        return Err(ChunkedError::BadLineEnd);
                    }
                    i += 1;
                    self.state = if self.remaining == 0 {
                        State::TrailerStart
                    } else {
                        State::Data
                    };
                }
                State::Data => {
                    let available = input.len() - i;
                    let take =
                        usize::try_from(self.remaining).map_or(available, |r| r.min(available));
                    if let Some(out) = out.as_deref_mut() {
                        out.extend_from_slice(&input[i..i + take]);
                    }
                    i += take;
                    self.decoded += take as u64;
                    self.remaining -= take as u64;
                    if self.remaining == 0 {
                        self.state = State::DataCr;
                    }
                }
                State::DataCr => {
                    if b != b'\r' {
                        return Err(ChunkedError::BadLineEnd);
                    }
                    i += 1;
                    self.state = State::DataLf;
                }
                State::DataLf => {
                    if b != b'\n' {
                        return Err(ChunkedError::BadLineEnd);
                    }
                    i += 1;
                    self.state = State::Size { digits: 0 };
                }
                State::TrailerStart => {
                    i += 1;
                    if b == b'\r' {
                        self.state = State::FinalLf;
                    } else if b == b'\n' {
                        return Err(ChunkedError::BadLineEnd);
                    } else {
                        self.line_len = 1;
                        self.state = State::Trailer;
                    }
                }
                State::Trailer => {
                    i += 1;
                    if b == b'\r' {
                        self.state = State::TrailerLf;
                    } else {
                        self.line_len += 1;
                        if self.line_len > MAX_LINE {
                            return Err(ChunkedError::LineTooLong);
                        }
                    }
                }
                State::TrailerLf => {
                    if b != b'\n' {
                        return Err(ChunkedError::BadLineEnd);
                    }
                    i += 1;
                    self.state = State::TrailerStart;
                }
                State::FinalLf => {
                    if b != b'\n' {
                        return Err(ChunkedError::BadLineEnd);
                    }
                    i += 1;
                    self.state = State::Done;
                }
                State::Done => {}
            }
        }
        Ok(Progress {
            consumed: i,
            done: self.state == State::Done,
        })
    }
}

fn hex_value(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Appends `data` to `out` as one chunk (`size CRLF data CRLF`). Empty data writes nothing.
pub fn encode_chunk(out: &mut Vec<u8>, data: &[u8]) {
    if data.is_empty() {
        return;
    }
    out.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// The terminating zero-size chunk with no trailers.
pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn decode_all(input: &[u8], cuts: &[usize]) -> Result<(Vec<u8>, usize, bool), ChunkedError> {
        let mut d = ChunkedDecoder::new();
        let mut out = Vec::new();
        let mut pos = 0;
        let mut bounds: Vec<usize> = cuts.iter().map(|c| c % (input.len() + 1)).collect();
        bounds.push(input.len());
        bounds.sort_unstable();
        for end in bounds {
            if end < pos {
                continue;
            }
            let p = d.feed(&input[pos..end], Some(&mut out))?;
            pos += p.consumed;
            if p.done {
                return Ok((out, pos, true));
            }
        }
        Ok((out, pos, false))
    }

    #[test]
    fn decodes_with_extensions_and_trailers() {
        let body = b"5;name=v\r\nhello\r\n6\r\n world\r\n0\r\nX-T: 1\r\n\r\nNEXT";
        let (out, used, done) = decode_all(body, &[]).unwrap();
        assert!(done);
        assert_eq!(out, b"hello world");
        assert_eq!(&body[used..], b"NEXT");
    }

    #[test]
    fn rejects_bad_framing() {
        let mut d = ChunkedDecoder::new();
        assert_eq!(d.feed(b"zz\r\n", None), Err(ChunkedError::BadSize));
        let mut d = ChunkedDecoder::new();
        assert_eq!(d.feed(b"2\r\nabX", None), Err(ChunkedError::BadLineEnd));
        let mut d = ChunkedDecoder::new();
        assert_eq!(
            d.feed(b"11111111111111111\r\n", None),
            Err(ChunkedError::BadSize)
        );
        let mut d = ChunkedDecoder::new();
        assert_eq!(d.feed(b"\r\n", None), Err(ChunkedError::BadSize));
    }

    proptest! {
        #[test]
        fn any_split_decodes_the_same(
            chunks in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..40), 0..8),
            cuts in proptest::collection::vec(any::<usize>(), 0..10),
            tail in proptest::collection::vec(any::<u8>(), 0..10),
        ) {
            let mut wire = Vec::new();
            let mut expected = Vec::new();
            for c in &chunks {
                encode_chunk(&mut wire, c);
                expected.extend_from_slice(c);
            }
            wire.extend_from_slice(LAST_CHUNK);
            let body_len = wire.len();
            wire.extend_from_slice(&tail);
            let (out, used, done) = decode_all(&wire, &cuts).unwrap();
            prop_assert!(done);
            prop_assert_eq!(used, body_len);
            prop_assert_eq!(out, expected);
        }
    }
}
