//! What an admin route answers: status, content type, extra headers and body, written by the
//! listener.

use inferrail_wire::{openai_error, ErrorKind};

/// A response to write: status, extra headers, JSON or text body.
pub struct AdminResponse {
    /// HTTP status.
    pub status: u16,
    /// Content type.
    pub content_type: &'static str,
    /// Body.
    pub body: Vec<u8>,
    /// Extra headers.
    pub headers: Vec<(&'static str, &'static [u8])>,
}

impl AdminResponse {
    /// A JSON answer.
    pub fn json(status: u16, value: &serde_json::Value) -> AdminResponse {
        AdminResponse {
            status,
            content_type: "application/json",
            body: serde_json::to_vec(value).unwrap_or_default(),
            headers: Vec::new(),
        }
    }

    /// An OpenAI-shaped error.
    pub fn error(kind: ErrorKind, message: &str) -> AdminResponse {
        AdminResponse {
            status: kind.status(),
            content_type: "application/json",
            body: openai_error(kind, message, None),
            headers: Vec::new(),
        }
    }

    /// 405 with the `allow` header.
    pub fn method_not_allowed(allow: &'static [u8]) -> AdminResponse {
        let mut r = AdminResponse::error(ErrorKind::MethodNotAllowed, "Method Not Allowed");
        r.headers.push(("allow", allow));
        r
    }
}
