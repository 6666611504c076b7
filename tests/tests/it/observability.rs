//! Observability and live config: DNS discovery membership, the shadow log and its replay, the
//! decision log, and config reloads by SIGHUP, by the admin API and by polling the file.

use inferrail_control::fleet::discovery::StaticResolver;
use inferrail_control::{ConfigSource, GatewayOptions};
use inferrail_sim::{EngineOptions, ScriptedEngine};
use inferrail_tests::*;
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};
use std::io::{BufRead, BufReader};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A unique path in the temp dir for this test and process; removed first if it exists.
fn temp_file(test: &str, name: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!(
        "inferrail-obs-{test}-{}-{name}",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&path);
    path
}

/// An admin API call against `admin`: status and parsed JSON (Null when not JSON).
fn admin_call(admin: SocketAddr, method: &str, path: &str, body: Option<&str>) -> (u16, Value) {
    let headers: &[(&str, &str)] = &[("content-type", "application/json")];
    let r = inferrail_tools::client::call(admin, method, path, headers, body.map(str::as_bytes))
        .expect("admin call");
    let json = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
    (r.status, json)
}

/// The body of a chat request whose user message is `content`.
fn chat_with(content: &str) -> Vec<u8> {
    format!(
        r#"{{"model":"{MODEL}","messages":[{{"role":"user","content":"{content}"}}],"max_tokens":4,"stream":false}}"#
    )
    .into_bytes()
}

/// Sends `n` chat requests on one connection; every one must succeed. Returns, per request, the
/// replica and request id headers.
fn send_many(addr: SocketAddr, n: usize, body: &[u8]) -> Vec<(String, String)> {
    let mut conn = connect(addr);
    (0..n)
        .map(|_| {
            let r = conn
                .call("POST", "/v1/chat/completions", &[], Some(body))
                .expect("response");
            assert_eq!(r.status, 200, "{}", r.text());
            (
                r.header("x-inferrail-replica")
                    .expect("replica header")
                    .to_string(),
                r.header("x-request-id")
                    .expect("request id header")
                    .to_string(),
            )
        })
        .collect()
}

/// `/admin/replicas` rows by id.
fn replica_rows(gw: &TestGateway) -> HashMap<String, Value> {
    let (status, v) = gw.admin("GET", "/admin/replicas", None);
    assert_eq!(status, 200, "{v}");
    v["replicas"]
        .as_array()
        .expect("replicas array")
        .iter()
        .map(|r| (r["id"].as_str().expect("id").to_string(), r.clone()))
        .collect()
}

fn ids_of(rows: &HashMap<String, Value>) -> BTreeSet<String> {
    rows.keys().cloned().collect()
}

