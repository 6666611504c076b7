//! Command-line flags of `inferrail-bench load`, parsed by hand into a [`LoadConfig`].

use std::path::PathBuf;
use std::time::Duration;

use crate::schedule::Arrivals;

/// Usage text for `inferrail-bench load`.
pub const LOAD_USAGE: &str = "\
usage: inferrail-bench load --url http://HOST:PORT/PATH --rate R [options]

Open-loop load: requests are sent at scheduled times (Poisson arrivals by default) whatever the
earlier ones are doing; latency counts from the scheduled time.

  --url URL              target (http only)
  --rate R               requests per second (required)
  --duration D           measured time after warmup (default 10s; units ms, s, m)
  --warmup D             sent but not recorded (default 1s)
  --body-file F          POST this file as application/json
  --body STRING          POST this string as application/json (GET when no body is given)
  --bodies-file F.jsonl  one JSON request body per line (blank lines skipped); request k, counted
                         in schedule order from 0 (warmup included), POSTs line k mod lines, so
                         a run sends the same bodies in the same order whatever its seed
  --header 'k: v'        extra request header (repeatable)
  --connections N        connections opened before the run (default 32)
  --max-connections N    cap on open connections (default 512)
  --seed S               arrival schedule seed (default 1)
  --arrivals KIND        poisson | uniform (default poisson)
  --timeout D            per request, from when it starts (default 5s)
  --max-idle D           reuse a keep-alive connection only if idle at most this long, else
                         close it and open another (default 4s: under uvicorn's 5 s timeout)
  --json OUT.json        also write the report as JSON

2xx JSON response bodies carrying `usage` add up into the report: prompt_tokens and
prompt_tokens_details.cached_tokens over the measured requests.
";

/// Where requests go, taken apart from an `http://` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The URL as given.
    pub url: String,
    /// Host name or address (brackets removed for IPv6).
    pub host: String,
    /// TCP port (80 when the URL names none).
    pub port: u16,
    /// The `Host` header value: the URL's authority.
    pub authority: String,
    /// Path and query, `/` when the URL has none.
    pub path: String,
}

/// Everything one load run needs.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// Where requests go.
    pub target: Target,
    /// Scheduled requests per second.
    pub rate: f64,
    /// Measured time, after the warmup.
    pub duration: Duration,
    /// Time at the start whose requests are sent but not recorded.
    pub warmup: Duration,
    /// Request body; `Some` makes the request a JSON POST, `None` a GET.
    pub body: Option<Vec<u8>>,
    /// Request bodies of `--bodies-file`, used in rotation instead of `body` when not empty.
    pub bodies: Vec<Vec<u8>>,
    /// Extra request headers, in order.
    pub headers: Vec<(String, String)>,
    /// Connections opened before the first request.
    pub connections: usize,
    /// Cap on open connections.
    pub max_connections: usize,
    /// Seed of the arrival schedule.
    pub seed: u64,
    /// Arrival process.
    pub arrivals: Arrivals,
    /// Per-request time limit, covering connection wait, connect, send and the whole response.
    pub timeout: Duration,
    /// Longest idle spell after which a connection is still reused.
    pub max_idle: Duration,
}

/// The parsed `load` command line.
#[derive(Debug, Clone)]
pub struct LoadArgs {
    /// The run itself.
    pub config: LoadConfig,
    /// Where to write the JSON report, if anywhere.
    pub json: Option<PathBuf>,
}

/// A command line that cannot be run.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ArgsError {
    /// `--help` was asked for.
    #[error("help requested")]
    Help,
    /// A flag this command does not know.
    #[error("unknown flag {0}")]
    UnknownFlag(String),
    /// A flag given without its value.
    #[error("{0} needs a value")]
    MissingValue(String),
    /// A required flag is absent.
    #[error("{0} is required")]
    Required(&'static str),
    /// A value that does not parse.
    #[error("{flag}: {reason}")]
    Invalid {
        /// The flag.
        flag: String,
        /// What is wrong with its value.
        reason: String,
    },
}

pub(crate) fn invalid(flag: &str, reason: impl Into<String>) -> ArgsError {
    ArgsError::Invalid {
        flag: flag.to_string(),
        reason: reason.into(),
    }
}

