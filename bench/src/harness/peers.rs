//! Peers: other routers a sweep puts in front of the same simulators as extra "policies", so
//! they get the same requests at the same times as every inferrail policy.
//!
//! A peer policy is named `peer:ROUTER[.POLICY]`:
//! - `peer:sglang.cache_aware` (or `.round_robin`, `.power_of_two`, `.random`): the SGLang router
//!   (PyPI `sglang-router`, a Rust core in a Python wheel);
//! - `peer:vllm.cache_aware` (or `.round_robin`, `.power_of_two`, `.consistent_hash`, `.random`):
//!   the vLLM router (PyPI `vllm-router`);
//! - `peer:nginx`: nginx as a cache-blind keep-alive reverse proxy (round robin).
//!
//! `bench/peers/install.sh` installs the routers into a venv (`target/peers-venv` by default).
//! Neither router may reach a model hub: every peer process gets `HF_ENDPOINT` pointing at a
//! closed loopback port and `HF_HUB_OFFLINE=1`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::fleet::{free_port, ChildGuard};
use super::HarnessError;

/// The prefix that marks a policy as a peer.
pub const PEER_PREFIX: &str = "peer:";

/// SGLang router policies a sweep may ask for (its `--policy` values without PD-only ones).
pub const SGLANG_POLICIES: &[&str] = &["cache_aware", "round_robin", "power_of_two", "random"];
/// vLLM router policies a sweep may ask for (those that need nothing but worker URLs).
pub const VLLM_POLICIES: &[&str] = &[
    "cache_aware",
    "round_robin",
    "power_of_two",
    "consistent_hash",
    "random",
];

/// Which router a peer is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Peer {
    /// The SGLang router with this `--policy`.
    Sglang(String),
    /// The vLLM router with this `--policy`.
    Vllm(String),
    /// nginx, round robin over keep-alive upstream connections.
    Nginx,
}

impl Peer {
    /// `None` when `policy` is not a peer (no `peer:` prefix); otherwise the peer, or why the
    /// name is wrong.
    pub fn parse(policy: &str) -> Option<Result<Peer, String>> {
        let rest = policy.strip_prefix(PEER_PREFIX)?;
        let (router, inner) = match rest.split_once('.') {
            Some((r, p)) => (r, Some(p)),
            None => (rest, None),
        };
        let pick = |all: &[&str], router: &str| match inner {
            Some(p) if all.contains(&p) => Ok(p.to_string()),
            _ => Err(format!(
                "peer {policy:?}: name a policy, peer:{router}.POLICY with POLICY one of {}",
                all.join(", ")
            )),
        };
        Some(match router {
            "sglang" => pick(SGLANG_POLICIES, router).map(Peer::Sglang),
            "vllm" => pick(VLLM_POLICIES, router).map(Peer::Vllm),
            "nginx" if inner.is_none() => Ok(Peer::Nginx),
            "nginx" => Err(format!(
                "peer {policy:?}: nginx takes no policy (peer:nginx)"
            )),
            _ => Err(format!(
                "unknown peer {policy:?} (peer:sglang.POLICY, peer:vllm.POLICY or peer:nginx)"
            )),
        })
    }

    /// A short name for logs (`sglang-router`, `vllm-router`, `nginx`).
    pub fn process_name(&self) -> &'static str {
        match self {
            Peer::Sglang(_) => "sglang-router",
            Peer::Vllm(_) => "vllm-router",
            Peer::Nginx => "nginx",
        }
    }
}

/// Where the peers are installed.
#[derive(Debug, Clone, PartialEq)]
pub struct PeerPaths {
    /// The venv holding `sglang-router` and `vllm-router` (`bench/peers/install.sh`).
    pub venv: PathBuf,
}

impl PeerPaths {
    /// The default venv: `peers-venv` next to the binaries' profile directory
    /// (`target/peers-venv` for binaries in `target/release`).
    pub fn default_for(bin_dir: &Path) -> PeerPaths {
        let target = bin_dir.parent().unwrap_or(bin_dir);
        PeerPaths {
            venv: target.join("peers-venv"),
        }
    }
}

/// The nginx binary: `nginx` on PATH, else /usr/sbin/nginx.
fn nginx_binary() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join("nginx"))
            .find(|p| p.is_file())
    });
    on_path.or_else(|| {
        let sbin = PathBuf::from("/usr/sbin/nginx");
        sbin.is_file().then_some(sbin)
    })
}

fn not_installed(what: &str, missing: &Path) -> HarnessError {
    HarnessError::Spec(format!(
        "{what} is not installed ({} missing): run bench/peers/install.sh",
        missing.display()
    ))
}

