//! One streamed request as the client sees it: a [`BodySink`] that times every SSE event and
//! keeps what the report needs (the first content event, the gaps between content events, the
//! usage chunk, and the gateway's headers), then a [`Sample`] with every time counted from the
//! request's scheduled send time.

use std::time::{Duration, Instant};

use inferrail_wire::ResponseHead;
use serde::Deserialize;

use crate::conn::BodySink;
use crate::sse::SseScanner;

/// The replica header the gateway adds.
pub const REPLICA_HEADER: &str = "x-inferrail-replica";
/// The gateway's predicted prompt tokens.
pub const PROMPT_TOKENS_HEADER: &str = "x-inferrail-prompt-tokens";
/// The gateway's predicted cached (prefix-hit) tokens.
pub const CACHED_TOKENS_HEADER: &str = "x-inferrail-cached-tokens";

/// The `usage` chunk of a stream.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenUsage {
    /// `usage.prompt_tokens`.
    pub prompt_tokens: u64,
    /// `usage.completion_tokens`.
    pub completion_tokens: u64,
    /// `usage.prompt_tokens_details.cached_tokens`, when reported.
    pub cached_tokens: Option<u64>,
}

/// Why a request did not complete.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// No connection could be opened.
    Connect,
    /// The time limit passed first.
    Timeout,
    /// A complete response with a non-2xx status.
    Status(u16),
    /// The exchange broke (bad framing, reset, closed early).
    Protocol,
    /// A 2xx whose event stream lacked `[DONE]`, carried an error event or events after it.
    Incomplete,
}

/// What one request measured. Times are from its scheduled send time.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Scheduled after the warmup: counted in the report.
    pub measured: bool,
    /// `None` when it completed.
    pub failure: Option<Failure>,
    /// Actual send minus scheduled send (`None`: never written, e.g. no connection).
    pub send_lag: Option<Duration>,
    /// To the first event carrying content (`None`: no content arrived).
    pub ttft: Option<Duration>,
    /// To the end of the response (or the failure).
    pub e2e: Duration,
    /// Gaps between consecutive content events.
    pub itl: Vec<Duration>,
    /// The usage chunk, when one arrived.
    pub usage: Option<TokenUsage>,
    /// [`REPLICA_HEADER`].
    pub replica: Option<String>,
    /// [`PROMPT_TOKENS_HEADER`], parsed.
    pub predicted_prompt: Option<u64>,
    /// [`CACHED_TOKENS_HEADER`], parsed.
    pub predicted_cached: Option<u64>,
}

impl Sample {
    /// Time per output token: `(e2e − ttft) / (completion_tokens − 1)` from the usage chunk;
    /// `None` without TTFT, usage, or with fewer than two completion tokens.
    pub fn tpot(&self) -> Option<Duration> {
        tpot(self.e2e, self.ttft?, self.usage?.completion_tokens)
    }
}

/// `(e2e − ttft) / (completion_tokens − 1)`; `None` below two tokens.
pub fn tpot(e2e: Duration, ttft: Duration, completion_tokens: u64) -> Option<Duration> {
    let gaps = u32::try_from(completion_tokens.checked_sub(1)?).ok()?;
    if gaps == 0 {
        return None;
    }
    Some(e2e.saturating_sub(ttft) / gaps)
}

/// Watches one response as it streams in.
#[derive(Debug)]
pub struct Observer {
    scanner: SseScanner,
    /// When the first content event arrived.
    first_content: Option<Instant>,
    /// When the latest content event arrived.
    last_content: Option<Instant>,
    /// Gaps between content events.
    itl: Vec<Duration>,
    usage: Option<TokenUsage>,
    replica: Option<String>,
    predicted_prompt: Option<u64>,
    predicted_cached: Option<u64>,
}

impl Default for Observer {
    fn default() -> Observer {
        Observer {
            scanner: SseScanner::new(),
            first_content: None,
            last_content: None,
            itl: Vec::new(),
            usage: None,
            replica: None,
            predicted_prompt: None,
            predicted_cached: None,
        }
    }
}

/// The parts of a `chat.completion.chunk` (or `text_completion`) event that matter here.
#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Vec<Choice>,
    usage: Option<UsageJson>,
}

#[derive(Deserialize)]
struct Choice {
    delta: Option<Delta>,
    text: Option<String>,
}

#[derive(Deserialize)]
struct Delta {
    content: Option<String>,
    reasoning_content: Option<String>,
    tool_calls: Option<serde::de::IgnoredAny>,
}

#[derive(Deserialize)]
struct UsageJson {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    prompt_tokens_details: Option<Details>,
}

#[derive(Deserialize)]
struct Details {
    cached_tokens: Option<u64>,
}