/// Parsed JSON lines of a file (empty when the file does not exist).
fn json_lines(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// The JSON lines of an observer log once a stopped gateway's writer has finished: until there
/// are at least `expected` lines (bounded), or after a generous pause when the count is unknown.
/// (`TestGateway::stop` returns before the writer thread has flushed; see
/// `observer_logs_are_flushed_when_the_gateway_stops`.)
fn settled_lines(path: &Path, expected: Option<usize>) -> Vec<Value> {
    match expected {
        Some(n) => {
            wait_until(Duration::from_secs(5), || json_lines(path).len() >= n);
        }
        None => std::thread::sleep(Duration::from_millis(500)),
    }
    json_lines(path)
}

#[test]
fn dns_members_join_and_leave() {
    let ip = |last: u8| IpAddr::V4(Ipv4Addr::new(127, 0, 0, last));
    let start = |host: IpAddr, port: u16| {
        ScriptedEngine::start_on(
            host,
            EngineOptions {
                port,
                ..EngineOptions::new(MODEL)
            },
        )
        .unwrap_or_else(|e| panic!("engine on {host}:{port}: {e}"))
    };
    let e1 = start(ip(1), 0);
    let port = e1.addr().port();
    let e2 = start(ip(2), port);
    let e3 = start(ip(3), port);
    let id1 = format!("pool-127.0.0.1-{port}");
    let id2 = format!("pool-127.0.0.2-{port}");
    let id3 = format!("pool-127.0.0.3-{port}");

    let resolver = StaticResolver::new();
    resolver.set("engines.test", [ip(1), ip(2)]);
    let yaml = format!(
        "server:\n  listen: 127.0.0.1:0\n  admin_listen: 127.0.0.1:0\n  cores: 2\n\
         models:\n  - name: {MODEL}\n    policy: round_robin\n\
         routing:\n  seed: 7\n\
         replicas: []\n\
         discovery:\n  dns:\n    - name: pool\n      url: http://engines.test:{port}\n      models: [{MODEL}]\n      refresh: 100ms\n"
    );
    let source = ConfigSource::from_yaml(&yaml).unwrap_or_else(|e| panic!("config: {e}\n{yaml}"));
    let gw = TestGateway::start_source(
        source,
        GatewayOptions {
            resolver: Some(Arc::new(resolver.clone())),
            ..Default::default()
        },
    );

    // Both members are there before the first request.
    let rows = replica_rows(&gw);
    assert_eq!(
        ids_of(&rows),
        BTreeSet::from([id1.clone(), id2.clone()]),
        "{rows:?}"
    );
    for row in rows.values() {
        assert_eq!(row["source"], "dns:pool", "{row}");
    }
    let key2 = rows[&id2]["key"].clone();
    assert!(!key2.is_null(), "{:?}", rows[&id2]);

    // Requests reach both engines.
    let seen = send_many(gw.addr, 20, &chat(MODEL, false));
    let by_replica: BTreeSet<&str> = seen.iter().map(|(r, _)| r.as_str()).collect();
    assert_eq!(
        by_replica,
        BTreeSet::from([id1.as_str(), id2.as_str()]),
        "{seen:?}"
    );
    assert!(e1.stats().requests > 0 && e2.stats().requests > 0);
    assert_eq!(e3.stats().requests, 0);
    let metrics = gw.metrics();
    assert!(
        metrics.contains(&format!("replica=\"{id1}\"")),
        "the first member has series while it is a member:\n{metrics}"
    );

    // .1 leaves, .3 joins.
    resolver.set("engines.test", [ip(2), ip(3)]);
    let want = BTreeSet::from([id2.clone(), id3.clone()]);
    let mut last = BTreeSet::new();
    let joined = wait_until(Duration::from_secs(10), || {
        last = ids_of(&replica_rows(&gw));
        last == want
    });
    assert!(joined, "member set after the change: {last:?}");
    let rows = replica_rows(&gw);
    assert_eq!(
        rows[&id2]["key"], key2,
        "the staying member keeps its key: {rows:?}"
    );
    assert_eq!(rows[&id3]["source"], "dns:pool");

    // .3 gets requests within a bounded number of attempts (every core takes the new set).
    let mut conn = connect(gw.addr);
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut attempts = 0;
    while e3.stats().requests == 0 {
        assert!(
            Instant::now() < deadline && attempts < 2000,
            "the joined member got no request after {attempts} requests"
        );
        let r = conn
            .call(
                "POST",
                "/v1/chat/completions",
                &[],
                Some(&chat(MODEL, false)),
            )
            .expect("response");
        assert_eq!(r.status, 200, "{}", r.text());
        attempts += 1;
    }
    // Give every core time to take the new snapshot, then .1 gets nothing more.
    std::thread::sleep(Duration::from_millis(300));
    let before = e1.stats().requests;
    let seen = send_many(gw.addr, 30, &chat(MODEL, false));
    assert!(
        seen.iter().all(|(r, _)| *r != id1),
        "the departed member still got requests: {seen:?}"
    );
    assert_eq!(e1.stats().requests, before);
    let by_replica: BTreeSet<&str> = seen.iter().map(|(r, _)| r.as_str()).collect();
    assert_eq!(
        by_replica,
        BTreeSet::from([id2.as_str(), id3.as_str()]),
        "{seen:?}"
    );

    // The departed member's series leave /metrics.
    let label = format!("replica=\"{id1}\"");
    let mut text = String::new();
    let gone = wait_until(Duration::from_secs(10), || {
        text = gw.metrics();
        !text.contains(&label)
    });
    assert!(gone, "series of {id1} still on /metrics:\n{text}");
    assert!(
        text.contains(&format!("replica=\"{id3}\"")),
        "the joined member has series:\n{text}"
    );

    // A failing lookup keeps the last known set over several refreshes.
    resolver.fail("engines.test");
    let lookups = resolver.lookups();
    assert!(
        wait_until(Duration::from_secs(10), || resolver.lookups()
            >= lookups + 4),
        "no lookups after the failure started ({} -> {})",
        lookups,
        resolver.lookups()
    );
    let rows = replica_rows(&gw);
    assert_eq!(ids_of(&rows), want, "{rows:?}");
    assert_eq!(rows[&id2]["key"], key2);
    let seen = send_many(gw.addr, 10, &chat(MODEL, false));
    assert!(seen.iter().all(|(r, _)| *r != id1), "{seen:?}");
    gw.stop();
}

#[test]
fn shadow_log_replays_and_catches_tampering() {
    let log = temp_file("shadow", "shadow.jsonl");
    let e = engines(3, EngineBehavior::Instant);
    let extra = format!(
        "  shadow: [round_robin, random, least_request]\nobservability:\n  shadow_log: {}\n",
        log.display()
    );
    let gw = TestGateway::start(&config_yaml(&e, "p2c", "", &extra));
    let seen = send_many(gw.addr, 200, &chat(MODEL, false));
    assert_eq!(seen.len(), 200);

    // The shadow worker sees every decision not dropped on the way.
    let mut report = Value::Null;
    let done = wait_until(Duration::from_secs(10), || {
        report = gw.admin("GET", "/admin/shadow", None).1;
        let decisions = report["decisions"].as_u64().unwrap_or(0);
        let dropped = report["dropped"].as_u64().unwrap_or(0);
        decisions + dropped >= 200
    });
    assert!(done, "{report}");
    let decisions = report["decisions"].as_u64().unwrap();
    let dropped = report["dropped"].as_u64().unwrap();
    assert_eq!(decisions + dropped, 200, "{report}");
    assert!(decisions > 0, "{report}");
    assert_eq!(report["skipped"], 0, "{report}");
    let model = &report["models"][MODEL];
    assert_eq!(model["policies"]["p2c"], decisions, "{report}");
    for policy in ["round_robin", "random", "least_request"] {
        let s = &model["shadow"][policy];
        assert_eq!(s["decisions"], decisions, "{policy}: {report}");
        let rate = s["agreement_rate"].as_f64().unwrap();
        assert!((0.0..=1.0).contains(&rate), "{policy}: {report}");
    }
    gw.stop();

    // Every decision's line reaches the file (bounded wait: the writer may still be flushing).
    let shadow_count = |lines: &[Value]| lines.iter().filter(|l| l["type"] == "shadow").count();
    let mut lines = Vec::new();
    wait_until(Duration::from_secs(5), || {
        lines = json_lines(&log);
        shadow_count(&lines) as u64 >= decisions
    });
    let shadow_lines = shadow_count(&lines) as u64;
    assert_eq!(shadow_lines, decisions, "one shadow line per decision");
    assert_eq!(lines[0]["type"], "start");
    assert_eq!(lines[0]["seed"], 7);

    let replay = |path: &Path| {
        let out = Command::new(inferrail_bin())
            .arg("replay-shadow")
            .arg(path)
            .output()
            .expect("run replay-shadow");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.code(), text)
    };
    let (code, text) = replay(&log);
    assert_eq!(code, Some(0), "{text}");
    assert!(text.contains("all reproduce"), "{text}");
    assert!(
        text.contains(&format!("{decisions} jobs")),
        "every job is replayed: {text}"
    );

    // One pick changed to another replica: exit 1, naming that line.
    let tampered = temp_file("shadow", "tampered.jsonl");
    let raw = std::fs::read_to_string(&log).unwrap();
    let mut raw_lines: Vec<String> = raw.lines().map(str::to_string).collect();
    let (index, mut v) = raw_lines
        .iter()
        .enumerate()
        .skip(raw_lines.len() / 2)
        .map(|(i, l)| (i, serde_json::from_str::<Value>(l).unwrap()))
        .find(|(_, v)| v["type"] == "shadow" && v["candidates"].as_array().unwrap().len() >= 2)
        .expect("a shadow line with two candidates");
    let logged = v["picks"]["round_robin"].as_str().unwrap().to_string();
    let other = v["candidates"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["id"].as_str())
        .find(|id| *id != logged)
        .unwrap()
        .to_string();
    v["picks"]["round_robin"] = other.clone().into();
    raw_lines[index] = v.to_string();
    std::fs::write(&tampered, raw_lines.join("\n") + "\n").unwrap();
    let line = index + 1;
    let (code, text) = replay(&tampered);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains(&format!("{}:{line}:", tampered.display())),
        "the mismatch names line {line}: {text}"
    );
    assert!(text.contains("round_robin"), "{text}");
    assert!(text.contains(&other), "{text}");

    // A missing log: exit 2.
    let missing = temp_file("shadow", "missing.jsonl");
    let (code, text) = replay(&missing);
    assert_eq!(code, Some(2), "{text}");

    let _ = std::fs::remove_file(&log);
    let _ = std::fs::remove_file(&tampered);
}

