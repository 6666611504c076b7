//! JSON as Python sees it: an order-preserving tree ([`J`]) parsed from request bytes (Python
//! `json.loads` keeps object key order, and the last of duplicate keys wins in the first one's
//! place), its conversion to template values, and Python's `json.dumps` over template values
//! (what transformers' `tojson` filter does).

use std::fmt::{self, Write as _};

use minijinja::value::{Value, ValueKind};
use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

/// A JSON value with object keys in document order.
#[derive(Debug, Clone, PartialEq)]
pub enum J {
    /// `null`.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// An integer that fits `i64`.
    Int(i64),
    /// A non-negative integer above `i64::MAX`.
    UInt(u64),
    /// Any other number.
    Float(f64),
    /// A string.
    Str(String),
    /// An array.
    Arr(Vec<J>),
    /// An object, keys in document order, unique.
    Obj(Vec<(String, J)>),
}

impl J {
    /// Parses JSON bytes; `None` when they are not one valid JSON value.
    pub fn parse(bytes: &[u8]) -> Option<J> {
        serde_json::from_slice(bytes).ok()
    }

    /// The member `key` of an object (`None` for other kinds or a missing key).
    pub fn get(&self, key: &str) -> Option<&J> {
        match self {
            J::Obj(m) => m.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            J::Str(s) => Some(s),
            _ => None,
        }
    }

    /// Whether this is `null`.
    pub fn is_null(&self) -> bool {
        matches!(self, J::Null)
    }

    /// Python truthiness: `None`, `False`, `0`, `0.0`, `""`, `[]` and `{}` are false.
    pub fn truthy(&self) -> bool {
        match self {
            J::Null => false,
            J::Bool(b) => *b,
            J::Int(i) => *i != 0,
            J::UInt(u) => *u != 0,
            J::Float(f) => *f != 0.0,
            J::Str(s) => !s.is_empty(),
            J::Arr(a) => !a.is_empty(),
            J::Obj(o) => !o.is_empty(),
        }
    }

    /// Sets `key` (replacing in place when present, else appending), as a Python dict does.
    pub fn set(map: &mut Vec<(String, J)>, key: &str, value: J) {
        match map.iter_mut().find(|(k, _)| k == key) {
            Some((_, v)) => *v = value,
            None => map.push((key.to_owned(), value)),
        }
    }

    /// Converts to a template value; objects become insertion-ordered maps.
    pub fn to_value(&self) -> Value {
        match self {
            J::Null => Value::from(()),
            J::Bool(b) => Value::from(*b),
            J::Int(i) => Value::from(*i),
            J::UInt(u) => Value::from(*u),
            J::Float(f) => Value::from(*f),
            J::Str(s) => Value::from(s.as_str()),
            J::Arr(a) => Value::from(a.iter().map(J::to_value).collect::<Vec<_>>()),
            J::Obj(o) => ordered_map(o.iter().map(|(k, v)| (k.as_str(), v.to_value()))),
        }
    }

    /// Compact JSON text of this value (key order kept).
    pub fn to_json(&self) -> String {
        let opts = DumpOptions {
            separators: Some((",".into(), ":".into())),
            ..DumpOptions::default()
        };
        dumps(&self.to_value(), &opts).unwrap_or_default()
    }

    /// Converts a `serde_json` value (its object order is whatever `serde_json` kept).
    pub fn from_serde(v: &serde_json::Value) -> J {
        match v {
            serde_json::Value::Null => J::Null,
            serde_json::Value::Bool(b) => J::Bool(*b),
            serde_json::Value::Number(n) => match (n.as_i64(), n.as_u64(), n.as_f64()) {
                (Some(i), _, _) => J::Int(i),
                (None, Some(u), _) => J::UInt(u),
                (_, _, f) => J::Float(f.unwrap_or(f64::NAN)),
            },
            serde_json::Value::String(s) => J::Str(s.clone()),
            serde_json::Value::Array(a) => J::Arr(a.iter().map(J::from_serde).collect()),
            serde_json::Value::Object(o) => J::Obj(
                o.iter()
                    .map(|(k, v)| (k.clone(), J::from_serde(v)))
                    .collect(),
            ),
        }
    }
}

