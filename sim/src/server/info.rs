//! `GET /server_info`, vLLM's dev-mode route (registered only with `VLLM_SERVER_DEV_MODE=1`):
//! `{"vllm_config":…,"vllm_env":…,"system_env":…}` shaped like the capture
//! (`http-extra/01`, `02`), describing the simulator honestly.
//!
//! - `vllm_config`: with `config_format=text` (the default) a repr-style string as vLLM's
//!   `VllmConfig.__str__` (`key=value, …`); with `config_format=json` an object of config
//!   sections (`model_config`, `cache_config`, `parallel_config`, `scheduler_config`,
//!   `device_config`, `kv_events_config`, `additional_config`) holding only what the simulator
//!   has: its flags and the latency model (under `additional_config.inferrail_sim`).
//! - `vllm_env`: every `VLLM_*` variable of the process whose name does not contain `KEY`,
//!   sorted by name, values as strings (vLLM shows its parsed values of the variables it knows).
//! - `system_env`: what the simulator can know (OS, architecture, CPU count and model); Python,
//!   torch and package fields are `null`: there are none.

use std::fmt::Write as _;

use inferrail_shards::pyfmt::{finite_float_repr, push_json_str, push_repr_str};

use super::SimOptions;
use crate::engine::LatencyModel;
use crate::openai::VLLM_VERSION;

/// `config_format` of a `/server_info` query: `Some(true)` for `json`, `Some(false)` for `text`
/// (also when absent), `None` for any other value.
pub(crate) fn config_format_json(query: &str) -> Option<bool> {
    let mut json = false;
    for pair in query.split('&') {
        if let Some(v) = pair.strip_prefix("config_format=") {
            json = match v {
                "json" => true,
                "text" => false,
                _ => return None,
            };
        }
    }
    Some(json)
}

/// The `vllm_env` entries of `vars`: `VLLM_*` names without `KEY`, sorted by name.
pub(crate) fn vllm_env(vars: impl Iterator<Item = (String, String)>) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = vars
        .filter(|(k, _)| k.starts_with("VLLM_") && !k.contains("KEY"))
        .collect();
    out.sort();
    out
}

fn py_bool(b: bool) -> &'static str {
    if b {
        "True"
    } else {
        "False"
    }
}

fn tokenizer_name(o: &SimOptions) -> &str {
    o.tokenizer.as_deref().unwrap_or("builtin:sim")
}

/// The text form of `vllm_config` (a Python repr-style line).
pub(crate) fn config_text(o: &SimOptions) -> String {
    let model = &o.served_model_name[0];
    let mut s = String::new();
    s.push_str("model=");
    push_repr_str(&mut s, model);
    s.push_str(", speculative_config=None, tokenizer=");
    push_repr_str(&mut s, tokenizer_name(o));
    let _ = write!(
        s,
        ", skip_tokenizer_init=False, tokenizer_mode=auto, trust_remote_code=False, \
         max_seq_len={}, tensor_parallel_size=1, pipeline_parallel_size=1, data_parallel_size=1, \
         quantization=None, kv_cache_dtype=auto, device_config=cpu, seed={}, \
         served_model_name={}, enable_prefix_caching={}, enable_chunked_prefill=True, \
         pooler_config=None, cache_config=CacheConfig(block_size={}, num_gpu_blocks={}, \
         num_gpu_blocks_override={}, prefix_caching_hash_algo='sha256'), \
         scheduler_config=SchedulerConfig(max_num_batched_tokens={}, max_num_seqs={}, \
         long_prefill_token_threshold={}, policy='fcfs'), kv_events_config=",
        o.max_model_len,
        o.seed,
        o.served_model_name.join(", "),
        py_bool(o.enable_prefix_caching),
        o.block_size,
        o.scheduler_config().num_gpu_blocks,
        o.num_gpu_blocks_override
            .map_or("None".to_owned(), |n| n.to_string()),
        o.max_num_batched_tokens,
        o.max_num_seqs,
        o.long_prefill_token_threshold,
    );
    match &o.kv_events_config {
        None => s.push_str("None"),
        Some(k) => {
            let _ = write!(
                s,
                "KVEventsConfig(enable_kv_cache_events={}, publisher='{}', endpoint='{}', \
                 replay_endpoint={}, buffer_steps={}, hwm={}, max_queue_size={}, topic='{}')",
                py_bool(k.publishes()),
                k.publisher_kind(),
                k.endpoint,
                k.replay_endpoint
                    .as_deref()
                    .map_or("None".to_owned(), |r| format!("'{r}'")),
                k.buffer_steps,
                k.hwm,
                k.max_queue_size,
                k.topic,
            );
        }
    }
    s
}

/// Compact JSON object writer (keys in insertion order).
struct Obj<'a> {
    out: &'a mut String,
    first: bool,
}