#[test]
fn decision_log_samples_and_hides_prompts() {
    const SECRET: &str = "observability-secret-prompt-4242";
    let e = engines(3, EngineBehavior::Instant);
    let run = |name: &str, sample_rate: &str, log_prompts: bool, n: usize| {
        let path = temp_file("decisions", name);
        let mut extra = format!(
            "observability:\n  decision_log:\n    path: {}\n    sample_rate: {sample_rate}\n",
            path.display()
        );
        if log_prompts {
            extra.push_str("logging:\n  log_prompts: true\n");
        }
        let gw = TestGateway::start(&config_yaml(&e, "p2c", "", &extra));
        let seen = send_many(gw.addr, n, &chat_with(SECRET));
        gw.stop();
        let lines = settled_lines(&path, (sample_rate == "1.0").then_some(n));
        let _ = std::fs::remove_file(&path);
        (seen, lines)
    };

    // Every decision, without prompts.
    let (seen, lines) = run("all.jsonl", "1.0", false, 50);
    assert_eq!(lines.len(), 50, "{lines:?}");
    let winners: HashMap<&str, &str> = seen
        .iter()
        .map(|(replica, id)| (id.as_str(), replica.as_str()))
        .collect();
    let mut logged_ids = BTreeSet::new();
    for l in &lines {
        let id = l["request_id"].as_str().unwrap_or_else(|| panic!("{l}"));
        logged_ids.insert(id.to_string());
        let winner = l["winner"].as_str().unwrap_or_else(|| panic!("{l}"));
        assert_eq!(
            winners.get(id).copied(),
            Some(winner),
            "the logged winner served the request: {l}"
        );
        let candidates = l["candidates"].as_array().unwrap_or_else(|| panic!("{l}"));
        assert!(!candidates.is_empty(), "{l}");
        assert!(candidates.iter().any(|c| c["id"] == winner), "{l}");
        assert_eq!(l["model"], MODEL, "{l}");
        assert_eq!(l["policy"], "p2c", "{l}");
        assert!(l.get("prompt").is_none(), "no prompt by default: {l}");
        assert!(!l.to_string().contains(SECRET), "{l}");
    }
    assert_eq!(logged_ids.len(), 50, "one line per request");

    // With log_prompts, lines carry the prompt.
    let (_, lines) = run("prompts.jsonl", "1.0", true, 10);
    assert_eq!(lines.len(), 10, "{lines:?}");
    for l in &lines {
        let prompt = l["prompt"].as_str().unwrap_or_else(|| panic!("{l}"));
        assert!(prompt.contains(SECRET), "{l}");
    }

    // Sample rate 0: nothing logged.
    let (_, lines) = run("none.jsonl", "0.0", false, 30);
    assert!(lines.is_empty(), "{lines:?}");

    // Sample rate 0.5: roughly half (generous bounds).
    let (_, lines) = run("half.jsonl", "0.5", false, 200);
    assert!(
        (40..=160).contains(&lines.len()),
        "{} of 200 sampled at 0.5",
        lines.len()
    );
}

