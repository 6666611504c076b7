//! prometheus-fastapi-instrumentator's `http_*` families, as vLLM 0.32 registers them
//! (`Instrumentator(excluded_handlers=[...]).add().instrument(app)`, the default metrics).
//!
//! Per request the instrumentator records, in this order (each child created on first use, the
//! page lists children in creation order):
//! - `http_requests_total{handler,method,status}`: status grouped to `"2xx"`, `"4xx"`, ...;
//! - `http_request_size_bytes{handler}` (summary): the request's `Content-Length` header, 0
//!   without one (chunked bodies count 0);
//! - `http_response_size_bytes{handler}` (summary): the response's `Content-Length` header, 0
//!   without one (streamed responses count 0);
//! - `http_request_duration_highr_seconds` (unlabelled histogram, every status);
//! - `http_request_duration_seconds{handler,method}` (histogram, buckets 0.1, 0.5, 1).
//!
//! `handler` is the matched route's template; a request that matches no route (404, and 405:
//! Starlette's partial match) counts as `"none"`. Requests are not recorded when the handler (the
//! raw path when unmatched) contains one of [`EXCLUDED_HANDLERS`] (regex `search` of plain
//! patterns), so `/metrics`, `/health`, ... never appear.
//!
//! Pure like the rest of [`crate::prom`]: durations and timestamps come in as arguments.

use super::text::{self, Histogram};

/// vLLM's `excluded_handlers` (searched as substrings of the handler).
pub const EXCLUDED_HANDLERS: &[&str] = &[
    "/metrics",
    "/health",
    "/load",
    "/ping",
    "/version",
    "/server_info",
];

/// Bounds of `http_request_duration_highr_seconds`.
pub const HIGHR_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0,
    7.5, 10.0, 30.0, 60.0,
];
/// Bounds of `http_request_duration_seconds`.
pub const LOWR_BUCKETS: &[f64] = &[0.1, 0.5, 1.0];

/// The `handler` label of a request that matched no route.
pub const UNMATCHED: &str = "none";

const HELP_TOTAL: &str = "Total number of requests by method, status and handler.";
const HELP_IN: &str = "Content length of incoming requests by handler. Only value of header is respected. Otherwise ignored. No percentile calculated. ";
const HELP_OUT: &str = "Content length of outgoing responses by handler. Only value of header is respected. Otherwise ignored. No percentile calculated. ";
const HELP_HIGHR: &str = "Latency with many buckets but no API specific labels. Made for more accurate percentile calculations. ";
const HELP_LOWR: &str = "Latency with only few buckets by handler. Made to be only used if aggregation by handler is important. ";

/// The instrumentator's status label: the first digit and `xx` (`200` → `"2xx"`).
pub fn status_group(status: u16) -> String {
    format!("{}xx", status / 100)
}

/// Whether a request to `handler` (route template, or raw path when unmatched) is not recorded.
pub fn is_excluded(handler: &str) -> bool {
    EXCLUDED_HANDLERS.iter().any(|p| handler.contains(p))
}

/// One finished HTTP request as the instrumentator sees it.
#[derive(Debug, Clone, Copy)]
pub struct HttpRequest<'a> {
    /// The route template, or `None` when no route matched (recorded as `"none"`).
    pub route: Option<&'a str>,
    /// The raw request path (without query), checked against the exclusions when unmatched.
    pub path: &'a str,
    /// The request method (`GET`, `POST`, ...).
    pub method: &'a str,
    /// The response status code.
    pub status: u16,
    /// The request's `Content-Length` header value (0 without one).
    pub request_size: u64,
    /// The response's `Content-Length` header value (0 without one).
    pub response_size: u64,
    /// Seconds from the request reaching the app to the end of the response.
    pub duration: f64,
    /// Unix time now: the `_created` value of children this request creates.
    pub now_unix: f64,
}

#[derive(Debug, Clone)]
struct Summary {
    handler: String,
    count: u64,
    sum: f64,
    created: f64,
}

impl Summary {
    fn observe(list: &mut Vec<Summary>, handler: &str, v: f64, now: f64) {
        let i = match list.iter().position(|s| s.handler == handler) {
            Some(i) => i,
            None => {
                list.push(Summary {
                    handler: handler.to_owned(),
                    count: 0,
                    sum: 0.0,
                    created: now,
                });
                list.len() - 1
            }
        };
        list[i].count += 1;
        list[i].sum += v;
    }
}

/// The `http_*` families: a recorder per server, rendered after the `vllm:` families.
#[derive(Debug, Clone)]
pub struct HttpMetrics {
    /// `(handler, method, status group)`, count, created.
    requests: Vec<((String, String, String), u64, f64)>,
    request_size: Vec<Summary>,
    response_size: Vec<Summary>,
    highr: Histogram,
    highr_created: f64,
    /// `(handler, method)`, histogram, created.
    duration: Vec<((String, String), Histogram, f64)>,
}

impl HttpMetrics {
    /// An empty recorder; the unlabelled histogram's `_created` is `created_unix` (when the
    /// instrumentator was set up).
    pub fn new(created_unix: f64) -> Self {
        Self {
            requests: Vec::new(),
            request_size: Vec::new(),
            response_size: Vec::new(),
            highr: Histogram::new(HIGHR_BUCKETS.to_vec()),
            highr_created: created_unix,
            duration: Vec::new(),
        }
    }

