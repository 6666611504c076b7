//! The generic `serde_yaml::Value` walker: mappings with a fixed set of keys (every other key is
//! reported), lists, and typed scalars (durations, sizes, counts, addresses, policies, URLs), each
//! read with its path. Every problem is collected; a value that fails yields `None` so the caller
//! can substitute a default and go on.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use serde_yaml::Value;

use crate::error::Problem;
use crate::schema::{Count, PolicyKind, UpstreamUrl};
use crate::units;

/// Which cross-field checks must be skipped because a value they read failed to decode.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Incomplete {
    /// Some model's name (or the `models` list itself) failed: references cannot be checked.
    pub model_names: bool,
    /// Some replica's or DNS group's `models` failed: "served by nobody" cannot be checked.
    pub serving: bool,
}

/// `path.key`, or `path["odd key"]` when the key is not a plain word.
pub(crate) fn join(path: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    match (path.is_empty(), plain) {
        (true, true) => key.to_string(),
        (false, true) => format!("{path}.{key}"),
        (_, false) => format!("{path}[{key:?}]"),
    }
}

/// `path[i]`.
pub(crate) fn index(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}

/// How a value reads in a message: `"text"`, `5`, `true`, `null`, `a list`, `a mapping`.
pub(crate) fn describe(v: &Value) -> String {
    match v {
        Value::Null => "null".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => format!("{s:?}"),
        Value::Sequence(_) => "a list".to_string(),
        Value::Mapping(_) => "a mapping".to_string(),
        Value::Tagged(t) => format!("a value tagged {}", t.tag),
    }
}

/// The allowed keys of one mapping, looked up by name.
pub(crate) struct Fields<'a> {
    pub(crate) path: String,
    values: BTreeMap<&'static str, &'a Value>,
    /// False when the value was not a mapping at all (already reported): required keys are
    /// then not reported missing.
    pub(crate) well_formed: bool,
}

impl<'a> Fields<'a> {
    /// The value of `key`; `None` when absent or null (null means "use the default").
    pub(crate) fn get(&self, key: &str) -> Option<&'a Value> {
        self.values.get(key).copied().filter(|v| !v.is_null())
    }

    pub(crate) fn path(&self, key: &str) -> String {
        join(&self.path, key)
    }
}

/// Walks values, collecting problems; `decode` drives it section by section.
#[derive(Default)]
pub(crate) struct Decoder {
    pub(crate) problems: Vec<Problem>,
    pub(crate) incomplete: Incomplete,
}

impl Decoder {
    pub(crate) fn problem(&mut self, path: &str, message: impl Into<String>) {
        self.problems.push(Problem::new(path, message));
    }