/// The `inferrail serve` child, its collected stderr, killed on drop.
struct Served {
    child: Child,
    stderr: Arc<Mutex<String>>,
}

impl Served {
    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Sends `signal` (a `kill` name like `HUP`) to the child.
    fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} failed");
    }

    /// SIGTERM, then waits (bounded); true when it exited successfully.
    fn stop(mut self) -> bool {
        self.signal("TERM");
        for _ in 0..200 {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.success();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Starts `inferrail serve --config path` and returns it with its admin address (from the
/// "serving on ... admin on ADDR" line).
fn serve(path: &Path) -> (Served, SocketAddr) {
    let mut child = Command::new(inferrail_bin())
        .args(["serve", "--config"])
        .arg(path)
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn inferrail serve");
    let stderr = Arc::new(Mutex::new(String::new()));
    let (tx, rx) = std::sync::mpsc::channel();
    let pipe = child.stderr.take().unwrap();
    let sink = Arc::clone(&stderr);
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { break };
            sink.lock().unwrap().push_str(&format!("{line}\n"));
            if line.contains("serving on") {
                let _ = tx.send(line);
            }
        }
    });
    let served = Served { child, stderr };
    let banner = rx
        .recv_timeout(Duration::from_secs(20))
        .unwrap_or_else(|_| panic!("no serving line:\n{}", served.stderr()));
    let admin: SocketAddr = banner
        .rsplit("admin on ")
        .next()
        .map(str::trim)
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no admin address in {banner:?}"));
    (served, admin)
}