    /// Records one request; returns false (and records nothing) when it is excluded.
    pub fn observe(&mut self, r: &HttpRequest<'_>) -> bool {
        let handler = match r.route {
            Some(h) if !is_excluded(h) => h,
            None if !is_excluded(r.path) => UNMATCHED,
            _ => return false,
        };
        let now = r.now_unix;
        let key = (
            handler.to_owned(),
            r.method.to_owned(),
            status_group(r.status),
        );
        match self.requests.iter_mut().find(|(k, _, _)| *k == key) {
            Some((_, n, _)) => *n += 1,
            None => self.requests.push((key, 1, now)),
        }
        Summary::observe(&mut self.request_size, handler, r.request_size as f64, now);
        Summary::observe(
            &mut self.response_size,
            handler,
            r.response_size as f64,
            now,
        );
        let duration = r.duration.max(0.0);
        self.highr.observe(duration);
        let key = (handler.to_owned(), r.method.to_owned());
        match self.duration.iter_mut().find(|(k, _, _)| *k == key) {
            Some((_, h, _)) => h.observe(duration),
            None => {
                let mut h = Histogram::new(LOWR_BUCKETS.to_vec());
                h.observe(duration);
                self.duration.push((key, h, now));
            }
        }
        true
    }

    /// Number of recorded requests (`http_request_duration_highr_seconds_count`).
    pub fn count(&self) -> u64 {
        self.highr.count()
    }

    /// Appends the five families (and their `_created` gauges) as the instrumentator's
    /// collectors write them; a labelled family without children is only its HELP/TYPE.
    pub fn render_into(&self, out: &mut String) {
        text::write_header(out, "http_requests_total", HELP_TOTAL, "counter");
        for ((h, m, s), n, _) in &self.requests {
            let labels = [("handler", h.as_str()), ("method", m), ("status", s)];
            text::write_sample(out, "http_requests_total", &labels, *n as f64);
        }
        if !self.requests.is_empty() {
            text::write_header(out, "http_requests_created", HELP_TOTAL, "gauge");
            for ((h, m, s), _, c) in &self.requests {
                let labels = [("handler", h.as_str()), ("method", m), ("status", s)];
                text::write_sample(out, "http_requests_created", &labels, *c);
            }
        }
        for (name, help, list) in [
            ("http_request_size_bytes", HELP_IN, &self.request_size),
            ("http_response_size_bytes", HELP_OUT, &self.response_size),
        ] {
            text::write_header(out, name, help, "summary");
            for s in list {
                let labels = [("handler", s.handler.as_str())];
                text::write_sample(out, &format!("{name}_count"), &labels, s.count as f64);
                text::write_sample(out, &format!("{name}_sum"), &labels, s.sum);
            }
            if !list.is_empty() {
                let created = format!("{name}_created");
                text::write_header(out, &created, help, "gauge");
                for s in list {
                    let labels = [("handler", s.handler.as_str())];
                    text::write_sample(out, &created, &labels, s.created);
                }
            }
        }
        let name = "http_request_duration_highr_seconds";
        text::write_header(out, name, HELP_HIGHR, "histogram");
        self.highr.write(out, name, &[]);
        let created = format!("{name}_created");
        text::write_header(out, &created, HELP_HIGHR, "gauge");
        text::write_sample(out, &created, &[], self.highr_created);

        let name = "http_request_duration_seconds";
        text::write_header(out, name, HELP_LOWR, "histogram");
        for ((h, m), hist, _) in &self.duration {
            hist.write(out, name, &[("handler", h.as_str()), ("method", m)]);
        }
        if !self.duration.is_empty() {
            let created = format!("{name}_created");
            text::write_header(out, &created, HELP_LOWR, "gauge");
            for ((h, m), _, c) in &self.duration {
                let labels = [("handler", h.as_str()), ("method", m.as_str())];
                text::write_sample(out, &created, &labels, *c);
            }
        }
    }

    /// The five families as a string (see [`HttpMetrics::render_into`]).
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(8 * 1024);
        self.render_into(&mut out);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req<'a>(
        route: Option<&'a str>,
        path: &'a str,
        method: &'a str,
        status: u16,
    ) -> HttpRequest<'a> {
        HttpRequest {
            route,
            path,
            method,
            status,
            request_size: 10,
            response_size: 20,
            duration: 0.02,
            now_unix: 2.0,
        }
    }

    #[test]
    fn prom_http_groups_status_and_excludes_vllm_handlers() {
        assert_eq!(status_group(200), "2xx");
        assert_eq!(status_group(422), "4xx");
        let mut m = HttpMetrics::new(1.0);
        assert!(!m.observe(&req(Some("/metrics"), "/metrics", "GET", 200)));
        assert!(!m.observe(&req(Some("/health"), "/health", "GET", 200)));
        assert!(!m.observe(&req(None, "/metrics", "POST", 405)));
        assert!(m.observe(&req(None, "/v1/nope", "GET", 404)));
        assert!(m.observe(&req(Some("/tokenize"), "/tokenize", "POST", 200)));
        assert_eq!(m.count(), 2);
        let page = m.render();
        assert!(page
            .contains("http_requests_total{handler=\"none\",method=\"GET\",status=\"4xx\"} 1.0\n"));
        assert!(page.contains("http_request_size_bytes_sum{handler=\"/tokenize\"} 10.0\n"));
        assert!(page.contains("http_response_size_bytes_count{handler=\"none\"} 1.0\n"));
        assert!(page.contains(
            "http_request_duration_seconds_bucket{handler=\"/tokenize\",le=\"0.1\",method=\"POST\"} 1.0\n"
        ));
        assert!(page.contains("http_request_duration_highr_seconds_created 1.0\n"));
    }
}