/// Parses the arguments that follow `load`.
pub fn parse_load_args<I>(args: I) -> Result<LoadArgs, ArgsError>
where
    I: IntoIterator<Item = String>,
{
    let mut url = None;
    let mut rate = None;
    let mut duration = Duration::from_secs(10);
    let mut warmup = Duration::from_secs(1);
    let mut body = None;
    let mut bodies = Vec::new();
    let mut headers = Vec::new();
    let mut connections = 32;
    let mut max_connections = 512;
    let mut seed = 1;
    let mut arrivals = Arrivals::Poisson;
    let mut timeout = Duration::from_secs(5);
    let mut max_idle = Duration::from_secs(4);
    let mut json = None;

    let mut args = args.into_iter();
    while let Some(flag) = args.next() {
        if flag == "--help" || flag == "-h" {
            return Err(ArgsError::Help);
        }
        // Accept both `--flag value` and `--flag=value`.
        let (flag, inline) = split_flag(flag);
        let mut value = || {
            inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| ArgsError::MissingValue(flag.clone()))
        };
        match flag.as_str() {
            "--url" => url = Some(parse_url(&value()?)?),
            "--rate" => {
                let v = value()?;
                let r: f64 = v.parse().map_err(|_| invalid(&flag, "not a number"))?;
                if !(r.is_finite() && r > 0.0) {
                    return Err(invalid(&flag, "must be a positive number"));
                }
                rate = Some(r);
            }
            "--duration" => duration = parse_duration(&value()?).map_err(|e| invalid(&flag, e))?,
            "--warmup" => warmup = parse_duration(&value()?).map_err(|e| invalid(&flag, e))?,
            "--timeout" => timeout = parse_duration(&value()?).map_err(|e| invalid(&flag, e))?,
            "--max-idle" => max_idle = parse_duration(&value()?).map_err(|e| invalid(&flag, e))?,
            "--body" => body = Some(value()?.into_bytes()),
            "--body-file" => body = Some(body_file_arg(&flag, &value()?)?),
            "--bodies-file" => bodies = bodies_file_arg(&flag, &value()?)?,
            "--header" => headers.push(header_arg(&flag, &value()?)?),
            "--connections" => connections = parse_count(&flag, &value()?)?,
            "--max-connections" => max_connections = parse_count(&flag, &value()?)?.max(1),
            "--seed" => seed = value()?.parse().map_err(|_| invalid(&flag, "not a u64"))?,
            "--arrivals" => {
                arrivals = match value()?.as_str() {
                    "poisson" => Arrivals::Poisson,
                    "uniform" => Arrivals::Uniform,
                    _ => return Err(invalid(&flag, "poisson or uniform")),
                }
            }
            "--json" => json = Some(PathBuf::from(value()?)),
            _ => return Err(ArgsError::UnknownFlag(flag)),
        }
    }
    let target = url.ok_or(ArgsError::Required("--url"))?;
    let rate = rate.ok_or(ArgsError::Required("--rate"))?;
    if timeout.is_zero() {
        return Err(invalid("--timeout", "must be above zero"));
    }
    if !bodies.is_empty() && body.is_some() {
        return Err(invalid(
            "--bodies-file",
            "cannot be combined with --body or --body-file",
        ));
    }
    Ok(LoadArgs {
        config: LoadConfig {
            target,
            rate,
            duration,
            warmup,
            body,
            bodies,
            headers,
            connections: connections.min(max_connections),
            max_connections,
            seed,
            arrivals,
            timeout,
            max_idle,
        },
        json,
    })
}

/// Splits `--flag=value` into the flag and its inline value (`--flag` alone: no value).
pub(crate) fn split_flag(flag: String) -> (String, Option<String>) {
    match flag.split_once('=') {
        Some((f, v)) if f.starts_with("--") => (f.to_string(), Some(v.to_string())),
        _ => (flag, None),
    }
}

/// A `--header 'name: value'` argument.
pub(crate) fn header_arg(flag: &str, v: &str) -> Result<(String, String), ArgsError> {
    let (k, val) = v
        .split_once(':')
        .ok_or_else(|| invalid(flag, "expected 'name: value'"))?;
    let k = k.trim();
    if k.is_empty() || k.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err(invalid(flag, "bad header name"));
    }
    Ok((k.to_string(), val.trim().to_string()))
}

/// The contents of a `--body-file` argument.
pub(crate) fn body_file_arg(flag: &str, path: &str) -> Result<Vec<u8>, ArgsError> {
    std::fs::read(path).map_err(|e| invalid(flag, format!("{path}: {e}")))
}