    /// Opens a mapping with a fixed set of keys, reporting every other key. Absent or null is an
    /// empty mapping.
    pub(crate) fn fields<'a>(
        &mut self,
        path: &str,
        v: Option<&'a Value>,
        keys: &[&'static str],
    ) -> Fields<'a> {
        let mut fields = Fields {
            path: path.to_string(),
            values: BTreeMap::new(),
            well_formed: true,
        };
        let map = match v {
            None | Some(Value::Null) => return fields,
            Some(Value::Mapping(map)) => map,
            Some(other) => {
                self.problem(
                    path,
                    format!(
                        "expected a mapping with keys {} (got {})",
                        keys.join(", "),
                        describe(other)
                    ),
                );
                fields.well_formed = false;
                return fields;
            }
        };
        for (key, value) in map {
            let known = key
                .as_str()
                .and_then(|k| keys.iter().copied().find(|allowed| *allowed == k));
            match known {
                Some(key) => {
                    fields.values.insert(key, value);
                }
                None => {
                    let name = match key {
                        Value::String(s) => s.clone(),
                        other => describe(other),
                    };
                    self.problem(
                        &join(path, &name),
                        format!("unknown key; expected one of: {}", keys.join(", ")),
                    );
                }
            }
        }
        fields
    }

    /// A list's items with their paths.
    pub(crate) fn list<'a>(
        &mut self,
        path: &str,
        v: &'a Value,
    ) -> Option<Vec<(String, &'a Value)>> {
        match v {
            Value::Sequence(items) => Some(
                items
                    .iter()
                    .enumerate()
                    .map(|(i, item)| (index(path, i), item))
                    .collect(),
            ),
            other => {
                self.problem(path, format!("expected a list (got {})", describe(other)));
                None
            }
        }
    }

    /// A mapping with free-form string keys: `(key, path of the value, value)`.
    pub(crate) fn entries<'a>(
        &mut self,
        path: &str,
        v: &'a Value,
    ) -> Option<Vec<(String, String, &'a Value)>> {
        let Value::Mapping(map) = v else {
            self.problem(path, format!("expected a mapping (got {})", describe(v)));
            return None;
        };
        let mut out = Vec::with_capacity(map.len());
        let mut ok = true;
        for (key, value) in map {
            match key {
                Value::String(k) => out.push((k.clone(), join(path, k), value)),
                other => {
                    let name = describe(other);
                    self.problem(&join(path, &name), "keys must be strings");
                    ok = false;
                }
            }
        }
        ok.then_some(out)
    }

    /// A key's decoded value, or `default` when absent (or when it fails, after reporting it).
    pub(crate) fn or<T>(
        &mut self,
        f: &Fields<'_>,
        key: &str,
        default: T,
        parse: impl FnOnce(&mut Self, &str, &Value) -> Option<T>,
    ) -> T {
        self.optional(f, key, parse).unwrap_or(default)
    }

    /// A key's decoded value; `None` when absent, null or failed.
    pub(crate) fn optional<T>(
        &mut self,
        f: &Fields<'_>,
        key: &str,
        parse: impl FnOnce(&mut Self, &str, &Value) -> Option<T>,
    ) -> Option<T> {
        let v = f.get(key)?;
        parse(self, &f.path(key), v)
    }

    /// A key that must be present; reports it missing (unless the mapping itself was broken).
    pub(crate) fn required<T>(
        &mut self,
        f: &Fields<'_>,
        key: &str,
        parse: impl FnOnce(&mut Self, &str, &Value) -> Option<T>,
    ) -> Option<T> {
        match f.get(key) {
            Some(v) => parse(self, &f.path(key), v),
            None => {
                if f.well_formed {
                    self.problem(&f.path(key), "required");
                }
                None
            }
        }
    }

    pub(crate) fn string(&mut self, path: &str, v: &Value) -> Option<String> {
        match v {
            Value::String(s) if s.trim().is_empty() => {
                self.problem(path, "must not be empty");
                None
            }
            Value::String(s) => Some(s.clone()),
            other => {
                self.problem(path, format!("expected a string (got {})", describe(other)));
                None
            }
        }
    }

    pub(crate) fn boolean(&mut self, path: &str, v: &Value) -> Option<bool> {
        match v {
            Value::Bool(b) => Some(*b),
            other => {
                self.problem(
                    path,
                    format!("expected true or false (got {})", describe(other)),
                );
                None
            }
        }
    }

    /// A whole number in `min..=max`.
    pub(crate) fn uint(&mut self, path: &str, v: &Value, min: u64, max: u64) -> Option<u64> {
        let n = match v {
            Value::Number(n) if n.is_u64() => n.as_u64(),
            Value::Number(n) if n.is_i64() => {
                self.problem(path, format!("must be at least {min} (got {n})"));
                return None;
            }
            other => {
                self.problem(
                    path,
                    format!("expected a whole number (got {})", describe(other)),
                );
                return None;
            }
        }?;
        if n < min {
            self.problem(path, format!("must be at least {min} (got {n})"));
            None
        } else if n > max {
            self.problem(path, format!("must be at most {max} (got {n})"));
            None
        } else {
            Some(n)
        }
    }

    pub(crate) fn u32_in(&mut self, path: &str, v: &Value, min: u32, max: u32) -> Option<u32> {
        self.uint(path, v, min.into(), max.into())
            .and_then(|n| u32::try_from(n).ok())
    }

    /// A finite number accepted by `check`, which returns the rule it breaks otherwise.
    pub(crate) fn float(
        &mut self,
        path: &str,
        v: &Value,
        check: fn(f64) -> Result<(), &'static str>,
    ) -> Option<f64> {
        let x = match v {
            Value::Number(n) => n.as_f64(),
            _ => None,
        };
        let Some(x) = x.filter(|x| x.is_finite()) else {
            self.problem(path, format!("expected a number (got {})", describe(v)));
            return None;
        };
        match check(x) {
            Ok(()) => Some(x),
            Err(rule) => {
                self.problem(path, format!("{rule} (got {})", describe(v)));
                None
            }
        }
    }

    /// A duration; `zero_ok` says whether 0 is allowed.
    pub(crate) fn duration(&mut self, path: &str, v: &Value, zero_ok: bool) -> Option<Duration> {
        let parsed = match v {
            Value::Number(n) => match n.as_u64() {
                Some(secs) => Ok(Duration::from_secs(secs)),
                None if n.as_i64().is_some() => Err(format!("must not be negative (got {n})")),
                None => Err(format!(
                    "a bare number means whole seconds; add a unit, like \"{n}s\""
                )),
            },
            Value::String(s) => units::parse_duration(s),
            other => Err(format!(
                "expected a duration like \"500ms\", \"2s\" or \"1m\" (got {})",
                describe(other)
            )),
        };
        match parsed {
            Ok(d) if d.is_zero() && !zero_ok => {
                self.problem(
                    path,
                    format!("must be greater than 0 (got {})", describe(v)),
                );
                None
            }
            Ok(d) => Some(d),
            Err(message) => {
                self.problem(path, message);
                None
            }
        }
    }

    /// A byte size >= `min`.
    pub(crate) fn size(&mut self, path: &str, v: &Value, min: u64) -> Option<u64> {
        let parsed = match v {
            Value::Number(n) => n.as_u64().ok_or_else(|| {
                format!("expected a whole number of bytes or a size like \"32MiB\" (got {n})")
            }),
            Value::String(s) => units::parse_size(s),
            other => Err(format!(
                "expected a whole number of bytes or a size like \"32MiB\" (got {})",
                describe(other)
            )),
        };
        match parsed {
            Ok(n) if n < min => {
                self.problem(
                    path,
                    format!("must be at least {min} bytes (got {})", describe(v)),
                );
                None
            }
            Ok(n) => Some(n),
            Err(message) => {
                self.problem(path, message);
                None
            }
        }
    }

    /// `auto` or a whole number >= 1.
    pub(crate) fn count(&mut self, path: &str, v: &Value) -> Option<Count> {
        match v {
            Value::String(s) if s == "auto" => Some(Count::Auto),
            Value::Number(n) if n.as_u64().is_some_and(|n| n >= 1) => n
                .as_u64()
                .and_then(|n| usize::try_from(n).ok())
                .map(Count::Fixed),
            other => {
                self.problem(
                    path,
                    format!(
                        "expected auto or a whole number >= 1 (got {})",
                        describe(other)
                    ),
                );
                None
            }
        }
    }

    pub(crate) fn socket_addr(&mut self, path: &str, v: &Value) -> Option<SocketAddr> {
        if let Value::String(s) = v {
            if let Ok(addr) = s.trim().parse::<SocketAddr>() {
                return Some(addr);
            }
        }
        self.problem(
            path,
            format!(
                "expected an IP address and port like 0.0.0.0:8080 or [::]:8080; host names are not resolved (got {})",
                describe(v)
            ),
        );
        None
    }

    /// A policy name.
    pub(crate) fn policy(&mut self, path: &str, v: &Value) -> Option<PolicyKind> {
        let found = v.as_str().and_then(PolicyKind::from_name);
        if found.is_none() {
            self.problem(path, unknown_policy(&describe(v)));
        }
        found
    }

    pub(crate) fn url(&mut self, path: &str, v: &Value) -> Option<UpstreamUrl> {
        let text = self.string(path, v)?;
        match UpstreamUrl::parse(&text) {
            Ok(url) => Some(url),
            Err(message) => {
                self.problem(path, message);
                None
            }
        }
    }

    /// A non-empty list of non-empty strings; `None` (each bad item reported) if any is bad.
    pub(crate) fn names(
        &mut self,
        path: &str,
        v: &Value,
        allow_empty: bool,
    ) -> Option<Vec<String>> {
        let items = self.list(path, v)?;
        if items.is_empty() && !allow_empty {
            self.problem(path, "must list at least one model");
            return None;
        }
        let mut out = Vec::with_capacity(items.len());
        let mut ok = true;
        for (item_path, item) in items {
            match self.string(&item_path, item) {
                Some(s) => out.push(s),
                None => ok = false,
            }
        }
        ok.then_some(out)
    }

    /// A replica id or DNS group name: letters, digits, `.`, `_`, `-`.
    pub(crate) fn id(&mut self, path: &str, v: &Value) -> Option<String> {
        let id = self.string(path, v)?;
        if id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        {
            Some(id)
        } else {
            self.problem(
                path,
                format!("must use only letters, digits, '.', '_' and '-' (got {id:?})"),
            );
            None
        }
    }
}

