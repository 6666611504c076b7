//! vLLM 0.32's `validate_json_request` dependency (`vllm/entrypoints/serve/utils/api_utils.py`)
//! on the JSON POST routes, with FastAPI 0.136's body read that runs before it: a body is
//! JSON-decoded first only when its `content-type` is `application/json` or
//! `application/*+json` (strict content type: a missing header is not decoded), so a
//! malformed body there still gets the JSON decode error; then any media type other than
//! `application/json` gets a `RequestValidationError` whose one error is a plain string.

use super::error::{python_json_error, ApiError};

/// The dependency's error string.
const UNSUPPORTED: &str = "Unsupported Media Type: Only 'application/json' is allowed";

/// `email.message.Message.get_content_type()`: `maintype/subtype` lowercased, parameters
/// dropped, `text/plain` when the value is not of that form.
fn email_content_type(value: &str) -> String {
    let main = value
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if main.matches('/').count() == 1 {
        main
    } else {
        "text/plain".to_owned()
    }
}

/// Whether FastAPI JSON-decodes a body sent with this `content-type`.
fn fastapi_decodes(content_type: Option<&str>) -> bool {
    let Some(ct) = content_type.filter(|c| !c.is_empty()) else {
        return false;
    };
    let full = email_content_type(ct);
    match full.split_once('/') {
        Some(("application", sub)) => sub == "json" || sub.ends_with("+json"),
        _ => false,
    }
}

/// Checks a JSON route's request `content-type` (the raw header value, `None` when absent)
/// for `body`; the error is vLLM's 400.
pub fn check_json_media_type(content_type: Option<&[u8]>, body: &[u8]) -> Result<(), ApiError> {
    // Starlette decodes header values as latin-1.
    let ct: Option<String> = content_type.map(|v| v.iter().map(|&b| char::from(b)).collect());
    let media = ct.as_deref().unwrap_or("").to_lowercase();
    let media = media.split(';').next().unwrap_or("");
    if media == "application/json" {
        return Ok(());
    }
    if fastapi_decodes(ct.as_deref()) && !body.is_empty() {
        let text = String::from_utf8_lossy(body);
        if python_json_error(&text).is_some() {
            return Err(ApiError::bad_json(body));
        }
    }
    Err(ApiError::vllm(
        400,
        "Bad Request",
        &format!("1 validation error:\n  {UNSUPPORTED}"),
        None,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY: &[u8] = br#"{"messages":[]}"#;
    const WANT: &str = "{\"error\":{\"message\":\"1 validation error:\\n  Unsupported Media Type: Only 'application/json' is allowed\",\"type\":\"Bad Request\",\"param\":null,\"code\":400}}";

    #[test]
    fn json_media_types_pass() {
        for ct in [
            &b"application/json"[..],
            b"Application/JSON",
            b"application/json; charset=utf-8",
            b"application/json;charset=utf-8",
        ] {
            assert!(check_json_media_type(Some(ct), BODY).is_ok(), "{ct:?}");
        }
    }

    #[test]
    fn missing_or_other_media_types_are_refused() {
        for ct in [
            None,
            Some(&b""[..]),
            Some(b"text/plain"),
            Some(b"application/x-www-form-urlencoded"),
            Some(b"application/vnd.api+json"),
            Some(b"application/json ; charset=utf-8"),
        ] {
            let e = check_json_media_type(ct, BODY).expect_err("refused");
            assert_eq!(e.status, 400);
            assert_eq!(e.body, WANT, "{ct:?}");
        }
        // An empty body without a content type: the dependency still refuses it.
        assert_eq!(
            check_json_media_type(None, b"").expect_err("refused").body,
            WANT
        );
    }

    #[test]
    fn a_decoded_media_type_reports_bad_json_first() {
        let e =
            check_json_media_type(Some(b"application/problem+json"), b"{\"a\":").expect_err("bad");
        assert!(e.body.contains("json_invalid"), "{}", e.body);
        // Without a content type FastAPI does not decode: the media type error wins.
        let e = check_json_media_type(None, b"{\"a\":").expect_err("bad");
        assert_eq!(e.body, WANT);
    }
}