/// What one event's data carries: a token (content, reasoning, text, a tool call) and usage.
pub fn classify_event(data: &[u8]) -> (bool, Option<TokenUsage>) {
    if data == b"[DONE]" || data.first() != Some(&b'{') {
        return (false, None);
    }
    let Ok(chunk) = serde_json::from_slice::<Chunk>(data) else {
        return (false, None);
    };
    let nonempty = |s: &Option<String>| s.as_deref().is_some_and(|s| !s.is_empty());
    let token = chunk.choices.iter().any(|c| {
        nonempty(&c.text)
            || c.delta.as_ref().is_some_and(|d| {
                nonempty(&d.content) || nonempty(&d.reasoning_content) || d.tool_calls.is_some()
            })
    });
    let usage = chunk.usage.map(|u| TokenUsage {
        prompt_tokens: u.prompt_tokens,
        completion_tokens: u.completion_tokens,
        cached_tokens: u.prompt_tokens_details.and_then(|d| d.cached_tokens),
    });
    (token, usage)
}

fn header_str(head: &ResponseHead, name: &str) -> Option<String> {
    head.header(name)
        .map(|v| String::from_utf8_lossy(v).trim().to_string())
}

impl BodySink for Observer {
    fn head(&mut self, head: &ResponseHead) {
        self.replica = header_str(head, REPLICA_HEADER);
        self.predicted_prompt = header_str(head, PROMPT_TOKENS_HEADER).and_then(|v| v.parse().ok());
        self.predicted_cached = header_str(head, CACHED_TOKENS_HEADER).and_then(|v| v.parse().ok());
    }

    fn body(&mut self, bytes: &[u8]) {
        let now = Instant::now();
        let Observer {
            scanner,
            first_content,
            last_content,
            itl,
            usage,
            ..
        } = self;
        scanner.feed_events(bytes, &mut |data| {
            let (token, u) = classify_event(data);
            if token {
                if let Some(last) = *last_content {
                    itl.push(now.saturating_duration_since(last));
                }
                first_content.get_or_insert(now);
                *last_content = Some(now);
            }
            if u.is_some() {
                *usage = u;
            }
        });
    }
}

impl Observer {
    /// The sample of a request scheduled at `scheduled`, written at `sent` (if it was), that
    /// ended at `ended` with `status` (`Err`: no complete response).
    pub fn finish(
        mut self,
        measured: bool,
        scheduled: Instant,
        sent: Option<Instant>,
        ended: Instant,
        status: Result<u16, Failure>,
    ) -> Sample {
        self.scanner.finish();
        let events = self.scanner.summary();
        let failure = match status {
            Err(f) => Some(f),
            Ok(s) if !(200..300).contains(&s) => Some(Failure::Status(s)),
            Ok(_) if !events.done || events.after_done > 0 || events.error_event => {
                Some(Failure::Incomplete)
            }
            Ok(_) => None,
        };
        let since = |t: Instant| t.saturating_duration_since(scheduled);
        Sample {
            measured,
            failure,
            send_lag: sent.map(since),
            ttft: self.first_content.map(since),
            e2e: since(ended),
            itl: self.itl,
            usage: self.usage,
            replica: self.replica,
            predicted_prompt: self.predicted_prompt,
            predicted_cached: self.predicted_cached,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tpot_uses_usage_tokens() {
        let ms = Duration::from_millis;
        // 16 tokens: 15 gaps after the first.
        assert_eq!(tpot(ms(320), ms(20), 16), Some(ms(20)));
        assert_eq!(tpot(ms(120), ms(20), 11), Some(ms(10)));
        assert_eq!(tpot(ms(100), ms(20), 1), None, "one token has no gaps");
        assert_eq!(tpot(ms(100), ms(20), 0), None);
        assert_eq!(
            tpot(ms(10), ms(20), 2),
            Some(Duration::ZERO),
            "never negative"
        );
        let s = Sample {
            measured: true,
            failure: None,
            send_lag: Some(Duration::ZERO),
            ttft: Some(ms(50)),
            e2e: ms(450),
            // Five content chunks, but usage says nine tokens: usage wins.
            itl: vec![ms(100); 4],
            usage: Some(TokenUsage {
                prompt_tokens: 10,
                completion_tokens: 9,
                cached_tokens: None,
            }),
            replica: None,
            predicted_prompt: None,
            predicted_cached: None,
        };
        assert_eq!(s.tpot(), Some(ms(50)));
    }

    #[test]
    fn events_classified() {
        let (t, u) =
            classify_event(br#"{"choices":[{"delta":{"role":"assistant","content":""}}]}"#);
        assert!(!t && u.is_none(), "the role chunk is not a token");
        let (t, _) = classify_event(br#"{"choices":[{"delta":{"content":"hi"}}]}"#);
        assert!(t);
        let (t, _) = classify_event(br#"{"choices":[{"text":"x","index":0}]}"#);
        assert!(t, "completions API");
        let (t, _) = classify_event(br#"{"choices":[{"delta":{"tool_calls":[]}}]}"#);
        assert!(t);
        let (t, u) = classify_event(
            br#"{"choices":[],"usage":{"prompt_tokens":30,"completion_tokens":16,"prompt_tokens_details":{"cached_tokens":16}}}"#,
        );
        assert!(!t);
        assert_eq!(
            u,
            Some(TokenUsage {
                prompt_tokens: 30,
                completion_tokens: 16,
                cached_tokens: Some(16)
            })
        );
        assert_eq!(classify_event(b"[DONE]"), (false, None));
        assert_eq!(classify_event(b"{not json"), (false, None));
    }
}
