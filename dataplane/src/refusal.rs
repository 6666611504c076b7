//! An error the gateway answers itself: OpenAI-shaped body, `x-request-id`, `retry-after` on
//! 503, `allow` on 405, counted by reason.

use crate::metrics::{CoreRecorder, ErrorReason};
use inferrail_wire::{full_response, openai_error, ErrorKind};

/// An error the gateway answers itself, in the OpenAI shape.
pub(crate) struct Refusal {
    kind: ErrorKind,
    reason: ErrorReason,
    message: String,
    /// `param` of the error body.
    param: Option<&'static str>,
    /// `allow` header value for 405.
    allow: &'static [u8],
    /// The connection must close after the answer (its body was not read).
    pub(crate) close: bool,
}

impl Refusal {
    /// A refusal that keeps the connection open.
    pub(crate) fn new(kind: ErrorKind, reason: ErrorReason, message: String) -> Refusal {
        Refusal {
            kind,
            reason,
            message,
            param: None,
            allow: b"",
            close: false,
        }
    }

    pub(crate) fn closing(mut self, close: bool) -> Refusal {
        self.close |= close;
        self
    }

    pub(crate) fn allow(mut self, allow: &'static [u8]) -> Refusal {
        self.allow = allow;
        self
    }

    pub(crate) fn param(mut self, param: &'static str) -> Refusal {
        self.param = Some(param);
        self
    }

    /// Counts the error on this core.
    pub(crate) fn record(self, recorder: &CoreRecorder) -> Refusal {
        recorder.error(self.reason);
        self
    }

    /// The response bytes: OpenAI error body, `x-request-id`, `retry-after` on 503, `allow` on 405.
    pub(crate) fn response(&self, request_id: &str, head_only: bool, close: bool) -> Vec<u8> {
        let body = openai_error(self.kind, &self.message, self.param);
        let mut headers: Vec<(&str, &[u8])> = vec![("x-request-id", request_id.as_bytes())];
        if self.kind == ErrorKind::ServiceUnavailable {
            headers.push(("retry-after", b"1"));
        }
        if !self.allow.is_empty() {
            headers.push(("allow", self.allow));
        }
        full_response(
            self.kind.status(),
            &headers,
            Some("application/json"),
            &body,
            head_only,
            close || self.close,
        )
    }
}
