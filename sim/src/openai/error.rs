//! Error answers in vLLM 0.32's exact bytes: `{"error":{...}}` bodies, FastAPI's request
//! validation errors (with Python's JSON decoder positions and messages), and Starlette's
//! `{"detail":...}` bodies for unknown routes and wrong methods.

use std::fmt::Write as _;

/// An error answer: status, JSON body, and the `allow` header a 405 carries.
///
/// Every body is `application/json`; the HTTP layer adds uvicorn's usual headers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    /// HTTP status code.
    pub status: u16,
    /// The JSON body, byte for byte what vLLM sends.
    pub body: String,
    /// `allow` header value (405 only), e.g. `POST`.
    pub allow: Option<&'static str>,
}

impl ApiError {
    /// vLLM's `ErrorResponse`: `{"error":{"message":…,"type":…,"param":…,"code":status}}`.
    pub fn vllm(status: u16, kind: &str, message: &str, param: Option<&str>) -> Self {
        let mut body = String::with_capacity(96 + message.len());
        body.push_str("{\"error\":{\"message\":");
        push_json_str(&mut body, message);
        body.push_str(",\"type\":");
        push_json_str(&mut body, kind);
        body.push_str(",\"param\":");
        match param {
            Some(p) => push_json_str(&mut body, p),
            None => body.push_str("null"),
        }
        let _ = write!(body, ",\"code\":{status}}}}}");
        ApiError {
            status,
            body,
            allow: None,
        }
    }

    /// A 400 `BadRequestError` raised by vLLM's `VLLMValidationError`: the message gets
    /// ` (parameter=P, value=V)` appended (or ` (parameter=P)` when there is no value).
    pub fn invalid_param(message: &str, param: &str, value: Option<&str>) -> Self {
        let full = match value {
            Some(v) => format!("{message} (parameter={param}, value={v})"),
            None => format!("{message} (parameter={param})"),
        };
        Self::vllm(400, "BadRequestError", &full, Some(param))
    }

    /// A plain 400 `BadRequestError` with `"param":null` (vLLM's `ValueError` path).
    pub fn bad_request(message: &str) -> Self {
        Self::vllm(400, "BadRequestError", message, None)
    }

    /// 404 for a model this server does not serve.
    pub fn unknown_model(requested: &str, served: &[String]) -> Self {
        let msg = format!(
            "The model `{requested}` does not exist. Valid aliases: {}.",
            served.join(", ")
        );
        Self::vllm(404, "NotFoundError", &msg, Some("model"))
    }

    /// 400 for a parameter the simulator cannot model faithfully. Not a vLLM answer: vLLM would
    /// serve the request, the simulator refuses rather than answer differently.
    pub fn unsupported(param: &str, value: &str, what: &str) -> Self {
        let msg = format!(
            "inferrail-sim does not support {what}; refusing rather than answering unlike vLLM."
        );
        Self::invalid_param(&msg, param, Some(value))
    }

    /// Starlette's 404 for an unknown path.
    pub fn route_not_found() -> Self {
        ApiError {
            status: 404,
            body: "{\"detail\":\"Not Found\"}".to_owned(),
            allow: None,
        }
    }

    /// Starlette's 405 for a known path with the wrong method.
    pub fn method_not_allowed(allow: &'static str) -> Self {
        ApiError {
            status: 405,
            body: "{\"detail\":\"Method Not Allowed\"}".to_owned(),
            allow: Some(allow),
        }
    }

    /// FastAPI's `RequestValidationError` as vLLM renders it (status 400, type `Bad Request`,
    /// param the dotted location of the first error).
    pub(crate) fn validation(errors: &[ValidationItem]) -> Self {
        let mut msg = String::new();
        let _ = write!(
            msg,
            "{} validation error{}:",
            errors.len(),
            if errors.len() == 1 { "" } else { "s" }
        );
        for e in errors {
            msg.push_str("\n  {'type': ");
            push_py_repr(&mut msg, e.kind);
            msg.push_str(", 'loc': ");
            push_py_repr(&mut msg, &e.loc);
            msg.push_str(", 'msg': ");
            push_py_repr(&mut msg, e.msg);
            msg.push_str(", 'input': ");
            msg.push_str(&e.input);
            if let Some(ctx) = &e.ctx {
                msg.push_str(", 'ctx': {'error': ");
                push_py_repr(&mut msg, ctx);
                msg.push('}');
            }
            msg.push('}');
        }
        let param = errors.first().map(|e| e.loc.as_str());
        Self::vllm(400, "Bad Request", &msg, param)
    }

    /// The request validation error for a body that is not valid JSON.
    pub fn bad_json(body: &[u8]) -> Self {
        let text = String::from_utf8_lossy(body);
        let (pos, msg) = python_json_error(&text).unwrap_or((0, "Expecting value".to_owned()));
        Self::validation(&[ValidationItem {
            kind: "json_invalid",
            loc: format!("body.{pos}"),
            msg: "JSON decode error",
            input: "'<dict of 0 items>'".to_owned(),
            ctx: Some(msg),
        }])
    }
}

/// One entry of a FastAPI validation error.
pub(crate) struct ValidationItem {
    pub kind: &'static str,
    pub loc: String,
    pub msg: &'static str,
    /// Already rendered as Python source (vLLM shows dicts as `'<dict of N items>'`).
    pub input: String,
    pub ctx: Option<String>,
}

/// Appends `s` as a JSON string the way pydantic / `json.dumps(ensure_ascii=False)` write it.
pub(crate) fn push_json_str(out: &mut String, s: &str) {
    inferrail_shards::pyfmt::push_json_str(out, s, false);
}

/// Appends Python's `repr()` of a str.
pub(crate) fn push_py_repr(out: &mut String, s: &str) {
    inferrail_shards::pyfmt::push_repr_str(out, s);
}

