//! Chat templates rendered the way transformers renders them with Jinja2.
//!
//! transformers compiles every chat template in an `ImmutableSandboxedEnvironment` with
//! `trim_blocks=True`, `lstrip_blocks=True` and the `loopcontrols` extension, replaces the
//! `tojson` filter with `json.dumps(x, ensure_ascii=False, indent=None, separators=None,
//! sort_keys=False)` (no HTML escaping) and adds the globals `raise_exception(message)` and
//! `strftime_now(format)`. [`ChatTemplate`] sets minijinja up the same way, adds Python's string
//! and dict methods (`minijinja-contrib`'s pycompat) and prints values as Python's `str()` does
//! (`None`, `True`, `['a', 1]`). It also carries out transformers' `continue_final_message`
//! (the final message is left open: the render is cut where it ends).

use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use minijinja::value::{Kwargs, Value, ValueKind};
use minijinja::{Environment, Error, ErrorKind};

use super::json::{dumps, ordered_map, py_float_repr, DumpOptions, J};

/// The marker transformers appends to the final message when `continue_final_message` is set.
const CONTINUE_TAG: &str = "CONTINUE_FINAL_MESSAGE_TAG ";

/// A compiled chat template. `Send + Sync`; rendering takes `&self`.
pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate")
            .field("bytes", &self.source.len())
            .finish()
    }
}

/// Why rendering failed: the template raised (`raise_exception`), or used something minijinja
/// or the sandbox refuses. vLLM answers such requests with 400.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RenderError(pub String);

impl ChatTemplate {
    /// Compiles `source`. Fails when the template does not parse.
    pub fn new(source: &str) -> Result<ChatTemplate, RenderError> {
        let mut env = Environment::new();
        let mut syntax = minijinja::syntax::SyntaxConfig::builder();
        syntax.trim_blocks(true).lstrip_blocks(true);
        env.set_syntax(syntax.build().map_err(|e| RenderError(e.to_string()))?);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.set_formatter(|out, _state, value| {
            out.write_str(&py_str(value))
                .map_err(|_| Error::new(ErrorKind::WriteFailure, "write failed"))
        });
        env.add_filter("tojson", tojson);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_template_owned("chat", source.to_owned())
            .map_err(|e| RenderError(e.to_string()))?;
        Ok(ChatTemplate {
            env,
            source: source.to_owned(),
        })
    }

    /// The template text.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Renders `messages` with `context` (every other variable, `tools`, `documents` and
    /// `add_generation_prompt` included), as transformers' `render_jinja_template` does; with
    /// `continue_final_message`, the final message's `content` is left open.
    pub fn render(
        &self,
        mut messages: Vec<J>,
        context: Vec<(String, Value)>,
        continue_final_message: bool,
    ) -> Result<String, RenderError> {
        let mut final_text = None;
        if continue_final_message {
            if !self.source.contains("content") {
                return Err(RenderError(
                    "continue_final_message: content is not a field of the template".into(),
                ));
            }
            final_text = Some(mark_final_message(&mut messages)?);
        }
        let tmpl = self
            .env
            .get_template("chat")
            .map_err(|e| RenderError(e.to_string()))?;
        let msgs = Value::from(messages.iter().map(J::to_value).collect::<Vec<_>>());
        let mut ctx: Vec<(String, Value)> = context;
        ctx.retain(|(k, _)| k != "messages");
        ctx.push(("messages".into(), msgs));
        let rendered = tmpl
            .render(ordered_map(
                ctx.iter().map(|(k, v)| (k.as_str(), v.clone())),
            ))
            .map_err(|e| RenderError(describe(&e)))?;
        match final_text {
            None => Ok(rendered),
            Some(final_text) => cut_at_tag(rendered, &final_text),
        }
    }
}

fn describe(e: &Error) -> String {
    let mut s = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(inner) = src {
        let _ = write!(s, ": {inner}");
        src = inner.source();
    }
    s
}