/// The bodies of a `--bodies-file` argument (see [`parse_bodies`]).
fn bodies_file_arg(flag: &str, path: &str) -> Result<Vec<Vec<u8>>, ArgsError> {
    let text = std::fs::read(path).map_err(|e| invalid(flag, format!("{path}: {e}")))?;
    parse_bodies(&text).map_err(|e| invalid(flag, format!("{path}: {e}")))
}

/// Splits a JSON-lines file into request bodies: one per non-blank line, each checked to be one
/// JSON value. An empty file (or only blank lines) is an error, as is a line that is not JSON.
pub fn parse_bodies(text: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    let mut bodies = Vec::new();
    for (i, line) in text.split(|&b| b == b'\n').enumerate() {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(line) {
            return Err(format!("line {} is not JSON: {e}", i + 1));
        }
        bodies.push(line.to_vec());
    }
    if bodies.is_empty() {
        return Err("no request bodies (the file is empty)".to_string());
    }
    Ok(bodies)
}

fn parse_count(flag: &str, v: &str) -> Result<usize, ArgsError> {
    v.parse().map_err(|_| invalid(flag, "not a count"))
}

/// `Ok` when `value` is a finite number above zero; else "`what` VALUE must be a positive
/// number", the one wording the spec and result checks share.
pub(crate) fn positive(what: &str, value: f64) -> Result<(), String> {
    if value.is_finite() && value > 0.0 {
        Ok(())
    } else {
        Err(format!("{what} {value} must be a positive number"))
    }
}

/// Parses `10s`, `250ms`, `1.5s`, `2m`, `100us`; a bare number is seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num.parse().map_err(|_| format!("bad duration {s:?}"))?;
    let secs = match unit {
        "" | "s" => n,
        "ms" => n / 1e3,
        "us" | "µs" => n / 1e6,
        "m" => n * 60.0,
        _ => return Err(format!("bad duration unit {unit:?} (use us, ms, s, m)")),
    };
    Duration::try_from_secs_f64(secs).map_err(|_| format!("bad duration {s:?}"))
}

