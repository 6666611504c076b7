//! An incremental Server-Sent Events scanner for OpenAI-style streams: fed the decoded body bytes
//! as they arrive, split at any byte, it counts events and notes the usage chunk, the finish
//! reason and the closing `data: [DONE]`. It keeps only the current partial line.

use serde::Serialize;

/// What a stream carried, as far as the scanner has seen.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct SseSummary {
    /// Complete events (a blank line ends each) with at least one `data:` line, `[DONE]` included.
    pub events: u64,
    /// `data: [DONE]` was seen.
    pub done: bool,
    /// Events after `[DONE]` (a protocol violation).
    pub after_done: u64,
    /// A chunk with a non-null `usage` object was seen (`stream_options.include_usage`).
    pub usage: bool,
    /// A chunk with a non-null `finish_reason` was seen.
    pub finish: bool,
    /// An event whose data is an error object (`{"error": ...}` or `"object":"error"`).
    pub error_event: bool,
}

/// The scanner's state.
#[derive(Debug, Default)]
pub struct SseScanner {
    /// The current line, not yet ended.
    line: Vec<u8>,
    /// The current event's data lines, joined with `\n`.
    data: Vec<u8>,
    /// The current event has a `data:` field.
    has_data: bool,
    /// The last byte was `\r` (a following `\n` belongs to the same line end).
    after_cr: bool,
    summary: SseSummary,
}

/// Longest line kept; longer lines are truncated (their head is enough to classify them).
const MAX_LINE: usize = 1 << 20;

impl SseScanner {
    /// A scanner at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// What has been seen so far.
    pub fn summary(&self) -> SseSummary {
        self.summary
    }

    /// Consumes the next bytes of the (de-chunked) body.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.feed_events(bytes, &mut |_| {});
    }

    /// As [`SseScanner::feed`], and hands each event's data (its `data:` lines joined with `\n`,
    /// `[DONE]` included) to `on_event` as the event ends.
    pub fn feed_events(&mut self, bytes: &[u8], on_event: &mut impl FnMut(&[u8])) {
        for &b in bytes {
            match b {
                b'\n' if self.after_cr => self.after_cr = false,
                b'\n' | b'\r' => {
                    self.after_cr = b == b'\r';
                    self.end_line(on_event);
                }
                _ => {
                    self.after_cr = false;
                    if self.line.len() < MAX_LINE {
                        self.line.push(b);
                    }
                }
            }
        }
    }

    /// The body ended. An event not closed by a blank line is dropped, as `EventSource` does: a
    /// stream cut inside its last event shows as a missing `[DONE]`.
    pub fn finish(&mut self) {
        self.line.clear();
        self.data.clear();
        self.has_data = false;
    }

    fn end_line(&mut self, on_event: &mut impl FnMut(&[u8])) {
        if self.line.is_empty() {
            self.end_event(on_event);
            return;
        }
        let line = std::mem::take(&mut self.line);
        if let Some(rest) = line.strip_prefix(b"data") {
            if rest.is_empty() || rest[0] == b':' {
                let mut value = rest.get(1..).unwrap_or_default();
                if let Some(v) = value.strip_prefix(b" ") {
                    value = v;
                }
                if self.has_data {
                    self.data.push(b'\n');
                }
                self.data.extend_from_slice(value);
                self.has_data = true;
            }
        }
        // Comments (`:`) and other fields (event, id, retry) are ignored.
        self.line = line;
        self.line.clear();
    }

    fn end_event(&mut self, on_event: &mut impl FnMut(&[u8])) {
        if !self.has_data {
            return;
        }
        on_event(&self.data);
        let s = &mut self.summary;
        if s.done {
            s.after_done += 1;
        }
        s.events += 1;
        let data = &self.data[..];
        if data == b"[DONE]" {
            s.done = true;
        } else {
            if contains(data, b"\"usage\":{") {
                s.usage = true;
            }
            if contains(data, b"\"finish_reason\":\"") {
                s.finish = true;
            }
            if data.starts_with(b"{\"error\"") || contains(data, b"\"object\":\"error\"") {
                s.error_event = true;
            }
        }
        self.data.clear();
        self.has_data = false;
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    const STREAM: &[u8] =
        b"data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"},\"finish_reason\":null}]}\n\n\
data: {\"choices\":[{\"delta\":{\"content\":\"a\"},\"finish_reason\":\"length\"}]}\n\n\
data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3}}\n\n\
data: [DONE]\n\n";

    #[test]
    fn whole_stream() {
        let mut s = SseScanner::new();
        s.feed(STREAM);
        s.finish();
        let sum = s.summary();
        assert_eq!(sum.events, 4);
        assert!(sum.done && sum.usage && sum.finish && !sum.error_event);
        assert_eq!(sum.after_done, 0);
    }

    #[test]
    fn split_at_every_byte_and_crlf() {
        let crlf: Vec<u8> = STREAM
            .split(|b| *b == b'\n')
            .flat_map(|l| l.iter().copied().chain(*b"\r\n"))
            .collect();
        for input in [STREAM.to_vec(), crlf] {
            let mut s = SseScanner::new();
            for b in &input {
                s.feed(std::slice::from_ref(b));
            }
            let sum = s.summary();
            assert_eq!(sum.events, 4, "{:?}", String::from_utf8_lossy(&input));
            assert!(sum.done && sum.usage && sum.finish);
        }
    }

    #[test]
    fn done_only_when_whole_event() {
        let mut s = SseScanner::new();
        s.feed(b": comment\n\ndata: [DONE]");
        assert!(!s.summary().done, "the event is not ended yet");
        assert_eq!(s.summary().events, 0);
        s.feed(b"\n\n");
        assert!(s.summary().done);
        s.feed(b"data: {\"x\":1}\n\n");
        assert_eq!(s.summary().after_done, 1);
    }

    #[test]
    fn error_and_truncated_streams() {
        let mut s = SseScanner::new();
        s.feed(b"data: {\"error\":{\"message\":\"boom\"}}\n\n");
        s.finish();
        assert!(s.summary().error_event);
        assert!(!s.summary().done);

        let mut s = SseScanner::new();
        s.feed(b"data: {\"choices\":[]}\n\ndata: [DONE]\n");
        s.finish();
        assert!(!s.summary().done, "an unterminated [DONE] event is dropped");
        assert_eq!(s.summary().events, 1);
    }
}