/// The message for a policy name that is not one of [`PolicyKind::ALL`].
pub(crate) fn unknown_policy(got: &str) -> String {
    let names: Vec<&str> = PolicyKind::ALL.iter().map(PolicyKind::as_str).collect();
    format!(
        "unknown policy {got}; expected one of: {}",
        names.join(", ")
    )
}

/// Stands in for a URL that failed; `validate` skips it (port 0 never parses).
pub(crate) fn placeholder_url() -> UpstreamUrl {
    UpstreamUrl {
        original: String::new(),
        host: String::new(),
        port: 0,
    }
}

/// Whether `url` is the stand-in for one that failed to decode.
pub(crate) fn is_placeholder(url: &UpstreamUrl) -> bool {
    url.port == 0
}

/// A duration that must be greater than 0.
pub(crate) fn positive(d: &mut Decoder, path: &str, v: &Value) -> Option<Duration> {
    d.duration(path, v, false)
}

/// A duration where 0 is allowed.
pub(crate) fn zero_ok(d: &mut Decoder, path: &str, v: &Value) -> Option<Duration> {
    d.duration(path, v, true)
}

/// Rule for `epsilon`: > 0.
pub(crate) fn above_zero(x: f64) -> Result<(), &'static str> {
    if x > 0.0 {
        Ok(())
    } else {
        Err("must be greater than 0")
    }
}

/// Rule for `kappa`: in (0, 1].
pub(crate) fn above_zero_at_most_one(x: f64) -> Result<(), &'static str> {
    if x > 0.0 && x <= 1.0 {
        Ok(())
    } else {
        Err("must be greater than 0 and at most 1")
    }
}

/// Rule for cost-model coefficients: >= 0.
pub(crate) fn at_least_zero(x: f64) -> Result<(), &'static str> {
    if x >= 0.0 {
        Ok(())
    } else {
        Err("must not be negative")
    }
}

/// Rule for ratios and sample rates: in [0, 1].
pub(crate) fn zero_to_one(x: f64) -> Result<(), &'static str> {
    if (0.0..=1.0).contains(&x) {
        Ok(())
    } else {
        Err("must be between 0 and 1")
    }
}