/// Where and why Python's `json.loads` (CPython 3.12, C scanner) rejects `text`: the position
/// in characters and the message without its position. `None` when Python would accept it.
pub fn python_json_error(text: &str) -> Option<(usize, String)> {
    let s: Vec<char> = text.chars().collect();
    let mut p = PyJson { s: &s };
    let start = p.ws(0);
    let end = match p.value(start) {
        Ok(e) => e,
        Err(e) => return Some(e),
    };
    let end = p.ws(end);
    if end != s.len() {
        return Some((end, "Extra data".to_owned()));
    }
    None
}

type PyResult = Result<usize, (usize, String)>;

struct PyJson<'a> {
    s: &'a [char],
}

impl PyJson<'_> {
    fn ws(&self, mut i: usize) -> usize {
        while i < self.s.len() && matches!(self.s[i], ' ' | '\t' | '\n' | '\r') {
            i += 1;
        }
        i
    }

    fn starts(&self, i: usize, lit: &str) -> bool {
        let n = lit.chars().count();
        i + n <= self.s.len() && self.s[i..i + n].iter().copied().eq(lit.chars())
    }

    fn err(i: usize, msg: &str) -> PyResult {
        Err((i, msg.to_owned()))
    }

    fn value(&mut self, i: usize) -> PyResult {
        let Some(&c) = self.s.get(i) else {
            return Self::err(i, "Expecting value");
        };
        match c {
            '"' => self.string(i + 1),
            '{' => self.object(i + 1),
            '[' => self.array(i + 1),
            'n' if self.starts(i, "null") => Ok(i + 4),
            't' if self.starts(i, "true") => Ok(i + 4),
            'f' if self.starts(i, "false") => Ok(i + 5),
            'N' if self.starts(i, "NaN") => Ok(i + 3),
            'I' if self.starts(i, "Infinity") => Ok(i + 8),
            '-' if self.starts(i, "-Infinity") => Ok(i + 9),
            '-' | '0'..='9' => self.number(i),
            _ => Self::err(i, "Expecting value"),
        }
    }

    fn number(&self, i: usize) -> PyResult {
        let s = self.s;
        let mut j = i;
        if s[j] == '-' {
            j += 1;
        }
        match s.get(j) {
            Some('0') => j += 1,
            Some('1'..='9') => {
                while matches!(s.get(j), Some('0'..='9')) {
                    j += 1;
                }
            }
            _ => return Self::err(i, "Expecting value"),
        }
        if s.get(j) == Some(&'.') && matches!(s.get(j + 1), Some('0'..='9')) {
            j += 1;
            while matches!(s.get(j), Some('0'..='9')) {
                j += 1;
            }
        }
        if matches!(s.get(j), Some('e' | 'E')) {
            let mut k = j + 1;
            if matches!(s.get(k), Some('+' | '-')) {
                k += 1;
            }
            if matches!(s.get(k), Some('0'..='9')) {
                while matches!(s.get(k), Some('0'..='9')) {
                    k += 1;
                }
                j = k;
            }
        }
        Ok(j)
    }

    /// `i` is just after the opening quote.
    fn string(&self, i: usize) -> PyResult {
        let s = self.s;
        let begin = i - 1;
        let mut j = i;
        loop {
            let Some(&c) = s.get(j) else {
                return Self::err(begin, "Unterminated string starting at");
            };
            match c {
                '"' => return Ok(j + 1),
                '\\' => {
                    let Some(&e) = s.get(j + 1) else {
                        return Self::err(begin, "Unterminated string starting at");
                    };
                    match e {
                        '"' | '\\' | '/' | 'b' | 'f' | 'n' | 'r' | 't' => j += 2,
                        'u' => {
                            // CPython wants the four digits and at least one more char.
                            let hex = s.get(j + 2..j + 6).filter(|_| j + 6 < s.len());
                            match hex {
                                Some(h) if h.iter().all(|c| c.is_ascii_hexdigit()) => j += 6,
                                _ => return Self::err(j + 1, "Invalid \\uXXXX escape"),
                            }
                        }
                        _ => return Self::err(j, "Invalid \\escape"),
                    }
                }
                c if (c as u32) < 0x20 => return Self::err(j, "Invalid control character at"),
                _ => j += 1,
            }
        }
    }

    /// `i` is just after `{`.
    fn object(&mut self, i: usize) -> PyResult {
        let mut j = self.ws(i);
        match self.s.get(j) {
            Some('}') => return Ok(j + 1),
            Some('"') => {}
            _ => return Self::err(j, "Expecting property name enclosed in double quotes"),
        }
        loop {
            j = self.string(j + 1)?;
            j = self.ws(j);
            if self.s.get(j) != Some(&':') {
                return Self::err(j, "Expecting ':' delimiter");
            }
            j = self.ws(j + 1);
            j = self.value(j)?;
            j = self.ws(j);
            match self.s.get(j) {
                Some('}') => return Ok(j + 1),
                Some(',') => {}
                _ => return Self::err(j, "Expecting ',' delimiter"),
            }
            j = self.ws(j + 1);
            if self.s.get(j) != Some(&'"') {
                return Self::err(j, "Expecting property name enclosed in double quotes");
            }
        }
    }

    /// `i` is just after `[`.
    fn array(&mut self, i: usize) -> PyResult {
        let mut j = self.ws(i);
        if self.s.get(j) == Some(&']') {
            return Ok(j + 1);
        }
        loop {
            j = self.value(j)?;
            j = self.ws(j);
            match self.s.get(j) {
                Some(']') => return Ok(j + 1),
                Some(',') => {}
                _ => return Self::err(j, "Expecting ',' delimiter"),
            }
            j = self.ws(j + 1);
        }
    }
}