/// Takes apart `http://host[:port][/path]`.
pub fn parse_url(url: &str) -> Result<Target, ArgsError> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| invalid("--url", "only http:// URLs are supported"))?;
    let (authority, path) = match rest.find(['/', '?']) {
        Some(i) if rest.as_bytes()[i] == b'/' => (&rest[..i], rest[i..].to_string()),
        Some(i) => (&rest[..i], format!("/{}", &rest[i..])),
        None => (rest, "/".to_string()),
    };
    if authority.is_empty() || authority.contains('@') {
        return Err(invalid("--url", "expected http://host:port/path"));
    }
    let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
        let (h, after) = v6
            .split_once(']')
            .ok_or_else(|| invalid("--url", "unclosed [ in host"))?;
        (h, after.strip_prefix(':'))
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        }
    };
    let port = match port {
        Some(p) => p.parse().map_err(|_| invalid("--url", "bad port"))?,
        None => 80,
    };
    Ok(Target {
        url: url.to_string(),
        host: host.to_string(),
        port,
        authority: authority.to_string(),
        path,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(line: &str) -> Result<LoadArgs, ArgsError> {
        parse_load_args(line.split_whitespace().map(String::from))
    }

    #[test]
    fn defaults_and_flags() {
        let a = parse("--url http://127.0.0.1:8080/v1/chat/completions --rate 1000").unwrap();
        let c = &a.config;
        assert_eq!(c.target.host, "127.0.0.1");
        assert_eq!(c.target.port, 8080);
        assert_eq!(c.target.path, "/v1/chat/completions");
        assert_eq!(c.duration, Duration::from_secs(10));
        assert_eq!(c.warmup, Duration::from_secs(1));
        assert_eq!(c.connections, 32);
        assert_eq!(c.max_connections, 512);
        assert_eq!(c.arrivals, Arrivals::Poisson);
        assert_eq!(c.max_idle, Duration::from_secs(4));
        assert!(c.body.is_none());

        let a = parse(
            "--url=http://h/x --rate 5 --duration 500ms --warmup 0 --body {} --header a:b \
             --header c:d --connections 4 --max-connections 2 --seed 9 --arrivals uniform \
             --timeout 2s --json out.json",
        )
        .unwrap();
        let c = &a.config;
        assert_eq!(c.target.port, 80);
        assert_eq!(c.duration, Duration::from_millis(500));
        assert_eq!(c.warmup, Duration::ZERO);
        assert_eq!(c.body.as_deref(), Some(&b"{}"[..]));
        assert_eq!(
            c.headers,
            vec![("a".into(), "b".into()), ("c".into(), "d".into())]
        );
        assert_eq!(c.connections, 2, "initial pool is capped by the maximum");
        assert_eq!(c.seed, 9);
        assert_eq!(c.arrivals, Arrivals::Uniform);
        assert_eq!(a.json, Some(PathBuf::from("out.json")));
    }

    #[test]
    fn bad_command_lines() {
        assert_eq!(parse("--rate 1").unwrap_err(), ArgsError::Required("--url"));
        assert_eq!(
            parse("--url http://a/").unwrap_err(),
            ArgsError::Required("--rate")
        );
        assert!(matches!(
            parse("--url https://a/ --rate 1"),
            Err(ArgsError::Invalid { .. })
        ));
        assert!(matches!(
            parse("--url http://a/ --rate 0"),
            Err(ArgsError::Invalid { .. })
        ));
        assert!(matches!(
            parse("--url http://a/ --rate 1 --bogus"),
            Err(ArgsError::UnknownFlag(_))
        ));
        assert!(matches!(
            parse("--url http://a/ --rate"),
            Err(ArgsError::MissingValue(_))
        ));
        assert_eq!(parse("--help").unwrap_err(), ArgsError::Help);
    }

    #[test]
    fn bodies_lines() {
        let b = parse_bodies(b"{\"a\":1}\r\n\n  \n[2, 3]\n\"s\"").unwrap();
        assert_eq!(
            b,
            vec![b"{\"a\":1}".to_vec(), b"[2, 3]".to_vec(), b"\"s\"".to_vec()]
        );
        assert_eq!(
            parse_bodies(b"").unwrap_err(),
            "no request bodies (the file is empty)"
        );
        assert_eq!(
            parse_bodies(b"\n \n").unwrap_err(),
            "no request bodies (the file is empty)"
        );
        let e = parse_bodies(b"{}\n{\"a\":\n{}").unwrap_err();
        assert!(e.starts_with("line 2 is not JSON: "), "{e}");
        assert!(!e.contains('\n'), "one line: {e}");
        let e = parse_bodies(b"{} {}").unwrap_err();
        assert!(
            e.starts_with("line 1 is not JSON: trailing characters"),
            "{e}"
        );
    }

    #[test]
    fn bodies_file_flag() {
        let dir = std::env::temp_dir().join(format!("bench-bodies-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good.jsonl");
        std::fs::write(&good, "{\"n\":0}\n{\"n\":1}\n").unwrap();
        let bad = dir.join("bad.jsonl");
        std::fs::write(&bad, "{\"n\":0}\nnot json\n").unwrap();
        let empty = dir.join("empty.jsonl");
        std::fs::write(&empty, "").unwrap();
        let line =
            |f: &std::path::Path| format!("--url http://h/ --rate 1 --bodies-file {}", f.display());

        let a = parse(&line(&good)).unwrap();
        assert_eq!(a.config.bodies.len(), 2);
        assert!(a.config.body.is_none());
        let msg = parse(&line(&bad)).unwrap_err().to_string();
        assert_eq!(
            msg.split(": line").next().unwrap(),
            format!("--bodies-file: {}", bad.display())
        );
        assert!(msg.contains("line 2 is not JSON"), "{msg}");
        let msg = parse(&line(&empty)).unwrap_err().to_string();
        assert!(
            msg.ends_with("no request bodies (the file is empty)"),
            "{msg}"
        );
        let msg = parse(&format!("{} --body {{}}", line(&good)))
            .unwrap_err()
            .to_string();
        assert_eq!(
            msg,
            "--bodies-file: cannot be combined with --body or --body-file"
        );
        let missing = parse(&line(&dir.join("nope.jsonl")))
            .unwrap_err()
            .to_string();
        assert!(missing.starts_with("--bodies-file: "), "{missing}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("100us"), Ok(Duration::from_micros(100)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert!(parse_duration("fast").is_err());
        assert!(parse_duration("3h").is_err());
    }

    #[test]
    fn urls() {
        let t = parse_url("http://[::1]:9000?q=1").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.path.as_str()),
            ("::1", 9000, "/?q=1")
        );
        assert_eq!(t.authority, "[::1]:9000");
        let t = parse_url("http://localhost").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.path.as_str()),
            ("localhost", 80, "/")
        );
        assert!(parse_url("http://a:notaport/").is_err());
    }
}