/// Appends the tag to the final message's content (its last text part for a list), returning
/// the original text, as transformers does.
fn mark_final_message(messages: &mut [J]) -> Result<String, RenderError> {
    let missing = || RenderError("continue_final_message: the final message has no content".into());
    let Some(J::Obj(last)) = messages.last_mut() else {
        return Err(missing());
    };
    let Some((_, content)) = last.iter_mut().find(|(k, _)| k == "content") else {
        return Err(missing());
    };
    match content {
        J::Str(s) => {
            let orig = s.clone();
            s.push_str(CONTINUE_TAG);
            Ok(orig)
        }
        J::Arr(parts) => {
            for part in parts.iter_mut().rev() {
                if let J::Obj(p) = part {
                    if let Some((_, J::Str(t))) = p.iter_mut().find(|(k, _)| k == "text") {
                        let orig = t.clone();
                        t.push_str(CONTINUE_TAG);
                        return Ok(orig);
                    }
                }
            }
            Err(RenderError(
                "continue_final_message: no text to continue in the final message".into(),
            ))
        }
        _ => Err(RenderError(
            "continue_final_message: the final message content is not text".into(),
        )),
    }
}

fn cut_at_tag(rendered: String, final_text: &str) -> Result<String, RenderError> {
    let tag = CONTINUE_TAG.trim();
    let final_trimmed = py_strip(final_text);
    if !rendered.contains(final_trimmed) || !rendered.contains(tag) {
        return Err(RenderError(
            "continue_final_message: the final message does not appear in the render".into(),
        ));
    }
    let loc = rendered.rfind(tag).unwrap_or(rendered.len());
    if rendered[loc..].starts_with(CONTINUE_TAG) {
        Ok(rendered[..loc].to_owned())
    } else {
        Ok(py_rstrip(&rendered[..loc]).to_owned())
    }
}

/// Python's `str.isspace` for one char (Unicode White_Space plus the ASCII separators
/// `\x1c`..`\x1f`).
fn py_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Python's `str.strip()`.
fn py_strip(s: &str) -> &str {
    s.trim_matches(py_space)
}

/// Python's `str.rstrip()`.
fn py_rstrip(s: &str) -> &str {
    s.trim_end_matches(py_space)
}

/// Python's `str(value)` as Jinja2 prints it: `None`, `True`/`False`, float repr, and list /
/// dict reprs with single-quoted strings; undefined prints nothing.
pub fn py_str(v: &Value) -> String {
    match v.kind() {
        ValueKind::Undefined => String::new(),
        ValueKind::String => v.as_str().unwrap_or("").to_owned(),
        _ => {
            let mut out = String::new();
            py_repr(v, &mut out);
            out
        }
    }
}

fn py_repr(v: &Value, out: &mut String) {
    match v.kind() {
        ValueKind::Undefined | ValueKind::None => out.push_str("None"),
        ValueKind::Bool => out.push_str(if v.is_true() { "True" } else { "False" }),
        ValueKind::Number if v.is_integer() => out.push_str(&v.to_string()),
        ValueKind::Number => {
            out.push_str(&py_float_repr(f64::try_from(v.clone()).unwrap_or(f64::NAN)))
        }
        ValueKind::String => py_repr_str(v.as_str().unwrap_or(""), out),
        ValueKind::Seq | ValueKind::Iterable => {
            out.push('[');
            if let Ok(it) = v.try_iter() {
                for (i, item) in it.enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    py_repr(&item, out);
                }
            }
            out.push(']');
        }
        ValueKind::Map => {
            out.push('{');
            if let Ok(it) = v.try_iter() {
                for (i, key) in it.enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    py_repr(&key, out);
                    out.push_str(": ");
                    py_repr(&v.get_item(&key).unwrap_or_default(), out);
                }
            }
            out.push('}');
        }
        _ => out.push_str(&v.to_string()),
    }
}

/// Python's `repr(str)`.
fn py_repr_str(s: &str, out: &mut String) {
    crate::pyfmt::push_repr_str(out, s);
}