#[test]
fn sighup_rereads_the_config_file() {
    let e = engines(2, EngineBehavior::Instant);
    let path = temp_file("sighup", "gw.yaml");
    let yaml = config_yaml(&e, "round_robin", "  reload_interval: 0s\n", "");
    std::fs::write(&path, &yaml).unwrap();
    let (served, admin) = serve(&path);
    let generation = |admin| admin_call(admin, "GET", "/admin/config", None).1;

    let v = generation(admin);
    assert_eq!(v["generation"], 1, "{v}");
    assert_eq!(v["config"]["models"][0]["policy"], "round_robin", "{v}");

    // A new policy, then SIGHUP: generation 2 with the new document.
    std::fs::write(&path, yaml.replace("policy: round_robin", "policy: random")).unwrap();
    // Nothing happens without the signal (polling is off).
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(generation(admin)["generation"], 1);
    served.signal("HUP");
    let mut v = Value::Null;
    let applied = wait_until(Duration::from_secs(10), || {
        v = generation(admin);
        v["generation"] == 2
    });
    assert!(applied, "{v}\n{}", served.stderr());
    assert_eq!(v["config"]["models"][0]["policy"], "random", "{v}");
    assert!(
        wait_until(Duration::from_secs(5), || served
            .stderr()
            .contains("SIGHUP")),
        "{}",
        served.stderr()
    );

    // A change needing a restart is refused whole.
    std::fs::write(
        &path,
        yaml.replace("policy: round_robin", "policy: least_request")
            .replace("cores: 2", "cores: 1"),
    )
    .unwrap();
    served.signal("HUP");
    assert!(
        wait_until(Duration::from_secs(10), || served
            .stderr()
            .contains("server.cores")),
        "the refusal names server.cores:\n{}",
        served.stderr()
    );
    let v = generation(admin);
    assert_eq!(v["generation"], 2, "{v}");
    assert_eq!(v["config"]["models"][0]["policy"], "random", "{v}");

    // POST /admin/reload re-reads a valid file.
    std::fs::write(&path, yaml.replace("policy: round_robin", "policy: p2c")).unwrap();
    let (status, body) = admin_call(admin, "POST", "/admin/reload", None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["generation"], 3, "{body}");
    let v = generation(admin);
    assert_eq!(v["generation"], 3, "{v}");
    assert_eq!(v["config"]["models"][0]["policy"], "p2c", "{v}");

    let log = served.stderr();
    assert!(
        served.stop(),
        "inferrail did not stop cleanly on SIGTERM:\n{log}"
    );
    let _ = std::fs::remove_file(&path);
}