/// Fails with what to run when the peer's program is not installed.
pub fn check_installed(peer: &Peer, paths: &PeerPaths) -> Result<(), HarnessError> {
    match peer {
        Peer::Sglang(_) => {
            if site_packages(&paths.venv).any(|sp| sp.join("sglang_router").is_dir()) {
                Ok(())
            } else {
                Err(not_installed("the SGLang router", &paths.venv))
            }
        }
        Peer::Vllm(_) => {
            let bin = paths.venv.join("bin").join("vllm-router");
            if bin.is_file() {
                Ok(())
            } else {
                Err(not_installed("the vLLM router", &bin))
            }
        }
        Peer::Nginx => nginx_binary()
            .map(|_| ())
            .ok_or_else(|| not_installed("nginx", Path::new("nginx"))),
    }
}

/// What a result file says was in front: the program, its version and its policy
/// (`sglang-router 0.3.2 --policy cache_aware`, `nginx 1.22.1`); `unknown` for a version that
/// cannot be read.
pub fn describe(peer: &Peer, paths: &PeerPaths) -> String {
    match peer {
        Peer::Sglang(policy) => format!(
            "sglang-router {} --policy {policy}",
            wheel_version(&paths.venv, "sglang_router")
        ),
        Peer::Vllm(policy) => format!(
            "vllm-router {} --policy {policy}",
            wheel_version(&paths.venv, "vllm_router")
        ),
        Peer::Nginx => {
            let version = nginx_binary()
                .and_then(|bin| Command::new(bin).arg("-v").output().ok())
                .map(|out| String::from_utf8_lossy(&out.stderr).into_owned())
                .and_then(|text| text.trim().rsplit_once('/').map(|(_, v)| v.to_string()))
                .unwrap_or_else(|| "unknown".into());
            format!("nginx {version}")
        }
    }
}

/// The `site-packages` directories of a venv (`lib/python*/site-packages`).
fn site_packages(venv: &Path) -> impl Iterator<Item = PathBuf> {
    std::fs::read_dir(venv.join("lib"))
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|py| py.path().join("site-packages"))
}

/// The version of an installed wheel, from its `NAME-VERSION.dist-info` directory.
fn wheel_version(venv: &Path, dist: &str) -> String {
    let prefix = format!("{dist}-");
    site_packages(venv)
        .filter_map(|sp| std::fs::read_dir(sp).ok())
        .flatten()
        .filter_map(Result::ok)
        .find_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.strip_prefix(&prefix)?
                .strip_suffix(".dist-info")
                .map(str::to_string)
        })
        .unwrap_or_else(|| "unknown".into())
}

/// Starts `peer` on 127.0.0.1:`port` in front of the simulators on `sims`; the process goes into
/// `guard` under the name `front`. Readiness is the caller's to wait for.
pub fn start(
    peer: &Peer,
    paths: &PeerPaths,
    sims: &[u16],
    port: u16,
    work_dir: &Path,
    guard: &mut ChildGuard,
) -> Result<(), HarnessError> {
    check_installed(peer, paths)?;
    let urls: Vec<String> = sims
        .iter()
        .map(|p| format!("http://127.0.0.1:{p}"))
        .collect();
    let mut cmd = match peer {
        Peer::Sglang(policy) => {
            let mut cmd = Command::new(paths.venv.join("bin").join("python"));
            cmd.args(["-m", "sglang_router.launch_router", "--log-level", "warn"])
                .args(["--policy", policy]);
            cmd
        }
        Peer::Vllm(policy) => {
            let mut cmd = Command::new(paths.venv.join("bin").join("vllm-router"));
            cmd.args(["--log-level", "warning", "--policy", policy]);
            cmd
        }
        Peer::Nginx => {
            // nginx resolves -c, -e and the config's paths against its -p prefix: all absolute.
            let dir =
                std::path::absolute(work_dir.join("nginx")).map_err(|source| HarnessError::Io {
                    path: work_dir.join("nginx"),
                    source,
                })?;
            for sub in ["body", "proxy", "fastcgi", "uwsgi", "scgi"] {
                let d = dir.join("tmp").join(sub);
                std::fs::create_dir_all(&d)
                    .map_err(|source| HarnessError::Io { path: d, source })?;
            }
            let conf = dir.join("nginx.conf");
            std::fs::write(&conf, nginx_conf(&dir, port, sims)).map_err(|source| {
                HarnessError::Io {
                    path: conf.clone(),
                    source,
                }
            })?;
            let bin = nginx_binary().ok_or_else(|| not_installed("nginx", Path::new("nginx")))?;
            let mut cmd = Command::new(bin);
            cmd.arg("-p").arg(&dir).arg("-c").arg(&conf);
            cmd.arg("-e").arg(dir.join("error.log"));
            cmd
        }
    };
    if !matches!(peer, Peer::Nginx) {
        cmd.args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .arg("--worker-urls")
            .args(&urls)
            .args(["--prometheus-port", &free_port()?.to_string()])
            .args(["--prometheus-host", "127.0.0.1"])
            // Nothing may leave the machine: a closed loopback port as the model hub.
            .env("HF_ENDPOINT", "http://127.0.0.1:9")
            .env("HF_HUB_OFFLINE", "1");
    }
    let child = super::fleet::spawn(cmd, "front", work_dir)?;
    guard.push("front".into(), child);
    Ok(())
}