impl<'a> Obj<'a> {
    fn new(out: &'a mut String) -> Obj<'a> {
        out.push('{');
        Obj { out, first: true }
    }
    fn key(&mut self, k: &str) -> &mut String {
        if !self.first {
            self.out.push(',');
        }
        self.first = false;
        push_json_str(self.out, k, false);
        self.out.push(':');
        self.out
    }
    fn str(&mut self, k: &str, v: &str) {
        let out = self.key(k);
        push_json_str(out, v, false);
    }
    fn opt_str(&mut self, k: &str, v: Option<&str>) {
        match v {
            Some(v) => self.str(k, v),
            None => self.raw(k, "null"),
        }
    }
    fn raw(&mut self, k: &str, v: &str) {
        self.key(k).push_str(v);
    }
    fn num(&mut self, k: &str, v: impl std::fmt::Display) {
        let _ = write!(self.key(k), "{v}");
    }
    fn float(&mut self, k: &str, v: f64) {
        let r = finite_float_repr(v);
        self.key(k).push_str(&r);
    }
    fn bool(&mut self, k: &str, v: bool) {
        self.raw(k, if v { "true" } else { "false" });
    }
    fn end(self) {
        self.out.push('}');
    }
}

/// The JSON form of `vllm_config`.
pub(crate) fn config_json(o: &SimOptions, out: &mut String) {
    let mut root = Obj::new(out);
    {
        let mut m = Obj::new(root.key("model_config"));
        m.str("model", &o.served_model_name[0]);
        m.str("tokenizer", tokenizer_name(o));
        m.str("tokenizer_mode", "auto");
        m.bool("trust_remote_code", false);
        m.num("seed", o.seed);
        m.num("max_model_len", o.max_model_len);
        m.bool("skip_tokenizer_init", false);
        m.str("served_model_name", &o.served_model_name.join(", "));
        m.bool(
            "enable_prompt_tokens_details",
            o.enable_prompt_tokens_details,
        );
        m.opt_str("chat_template", o.chat_template.as_deref());
        m.end();
    }
    {
        let mut c = Obj::new(root.key("cache_config"));
        c.num("block_size", o.block_size);
        match o.num_gpu_blocks_override {
            Some(n) => c.num("num_gpu_blocks_override", n),
            None => c.raw("num_gpu_blocks_override", "null"),
        }
        c.bool("enable_prefix_caching", o.enable_prefix_caching);
        c.str("prefix_caching_hash_algo", "sha256");
        c.num("num_gpu_blocks", o.scheduler_config().num_gpu_blocks);
        c.end();
    }
    {
        let mut p = Obj::new(root.key("parallel_config"));
        p.num("pipeline_parallel_size", 1);
        p.num("tensor_parallel_size", 1);
        p.num("data_parallel_size", 1);
        p.num("data_parallel_rank", 0);
        p.num("world_size", 1);
        p.end();
    }
    {
        let mut s = Obj::new(root.key("scheduler_config"));
        s.str("runner_type", "generate");
        s.num("max_num_batched_tokens", o.max_num_batched_tokens);
        s.num("max_num_seqs", o.max_num_seqs);
        s.num(
            "long_prefill_token_threshold",
            o.long_prefill_token_threshold,
        );
        s.bool("enable_chunked_prefill", true);
        s.str("policy", "fcfs");
        s.end();
    }
    {
        let mut d = Obj::new(root.key("device_config"));
        d.str("device", "cpu");
        d.end();
    }
    match &o.kv_events_config {
        None => root.raw("kv_events_config", "null"),
        Some(k) => {
            let mut e = Obj::new(root.key("kv_events_config"));
            e.bool("enable_kv_cache_events", k.publishes());
            e.str("publisher", k.publisher_kind());
            e.str("endpoint", &k.endpoint);
            e.opt_str("replay_endpoint", k.replay_endpoint.as_deref());
            e.num("buffer_steps", k.buffer_steps);
            e.num("hwm", k.hwm);
            e.num("max_queue_size", k.max_queue_size);
            e.str("topic", &k.topic);
            e.end();
        }
    }
    {
        let mut a = Obj::new(root.key("additional_config"));
        let mut s = Obj::new(a.key("inferrail_sim"));
        s.str("version", env!("CARGO_PKG_VERSION"));
        s.bool("zero_latency", o.zero_latency);
        s.str("latency_model", o.latency.kind().as_str());
        match o.latency {
            LatencyModel::Linear(l) => {
                s.float("prefill_token_secs", l.prefill_token_secs);
                s.float("prefill_pair_secs", l.prefill_pair_secs);
                s.float("prefill_fixed_secs", l.prefill_fixed_secs);
                s.float("decode_token_secs", l.decode_token_secs);
                s.float("decode_seq_secs", l.decode_seq_secs);
            }
            LatencyModel::Stepped(m) => {
                s.float("step_fixed_secs", m.step_fixed_secs);
                s.float("weights_secs", m.weights_secs);
                s.float("token_secs", m.token_secs);
                s.num("tile_tokens", m.tile_tokens);
                s.float("tile_secs", m.tile_secs);
                s.float("decode_seq_secs", m.decode_seq_secs);
            }
        }
        s.float("time_scale", o.time_scale);
        s.bool("enable_scale_out", o.enable_scale_out);
        s.bool("enable_request_id_headers", o.enable_request_id_headers);
        s.end();
        a.end();
    }
    root.end();
}

/// What the simulator knows of its system: `(os, cpu_count, cpu model)`.
pub(crate) struct SystemFacts {
    /// `PRETTY_NAME` of `/etc/os-release` (else the OS family) and the architecture.
    pub(crate) os: String,
    /// Available parallelism.
    pub(crate) cpu_count: usize,
    /// `model name` of `/proc/cpuinfo`, when readable.
    pub(crate) cpu_model: Option<String>,
}

impl SystemFacts {
    /// Reads the facts of this machine.
    pub(crate) fn read() -> SystemFacts {
        let arch = std::env::consts::ARCH;
        let name = std::fs::read_to_string("/etc/os-release")
            .ok()
            .and_then(|t| {
                t.lines().find_map(|l| {
                    l.strip_prefix("PRETTY_NAME=")
                        .map(|v| v.trim_matches('"').to_owned())
                })
            })
            .unwrap_or_else(|| std::env::consts::OS.to_owned());
        let cpu_model = std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|t| {
            t.lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                (k.trim() == "model name").then(|| v.trim().to_owned())
            })
        });
        SystemFacts {
            os: format!("{name} ({arch})"),
            cpu_count: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu_model,
        }
    }
}