#[test]
fn reload_interval_polls_the_file() {
    let e = engines(2, EngineBehavior::Instant);
    let path = temp_file("poll", "gw.yaml");
    let yaml = config_yaml(&e, "round_robin", "  reload_interval: 100ms\n", "");
    std::fs::write(&path, &yaml).unwrap();
    let gw = TestGateway::start_file(&path, GatewayOptions::default());
    let (_, v) = gw.admin("GET", "/admin/config", None);
    assert_eq!(v["generation"], 1, "{v}");
    let r = post_chat(gw.addr, &chat(MODEL, false));
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-inferrail-policy"), Some("round_robin"));

    std::fs::write(&path, yaml.replace("policy: round_robin", "policy: random")).unwrap();
    let mut v = Value::Null;
    let applied = wait_until(Duration::from_secs(10), || {
        v = gw.admin("GET", "/admin/config", None).1;
        v["generation"] == 2
    });
    assert!(applied, "{v}");
    assert_eq!(v["config"]["models"][0]["policy"], "random", "{v}");
    // Requests follow the new policy (every core takes the new snapshot soon).
    let mut policy = String::new();
    let followed = wait_until(Duration::from_secs(10), || {
        let r = post_chat(gw.addr, &chat(MODEL, false));
        policy = r.header("x-inferrail-policy").unwrap_or("").to_string();
        r.status == 200 && policy == "random"
    });
    assert!(followed, "policy header still {policy:?}");

    // An unchanged file does not bump the generation on later polls.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(gw.admin("GET", "/admin/config", None).1["generation"], 2);
    gw.stop();
    let _ = std::fs::remove_file(&path);
}

/// Product contract: `Gateway::wait` returns once every thread has stopped, so the observer logs
/// are complete on disk when it returns (the decision log and shadow log writers flush "at
/// stop"). Ignored: it fails intermittently (about one stop in five here) because the logs are
/// flushed only later, when the writer threads notice their channels closed.
#[test]
fn observer_logs_are_flushed_when_the_gateway_stops() {
    let e = engines(3, EngineBehavior::Instant);
    let mut results = Vec::new();
    for i in 0..10 {
        let decisions = temp_file("flush", &format!("decisions-{i}.jsonl"));
        let shadow = temp_file("flush", &format!("shadow-{i}.jsonl"));
        let extra = format!(
            "  shadow: [round_robin]\nobservability:\n  shadow_log: {}\n  decision_log:\n    path: {}\n    sample_rate: 1.0\n",
            shadow.display(),
            decisions.display()
        );
        let gw = TestGateway::start(&config_yaml(&e, "p2c", "", &extra));
        send_many(gw.addr, 20, &chat(MODEL, false));
        assert!(wait_until(Duration::from_secs(10), || {
            gw.admin("GET", "/admin/shadow", None).1["decisions"] == 20
        }));
        gw.stop();
        let decision_lines = json_lines(&decisions).len();
        let shadow_lines = json_lines(&shadow)
            .iter()
            .filter(|l| l["type"] == "shadow")
            .count();
        results.push((decision_lines, shadow_lines));
        let _ = std::fs::remove_file(&decisions);
        let _ = std::fs::remove_file(&shadow);
    }
    assert!(
        results.iter().all(|r| *r == (20, 20)),
        "(decision log lines, shadow lines) on disk right after stop, per run: {results:?}"
    );
}
