//! vLLM 0.32's `validate_json_request` over HTTP: a JSON route without
//! `Content-Type: application/json` gets FastAPI's 400, before any body check.

mod common;

use common::{exchange, post, CHAT};
use inferrail_sim::server::{SimOptions, SimServer};

const WANT: &str = "{\"error\":{\"message\":\"1 validation error:\\n  Unsupported Media Type: Only 'application/json' is allowed\",\"type\":\"Bad Request\",\"param\":null,\"code\":400}}";

fn raw(path: &str, content_type: Option<&str>, body: &str) -> Vec<u8> {
    let ct = content_type.map_or(String::new(), |c| format!("Content-Type: {c}\r\n"));
    format!(
        "POST {path} HTTP/1.1\r\nHost: engine\r\n{ct}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[test]
fn json_routes_refuse_other_media_types() {
    let mut o = SimOptions::new("tiny");
    o.zero_latency = true;
    let s = SimServer::start(o).expect("start");
    for path in ["/v1/chat/completions", "/v1/completions", "/tokenize"] {
        for ct in [
            None,
            Some("text/plain"),
            Some("application/x-www-form-urlencoded"),
        ] {
            let r = exchange(s.addr(), &raw(path, ct, CHAT));
            assert_eq!(r.status(), 400, "{path} {ct:?}");
            assert_eq!(
                r.header("content-type").as_deref(),
                Some("application/json")
            );
            assert_eq!(String::from_utf8_lossy(&r.body), WANT, "{path} {ct:?}");
        }
    }
    // With the JSON media type (any case, with parameters) the request is served.
    let r = exchange(
        s.addr(),
        &raw(
            "/v1/chat/completions",
            Some("Application/JSON; charset=utf-8"),
            CHAT,
        ),
    );
    assert_eq!(r.status(), 200);
    assert_eq!(
        exchange(s.addr(), &post("/v1/chat/completions", CHAT, "")).status(),
        200
    );
}
