//! Engine URLs: `http://host[:port][/]`, nothing more, because the router speaks plain HTTP/1.1 to
//! engines and appends the request path itself.

use std::fmt;
use std::net::Ipv6Addr;

/// An engine's base URL, checked: plain `http`, a host, a port, and no path.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UpstreamUrl {
    /// The URL exactly as written in the config.
    pub original: String,
    /// Host name or IP address; IPv6 addresses without brackets.
    pub host: String,
    /// TCP port; 80 when the URL has none.
    pub port: u16,
}

impl UpstreamUrl {
    /// Parses `http://host[:port][/]`; the error says what is wrong and how to fix it.
    pub fn parse(text: &str) -> Result<UpstreamUrl, String> {
        let rest = match strip_prefix_ignore_case(text, "http://") {
            Some(rest) => rest,
            None if strip_prefix_ignore_case(text, "https://").is_some() => {
                return Err(
                    "https is not supported yet; put a TLS-terminating proxy in front".to_string(),
                )
            }
            None => return Err(format!("must start with http:// (got {text:?})")),
        };
        let (authority, path) = match rest.find(['/', '?', '#']) {
            Some(at) => rest.split_at(at),
            None => (rest, ""),
        };
        if !path.is_empty() && path != "/" {
            return Err(format!(
                "must not have a path (got {path:?} in {text:?}); give the engine's base URL, like http://10.0.0.10:8000"
            ));
        }
        if authority.contains('@') {
            return Err(format!("must not contain user info (got {text:?})"));
        }
        let (host, port) =
            split_host_port(authority).map_err(|why| format!("{why} (got {text:?})"))?;
        Ok(UpstreamUrl {
            original: text.to_string(),
            host: host.to_string(),
            port,
        })
    }

    /// `host:port`, with IPv6 hosts bracketed (`[::1]:8000`): the HTTP `Host` header and the
    /// string to connect to.
    pub fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// The same engine: host (case-insensitive) and port equal, however the URL was written.
    pub fn same_endpoint(&self, other: &UpstreamUrl) -> bool {
        self.port == other.port && self.host.eq_ignore_ascii_case(&other.host)
    }
}

impl fmt::Display for UpstreamUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.original)
    }
}

fn strip_prefix_ignore_case<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
    let head = text.get(..prefix.len())?;
    if head.eq_ignore_ascii_case(prefix) {
        text.get(prefix.len()..)
    } else {
        None
    }
}

fn split_host_port(authority: &str) -> Result<(&str, u16), String> {
    let (host, port) = if let Some(bracketed) = authority.strip_prefix('[') {
        let Some((host, after)) = bracketed.split_once(']') else {
            return Err("IPv6 address is missing its closing ']'".to_string());
        };
        if host.parse::<Ipv6Addr>().is_err() {
            return Err(format!("{host:?} is not an IPv6 address"));
        }
        let port = match after {
            "" => None,
            _ => match after.strip_prefix(':') {
                Some(port) => Some(port),
                None => return Err("unexpected text after the IPv6 address".to_string()),
            },
        };
        (host, port)
    } else {
        if authority.matches(':').count() > 1 {
            return Err("IPv6 addresses go in brackets, like http://[::1]:8000".to_string());
        }
        let (host, port) = match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        };
        if host.is_empty() {
            return Err("missing host".to_string());
        }
        if let Some(bad) = host
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')))
        {
            return Err(format!(
                "host {host:?} contains {bad:?}; IPv6 addresses go in brackets, like http://[::1]:8000"
            ));
        }
        (host, port)
    };
    let port = match port {
        None => 80,
        Some(port) if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) => {
            match port.parse::<u16>() {
                Ok(0) => return Err("port must be between 1 and 65535".to_string()),
                Ok(port) => port,
                Err(_) => return Err(format!("invalid port {port:?}; expected 1 to 65535")),
            }
        }
        Some(port) => return Err(format!("invalid port {port:?}; expected 1 to 65535")),
    };
    Ok((host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(text: &str) -> (String, u16) {
        let url = UpstreamUrl::parse(text).unwrap();
        assert_eq!(url.original, text);
        (url.host, url.port)
    }

    fn err(text: &str) -> String {
        UpstreamUrl::parse(text).unwrap_err()
    }

    #[test]
    fn accepts_host_port_and_optional_slash() {
        assert_eq!(ok("http://10.0.0.10:8000"), ("10.0.0.10".into(), 8000));
        assert_eq!(ok("http://10.0.0.10:8000/"), ("10.0.0.10".into(), 8000));
        assert_eq!(ok("http://engine"), ("engine".into(), 80));
        assert_eq!(
            ok("http://vllm.inference.svc.cluster.local:8000"),
            ("vllm.inference.svc.cluster.local".into(), 8000)
        );
        assert_eq!(ok("HTTP://engine:1"), ("engine".into(), 1));
    }

    #[test]
    fn ipv6_hosts_lose_their_brackets_and_authority_restores_them() {
        let url = UpstreamUrl::parse("http://[::1]:8000").unwrap();
        assert_eq!(url.host, "::1");
        assert_eq!(url.port, 8000);
        assert_eq!(url.authority(), "[::1]:8000");
        assert_eq!(ok("http://[fe80::1]/"), ("fe80::1".into(), 80));
        assert_eq!(UpstreamUrl::parse("http://a:9").unwrap().authority(), "a:9");
    }

    #[test]
    fn rejects_other_schemes_paths_and_bad_ports() {
        assert_eq!(err("ftp://x"), "must start with http:// (got \"ftp://x\")");
        assert_eq!(
            err("10.0.0.1:8000"),
            "must start with http:// (got \"10.0.0.1:8000\")"
        );
        assert_eq!(
            err("https://x:443"),
            "https is not supported yet; put a TLS-terminating proxy in front"
        );
        assert!(err("http://x:8000/v1").contains("must not have a path (got \"/v1\""));
        assert!(err("http://x:8000?a=b").contains("must not have a path"));
        assert!(err("http://x:0").contains("between 1 and 65535"));
        assert!(err("http://x:70000").contains("invalid port \"70000\""));
        assert!(err("http://x:").contains("invalid port \"\""));
        assert!(err("http://x:+80").contains("invalid port"));
        assert!(err("http://").contains("missing host"));
        assert!(err("http://:80").contains("missing host"));
        assert!(err("http://u:p@x:80").contains("user info"));
        assert!(err("http://::1:80").contains("IPv6 addresses go in brackets"));
        assert!(err("http://[::1").contains("closing ']'"));
        assert!(err("http://[zz]:80").contains("not an IPv6 address"));
        assert!(err("http://[::1]x").contains("unexpected text"));
        assert!(err("http://ho st:80").contains("contains ' '"));
    }

    #[test]
    fn same_endpoint_ignores_spelling() {
        let a = UpstreamUrl::parse("http://Engine:8000").unwrap();
        let b = UpstreamUrl::parse("http://engine:8000/").unwrap();
        let c = UpstreamUrl::parse("http://engine:8001").unwrap();
        assert!(a.same_endpoint(&b));
        assert!(!a.same_endpoint(&c));
    }
}