/// A template map that keeps insertion order (Python dict semantics: a repeated key keeps its
/// first place and takes the last value).
pub fn ordered_map<'a>(pairs: impl IntoIterator<Item = (&'a str, Value)>) -> Value {
    let mut map: indexmap::IndexMap<Value, Value> = indexmap::IndexMap::new();
    for (k, v) in pairs {
        map.insert(Value::from(k), v);
    }
    Value::from(map)
}

impl<'de> Deserialize<'de> for J {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<J, D::Error> {
        d.deserialize_any(JVisitor)
    }
}

struct JVisitor;

impl<'de> Visitor<'de> for JVisitor {
    type Value = J;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_unit<E: de::Error>(self) -> Result<J, E> {
        Ok(J::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<J, E> {
        Ok(J::Null)
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<J, E> {
        Ok(J::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<J, E> {
        Ok(J::Int(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<J, E> {
        Ok(i64::try_from(v).map(J::Int).unwrap_or(J::UInt(v)))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<J, E> {
        Ok(J::Float(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<J, E> {
        Ok(J::Str(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<J, E> {
        Ok(J::Str(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<J, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(1024));
        while let Some(v) = seq.next_element::<J>()? {
            out.push(v);
        }
        Ok(J::Arr(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<J, A::Error> {
        let mut out: Vec<(String, J)> = Vec::new();
        while let Some((k, v)) = map.next_entry::<String, J>()? {
            J::set(&mut out, &k, v);
        }
        Ok(J::Obj(out))
    }
}

/// Options of Python's `json.dumps` that transformers' `tojson` exposes.
#[derive(Debug, Clone, Default)]
pub struct DumpOptions {
    /// Escape every non-ASCII char as `\uXXXX` (transformers' default: false).
    pub ensure_ascii: bool,
    /// Pretty-print with this indent string (an int `n` is `n` spaces).
    pub indent: Option<String>,
    /// `(item_separator, key_separator)`; Python's default is `(", ", ": ")`, or `(",", ": ")`
    /// with an indent.
    pub separators: Option<(String, String)>,
    /// Sort object keys.
    pub sort_keys: bool,
}

/// Why a value cannot be dumped (Python raises `TypeError` for these).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("object of kind {0} is not JSON serializable")]
pub struct NotSerializable(pub String);

/// Python's `json.dumps(value, **options)` over a template value. Undefined dumps as `null`
/// (jinja2 would raise; the engine would then refuse the request).
pub fn dumps(value: &Value, opts: &DumpOptions) -> Result<String, NotSerializable> {
    let (item_sep, key_sep) = match &opts.separators {
        Some((i, k)) => (i.as_str(), k.as_str()),
        None if opts.indent.is_some() => (",", ": "),
        None => (", ", ": "),
    };
    let mut out = String::new();
    let d = Dumper {
        opts,
        item_sep,
        key_sep,
    };
    d.dump(value, 0, &mut out)?;
    Ok(out)
}

struct Dumper<'a> {
    opts: &'a DumpOptions,
    item_sep: &'a str,
    key_sep: &'a str,
}

impl Dumper<'_> {
    fn newline(&self, depth: usize, out: &mut String) {
        if let Some(ind) = &self.opts.indent {
            out.push('\n');
            for _ in 0..depth {
                out.push_str(ind);
            }
        }
    }

    fn dump(&self, v: &Value, depth: usize, out: &mut String) -> Result<(), NotSerializable> {
        match v.kind() {
            ValueKind::Undefined | ValueKind::None => out.push_str("null"),
            ValueKind::Bool => out.push_str(if v.is_true() { "true" } else { "false" }),
            ValueKind::Number => {
                if v.is_integer() {
                    out.push_str(&v.to_string());
                } else {
                    let f = f64::try_from(v.clone()).unwrap_or(f64::NAN);
                    out.push_str(&py_float_repr(f));
                }
            }
            ValueKind::String => {
                write_py_string(v.as_str().unwrap_or(""), self.opts.ensure_ascii, out)
            }
            ValueKind::Seq | ValueKind::Iterable => {
                let items: Vec<Value> = v
                    .try_iter()
                    .map_err(|e| NotSerializable(e.to_string()))?
                    .collect();
                if items.is_empty() {
                    out.push_str("[]");
                    return Ok(());
                }
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(self.item_sep);
                    }
                    self.newline(depth + 1, out);
                    self.dump(item, depth + 1, out)?;
                }
                self.newline(depth, out);
                out.push(']');
            }
            ValueKind::Map => {
                let mut keys: Vec<Value> = v
                    .try_iter()
                    .map_err(|e| NotSerializable(e.to_string()))?
                    .collect();
                if keys.is_empty() {
                    out.push_str("{}");
                    return Ok(());
                }
                if self.opts.sort_keys {
                    keys.sort_by_key(|k| k.to_string());
                }
                out.push('{');
                for (i, key) in keys.iter().enumerate() {
                    if i > 0 {
                        out.push_str(self.item_sep);
                    }
                    self.newline(depth + 1, out);
                    let val = v.get_item(key).unwrap_or_default();
                    match key.kind() {
                        ValueKind::String => {
                            write_py_string(key.as_str().unwrap_or(""), self.opts.ensure_ascii, out)
                        }
                        ValueKind::None => out.push_str("\"null\""),
                        ValueKind::Bool => out.push_str(if key.is_true() {
                            "\"true\""
                        } else {
                            "\"false\""
                        }),
                        ValueKind::Number => {
                            let mut s = String::new();
                            self.dump(key, depth, &mut s)?;
                            let _ = write!(out, "\"{s}\"");
                        }
                        other => return Err(NotSerializable(format!("{other} key"))),
                    }
                    out.push_str(self.key_sep);
                    self.dump(&val, depth + 1, out)?;
                }
                self.newline(depth, out);
                out.push('}');
            }
            other => return Err(NotSerializable(other.to_string())),
        }
        Ok(())
    }
}

/// Python's `repr(float)`: shortest round-trip digits, scientific notation below 1e-4 and from
/// 1e16 on (`1e-05`, `1e+16`), otherwise positional with at least one decimal (`100.0`).
pub fn py_float_repr(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity" } else { "-Infinity" }.into();
    }
    crate::pyfmt::finite_float_repr(f)
}

/// Writes `s` as a Python `json.dumps` string literal.
fn write_py_string(s: &str, ensure_ascii: bool, out: &mut String) {
    crate::pyfmt::push_json_str(out, s, ensure_ascii);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dump(v: &J, o: &DumpOptions) -> String {
        dumps(&v.to_value(), o).expect("serializable")
    }

    #[test]
    fn parse_keeps_order_and_last_duplicate_in_place() {
        let j = J::parse(br#"{"b":1,"a":2,"b":3}"#).expect("json");
        assert_eq!(
            j,
            J::Obj(vec![("b".into(), J::Int(3)), ("a".into(), J::Int(2))])
        );
        assert!(J::parse(b"{").is_none());
    }

    #[test]
    fn dumps_like_python() {
        let j =
            J::parse(r#"{"z":[1,2.5,true,null],"a":{"x":"é\"\n<>&'"},"e":[],"o":{}}"#.as_bytes())
                .expect("json");
        let d = DumpOptions::default();
        assert_eq!(
            dump(&j, &d),
            r#"{"z": [1, 2.5, true, null], "a": {"x": "é\"\n<>&'"}, "e": [], "o": {}}"#
        );
        let ascii = DumpOptions {
            ensure_ascii: true,
            ..Default::default()
        };
        assert_eq!(
            dump(&J::Str("é🦀\u{7f}".into()), &ascii),
            r#""\u00e9\ud83e\udd80\u007f""#
        );
        let ind = DumpOptions {
            indent: Some("    ".into()),
            ..Default::default()
        };
        assert_eq!(
            dump(&J::parse(br#"{"a":[1,{}],"b":2}"#).expect("json"), &ind),
            "{\n    \"a\": [\n        1,\n        {}\n    ],\n    \"b\": 2\n}"
        );
        let sorted = DumpOptions {
            sort_keys: true,
            separators: Some((",".into(), ":".into())),
            ..Default::default()
        };
        assert_eq!(
            dump(&J::parse(br#"{"b":1,"a":2}"#).expect("json"), &sorted),
            r#"{"a":2,"b":1}"#
        );
    }

    #[test]
    fn float_repr_like_python() {
        for (f, s) in [
            (1.0, "1.0"),
            (100.0, "100.0"),
            (2.5, "2.5"),
            (0.1, "0.1"),
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
            (1e16, "1e+16"),
            (1.5e300, "1.5e+300"),
            (123456789012345.6, "123456789012345.6"),
            (-0.5, "-0.5"),
        ] {
            assert_eq!(py_float_repr(f), s, "{f}");
        }
    }
}