/// nginx's config: one process (`master_process off`, so killing the harness's child stops all
/// of nginx: a master killed with SIGKILL would leave its worker running), its own pid, logs and
/// temp paths under `dir`, run as the current user; round robin over keep-alive upstream connections, streaming unbuffered (SSE chunks pass
/// as they come). Upstream connections idle at most 4 s: the simulators, like vLLM's uvicorn,
/// close keep-alive connections idle for 5 s, and a POST sent on a connection the engine is
/// closing is not retried.
pub fn nginx_conf(dir: &Path, port: u16, sims: &[u16]) -> String {
    let d = dir.display();
    let mut upstream = String::new();
    for p in sims {
        let _ = writeln!(upstream, "        server 127.0.0.1:{p};");
    }
    let user = current_user_line();
    format!(
        "{user}master_process off;\nworker_processes 1;\nworker_rlimit_nofile 65536;\ndaemon off;\n\
         pid {d}/nginx.pid;\n\
         error_log {d}/error.log warn;\nevents {{ worker_connections 16384; }}\nhttp {{\n    \
         access_log off;\n    client_body_temp_path {d}/tmp/body;\n    proxy_temp_path {d}/tmp/proxy;\n    \
         fastcgi_temp_path {d}/tmp/fastcgi;\n    uwsgi_temp_path {d}/tmp/uwsgi;\n    \
         scgi_temp_path {d}/tmp/scgi;\n    client_max_body_size 64m;\n    \
         client_body_buffer_size 1m;\n    keepalive_requests 10000000;\n    \
         keepalive_timeout 300s;\n    upstream engines {{\n{upstream}        keepalive 64;\n        \
         keepalive_timeout 4s;\n    }}\n    server {{\n        listen 127.0.0.1:{port} backlog=4096;\n        \
         location / {{\n            proxy_pass http://engines;\n            \
         proxy_http_version 1.1;\n            proxy_set_header Connection \"\";\n            \
         proxy_buffering off;\n            proxy_request_buffering off;\n            \
         proxy_read_timeout 600s;\n            proxy_send_timeout 600s;\n        }}\n    }}\n}}\n"
    )
}

/// `user NAME GROUP;` when running as root (nginx would switch its worker to `nobody`), else
/// nothing.
fn current_user_line() -> String {
    let uid = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|v| v.split_whitespace().next().map(str::to_string))
        });
    if uid.as_deref() == Some("0") {
        "user root root;\n".to_string()
    } else {
        String::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peer_names_parse_and_bad_ones_say_why() {
        assert_eq!(Peer::parse("cost_model"), None);
        assert_eq!(
            Peer::parse("peer:sglang.cache_aware"),
            Some(Ok(Peer::Sglang("cache_aware".into())))
        );
        assert_eq!(
            Peer::parse("peer:vllm.round_robin"),
            Some(Ok(Peer::Vllm("round_robin".into())))
        );
        assert_eq!(Peer::parse("peer:nginx"), Some(Ok(Peer::Nginx)));
        let err = |name: &str| match Peer::parse(name) {
            Some(Err(e)) => e,
            other => panic!("{name}: {other:?}"),
        };
        assert!(err("peer:sglang").contains("cache_aware"));
        assert!(err("peer:vllm.kv_aware").contains("consistent_hash"));
        assert!(err("peer:nginx.round_robin").contains("no policy"));
        assert!(err("peer:envoy").contains("unknown peer"));
    }

    #[test]
    fn nginx_config_lists_every_engine_and_streams_unbuffered() {
        let conf = nginx_conf(Path::new("/tmp/x"), 8080, &[9001, 9002, 9003]);
        for p in [9001, 9002, 9003] {
            assert!(conf.contains(&format!("server 127.0.0.1:{p};")), "{conf}");
        }
        assert!(conf.contains("listen 127.0.0.1:8080"));
        assert!(conf.contains("proxy_buffering off;"));
        assert!(conf.contains("keepalive_timeout 4s;"));
        assert!(conf.contains("pid /tmp/x/nginx.pid;"));
        assert!(conf.contains("master_process off;"), "one process to kill");
    }

    #[test]
    fn default_venv_sits_next_to_the_profile_directory() {
        assert_eq!(
            PeerPaths::default_for(Path::new("/r/target/release")).venv,
            PathBuf::from("/r/target/peers-venv")
        );
    }
}
