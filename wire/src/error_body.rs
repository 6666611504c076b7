//! Error bodies in the OpenAI shape vLLM sends: `{"error":{"message","type","param","code"}}`.

use crate::model_field::push_json_string;

/// The errors the gateway answers itself, each with its status and OpenAI error type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// 400: the request cannot be read.
    BadRequest,
    /// 404: unknown route or model.
    NotFound,
    /// 405: the route exists, the method does not.
    MethodNotAllowed,
    /// 408: the request did not arrive in time.
    RequestTimeout,
    /// 413: the body is larger than `server.max_body_bytes`.
    PayloadTooLarge,
    /// 431: the head is too large or has too many lines.
    HeaderFieldsTooLarge,
    /// 500: a gateway bug.
    Internal,
    /// 502: every engine attempt failed.
    BadGateway,
    /// 503: no replica can take the request now.
    ServiceUnavailable,
    /// 504: the engine did not answer within the request deadline.
    GatewayTimeout,
}

impl ErrorKind {
    /// HTTP status code.
    pub fn status(self) -> u16 {
        match self {
            ErrorKind::BadRequest => 400,
            ErrorKind::NotFound => 404,
            ErrorKind::MethodNotAllowed => 405,
            ErrorKind::RequestTimeout => 408,
            ErrorKind::PayloadTooLarge => 413,
            ErrorKind::HeaderFieldsTooLarge => 431,
            ErrorKind::Internal => 500,
            ErrorKind::BadGateway => 502,
            ErrorKind::ServiceUnavailable => 503,
            ErrorKind::GatewayTimeout => 504,
        }
    }

    /// The `type` field, named like vLLM's error classes.
    pub fn type_name(self) -> &'static str {
        match self {
            ErrorKind::BadRequest => "BadRequestError",
            ErrorKind::NotFound => "NotFoundError",
            ErrorKind::MethodNotAllowed => "MethodNotAllowedError",
            ErrorKind::RequestTimeout => "RequestTimeoutError",
            ErrorKind::PayloadTooLarge => "PayloadTooLargeError",
            ErrorKind::HeaderFieldsTooLarge => "RequestHeaderFieldsTooLargeError",
            ErrorKind::Internal => "InternalServerError",
            ErrorKind::BadGateway => "BadGatewayError",
            ErrorKind::ServiceUnavailable => "ServiceUnavailableError",
            ErrorKind::GatewayTimeout => "GatewayTimeoutError",
        }
    }
}

/// The JSON error body for `kind`, e.g.
/// `{"error":{"message":"...","type":"NotFoundError","param":"model","code":404}}`.
pub fn openai_error(kind: ErrorKind, message: &str, param: Option<&str>) -> Vec<u8> {
    let mut out = Vec::with_capacity(96 + message.len());
    out.extend_from_slice(b"{\"error\":{\"message\":");
    push_json_string(&mut out, message);
    out.extend_from_slice(b",\"type\":");
    push_json_string(&mut out, kind.type_name());
    out.extend_from_slice(b",\"param\":");
    match param {
        Some(p) => push_json_string(&mut out, p),
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\"code\":");
    out.extend_from_slice(kind.status().to_string().as_bytes());
    out.extend_from_slice(b"}}");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_vllm_unknown_model_bytes() {
        // Byte-exact body from a vLLM 0.32 capture (shared/fixtures/vllm/http/35_err_unknown_model).
        let want = br#"{"error":{"message":"The model `no-such-model` does not exist. Valid aliases: tiny.","type":"NotFoundError","param":"model","code":404}}"#;
        let got = openai_error(
            ErrorKind::NotFound,
            "The model `no-such-model` does not exist. Valid aliases: tiny.",
            Some("model"),
        );
        assert_eq!(
            std::str::from_utf8(&got).unwrap(),
            std::str::from_utf8(want).unwrap()
        );
    }

    #[test]
    fn escapes_message() {
        let body = openai_error(ErrorKind::BadRequest, "bad \"x\"\n", None);
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["error"]["message"], "bad \"x\"\n");
        assert_eq!(v["error"]["param"], serde_json::Value::Null);
        assert_eq!(v["error"]["code"], 400);
    }
}