fn system_env(f: &SystemFacts, out: &mut String) {
    let mut s = Obj::new(out);
    s.raw("torch_version", "null");
    s.str("os", &f.os);
    s.raw("python_version", "null");
    s.raw("pip_packages", "null");
    s.raw("conda_packages", "null");
    let mut cpu_info = format!(
        "Architecture: {}\nCPU(s): {}",
        std::env::consts::ARCH,
        f.cpu_count
    );
    if let Some(m) = &f.cpu_model {
        let _ = write!(cpu_info, "\nModel name: {m}");
    }
    s.str("cpu_info", &cpu_info);
    s.num("cpu_count", f.cpu_count);
    s.str("vllm_version", VLLM_VERSION);
    s.str(
        "simulator",
        &format!("inferrail-sim {}", env!("CARGO_PKG_VERSION")),
    );
    s.end();
}

/// The `/server_info` body.
pub(crate) fn server_info_body(
    o: &SimOptions,
    json: bool,
    env: &[(String, String)],
    facts: &SystemFacts,
) -> String {
    let mut out = String::with_capacity(2048);
    let mut root = Obj::new(&mut out);
    if json {
        config_json(o, root.key("vllm_config"));
    } else {
        let text = config_text(o);
        root.str("vllm_config", &text);
    }
    {
        let mut e = Obj::new(root.key("vllm_env"));
        for (k, v) in env {
            e.str(k, v);
        }
        e.end();
    }
    system_env(facts, root.key("system_env"));
    root.end();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_format_query() {
        assert_eq!(config_format_json(""), Some(false));
        assert_eq!(config_format_json("config_format=json"), Some(true));
        assert_eq!(config_format_json("a=1&config_format=text"), Some(false));
        assert_eq!(config_format_json("config_format=yaml"), None);
    }

    #[test]
    fn env_filter_drops_keys_and_sorts() {
        let vars = [
            ("VLLM_B", "1"),
            ("VLLM_API_KEY", "secret"),
            ("PATH", "/bin"),
            ("VLLM_A", "x"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()));
        let got = vllm_env(vars.into_iter());
        assert_eq!(
            got,
            vec![
                ("VLLM_A".to_owned(), "x".to_owned()),
                ("VLLM_B".to_owned(), "1".to_owned())
            ]
        );
    }

    #[test]
    fn bodies_are_json_with_the_captured_keys() {
        let o = SimOptions::new("tiny");
        let f = SystemFacts::read();
        for json in [false, true] {
            let env = vec![("VLLM_SERVER_DEV_MODE".to_owned(), "1".to_owned())];
            let b = server_info_body(&o, json, &env, &f);
            let v: serde_json::Value = serde_json::from_str(&b).unwrap();
            assert_eq!(v["vllm_env"]["VLLM_SERVER_DEV_MODE"], "1");
            assert!(v["system_env"]["python_version"].is_null());
            if json {
                assert_eq!(v["vllm_config"]["model_config"]["max_model_len"], 32768);
                assert_eq!(v["vllm_config"]["cache_config"]["block_size"], 16);
            } else {
                let t = v["vllm_config"].as_str().unwrap();
                assert!(
                    t.starts_with("model='tiny', speculative_config=None, tokenizer='builtin:sim'")
                );
                assert!(t.contains("max_seq_len=32768") && t.contains("served_model_name=tiny"));
            }
        }
    }
}