/// transformers' `tojson`: `json.dumps(x, ensure_ascii=False, indent=None, separators=None,
/// sort_keys=False)`, keyword arguments as in Python.
fn tojson(value: &Value, kwargs: Kwargs) -> Result<Value, Error> {
    let mut opts = DumpOptions::default();
    if let Some(b) = kwargs.get::<Option<bool>>("ensure_ascii")? {
        opts.ensure_ascii = b;
    }
    if let Some(ind) = kwargs.get::<Option<Value>>("indent")? {
        opts.indent = match ind.kind() {
            ValueKind::None | ValueKind::Undefined => None,
            ValueKind::String => Some(ind.as_str().unwrap_or("").to_owned()),
            _ => {
                let n = ind.as_i64().ok_or_else(|| {
                    Error::new(
                        ErrorKind::InvalidOperation,
                        "indent must be an int or a string",
                    )
                })?;
                Some(" ".repeat(usize::try_from(n).unwrap_or(0)))
            }
        };
    }
    if let Some(sep) = kwargs.get::<Option<Value>>("separators")? {
        if !sep.is_none() && !sep.is_undefined() {
            let parts: Vec<Value> = sep.try_iter()?.collect();
            match (
                parts.first().and_then(Value::as_str),
                parts.get(1).and_then(Value::as_str),
            ) {
                (Some(a), Some(b)) if parts.len() == 2 => {
                    opts.separators = Some((a.to_owned(), b.to_owned()))
                }
                _ => {
                    return Err(Error::new(
                        ErrorKind::InvalidOperation,
                        "separators must be a pair of strings",
                    ))
                }
            }
        }
    }
    if let Some(b) = kwargs.get::<Option<bool>>("sort_keys")? {
        opts.sort_keys = b;
    }
    kwargs.assert_all_used()?;
    dumps(value, &opts)
        .map(Value::from)
        .map_err(|e| Error::new(ErrorKind::InvalidOperation, e.to_string()))
}

fn raise_exception(message: String) -> Result<Value, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

/// `datetime.now().strftime(format)` for the server's clock, taken as UTC.
fn strftime_now(format: String) -> Result<Value, Error> {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    Ok(Value::from(strftime(&format, secs)))
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];
const DAYS: [&str; 7] = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
    "Sunday",
];

/// C `strftime` (C locale) of the UTC time `unix_secs`, for the directives chat templates use:
/// `%d %m %Y %y %B %b %A %a %H %I %M %S %p %j %e %%`; others are copied as they are.
pub fn strftime(format: &str, unix_secs: u64) -> String {
    let days = unix_secs / 86_400;
    let rem = unix_secs % 86_400;
    let (hour, min, sec) = (rem / 3600, rem % 3600 / 60, rem % 60);
    let (year, month, day) = civil_from_days(days as i64);
    let weekday = ((days + 3) % 7) as usize; // 1970-01-01 was a Thursday (index 3).
    let yday = days_before_month(year, month) + day;
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        let m = MONTHS[(month - 1) as usize];
        match chars.next() {
            Some('d') => write!(out, "{day:02}"),
            Some('e') => write!(out, "{day:2}"),
            Some('m') => write!(out, "{month:02}"),
            Some('Y') => write!(out, "{year}"),
            Some('y') => write!(out, "{:02}", year.rem_euclid(100)),
            Some('B') => write!(out, "{m}"),
            Some('b') | Some('h') => write!(out, "{}", &m[..3]),
            Some('A') => write!(out, "{}", DAYS[weekday]),
            Some('a') => write!(out, "{}", &DAYS[weekday][..3]),
            Some('H') => write!(out, "{hour:02}"),
            Some('I') => write!(out, "{:02}", if hour % 12 == 0 { 12 } else { hour % 12 }),
            Some('M') => write!(out, "{min:02}"),
            Some('S') => write!(out, "{sec:02}"),
            Some('p') => write!(out, "{}", if hour < 12 { "AM" } else { "PM" }),
            Some('j') => write!(out, "{yday:03}"),
            Some('%') => write!(out, "%"),
            Some(other) => write!(out, "%{other}"),
            None => write!(out, "%"),
        }
        .unwrap_or(());
    }
    out
}

/// (year, month 1..=12, day 1..=31) of a day count since 1970-01-01 (Howard Hinnant's
/// algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn days_before_month(year: i64, month: u32) -> u32 {
    const CUM: [u32; 12] = [0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334];
    let leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    CUM[(month - 1) as usize] + u32::from(leap && month > 2)
}

#[cfg(test)]
mod tests;
