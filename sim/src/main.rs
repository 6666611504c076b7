//! `inferrail-sim`: the simulated vLLM engine (or, with `--scripted`, the scripted test engine),
//! with flags named like `vllm serve`'s.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

use std::net::IpAddr;
use std::process::ExitCode;
use std::time::Duration;

use inferrail_sim::engine::{LatencyKind, LatencyModel, LinearLatency};
use inferrail_sim::kv_events::KvEventsConfig;
use inferrail_sim::server::{SimOptions, SimServer, StartError};
use inferrail_sim::{Behavior, EngineOptions, ScriptedEngine};

const USAGE: &str = "\
usage: inferrail-sim [OPTIONS]

A CPU engine that behaves like vLLM 0.32: its HTTP API, V1 scheduler (continuous batching,
chunked prefill, prefix caching, preemption), latency model and /metrics.

  --host HOST                       address to listen on (default 127.0.0.1)
  --port PORT                       TCP port (default 8000)
  --served-model-name NAME          the model name clients must use (default sim-llama)
  --max-num-batched-tokens N        token budget per step (default 2048)
  --max-num-seqs N                  running requests at most (default 256)
  --block-size N                    tokens per KV block (default 16)
  --num-gpu-blocks-override N       KV blocks in the pool (default 2560)
  --enable-prefix-caching           (default)
  --no-enable-prefix-caching        turn prefix caching off
  --enable-prompt-tokens-details    report usage.prompt_tokens_details.cached_tokens
  --enable-request-id-headers       send an x-request-id header with every response
  --enable-scale-out                serve the render routes (POST /v1/chat/completions/render,
                                    /v1/completions/render, /v1/messages/render: the prompt's
                                    token ids and sampling params, no generation); without it
                                    they answer 403 as vLLM's
  --max-model-len N                 prompt plus output tokens at most (default 32768)
  --long-prefill-token-threshold N  largest prefill chunk (default 0: the budget)
  --zero-latency                    every step free (for gateway overhead benchmarks)
  --latency-model stepped|linear    what a step costs (default stepped):
                                    stepped: one batched pass per step, 2 ms per step plus
                                      max(16 ms weight read, 0.1 ms per token in the step)
                                      plus attention in 128-token KV tiles plus 0.15 ms per
                                      decode sequence (prefill and decode slow each other);
                                      its coefficients have no flags
                                    linear: the router's cost formula, prefill
                                      P(u,c) = a*u + b*u*(c + u/2) + d plus a decode batch of
                                      18 ms + 0.15 ms per extra sequence (what `inferrail
                                      calibrate` fits exactly)
  --prefill-token-secs A            linear model only: a, per computed prompt token
                                    (default 1e-4)
  --prefill-pair-secs B             linear model only: b, per (new token, context token) pair
                                    (default 3.3e-9)
  --prefill-fixed-secs D            linear model only: d, once per prompt (default 5e-3)
  --time-scale S                    every modelled latency multiplied by S (> 0; default 1):
                                    at 0.1 a workload sent at 10x its rate plays out as at
                                    its rate, in a tenth of the time
  --seed N                          mixed into every request's sampler seed (default 0)
  --tokenizer DIR                   tokenize prompts with this tokenizer (a directory with
                                    tokenizer.json, an org/name in the local HF cache, or
                                    builtin:sim, the default), exactly as the gateway does
  --chat-template FILE|TEXT         override the tokenizer's chat template
  --kv-events-config JSON           KV cache events as vLLM publishes them (ZMQ PUB, replay
                                    ROUTER); keys: enable_kv_cache_events, publisher, endpoint,
                                    replay_endpoint, buffer_steps, hwm, max_queue_size, topic
  --scripted                        run the scripted test engine instead (only --host, --port,
                                    --served-model-name, --zero-latency and --time-scale apply;
                                    without --zero-latency it streams 16 tokens 20 ms apart,
                                    times the time scale)
  -h, --help                        print this help

environment:
  VLLM_SERVER_DEV_MODE=1            register GET /server_info (config, VLLM_* env, system)
";

/// What the command line asks for.
#[derive(Debug, PartialEq)]
enum Command {
    Run(SimOptions),
    Scripted(SimOptions),
    Help,
}

fn num<T: std::str::FromStr>(flag: &str, v: &str) -> Result<T, String> {
    v.parse()
        .map_err(|_| format!("{flag}: not a valid number: {v}"))
}

/// A latency coefficient in seconds: a finite number >= 0.
fn secs(flag: &str, v: &str) -> Result<f64, String> {
    match v.parse::<f64>() {
        Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
        _ => Err(format!("{flag}: not a number of seconds >= 0: {v}")),
    }
}

/// The linear model's coefficient flags given (`None`: its default).
#[derive(Debug, Default)]
struct LinearFlags {
    prefill_token_secs: Option<f64>,
    prefill_pair_secs: Option<f64>,
    prefill_fixed_secs: Option<f64>,
}

impl LinearFlags {
    /// The first flag given, by name.
    fn first_given(&self) -> Option<&'static str> {
        [
            ("--prefill-token-secs", self.prefill_token_secs),
            ("--prefill-pair-secs", self.prefill_pair_secs),
            ("--prefill-fixed-secs", self.prefill_fixed_secs),
        ]
        .into_iter()
        .find_map(|(name, v)| v.map(|_| name))
    }
}

/// The latency model `--latency-model` and the coefficient flags describe; a linear-only flag
/// with the stepped model is refused (it would be ignored).
fn latency_model(kind: LatencyKind, flags: &LinearFlags) -> Result<LatencyModel, String> {
    match kind {
        LatencyKind::Linear => {
            let d = LinearLatency::default();
            Ok(LatencyModel::Linear(LinearLatency {
                prefill_token_secs: flags.prefill_token_secs.unwrap_or(d.prefill_token_secs),
                prefill_pair_secs: flags.prefill_pair_secs.unwrap_or(d.prefill_pair_secs),
                prefill_fixed_secs: flags.prefill_fixed_secs.unwrap_or(d.prefill_fixed_secs),
                ..d
            }))
        }
        LatencyKind::Stepped => match flags.first_given() {
            Some(flag) => Err(format!(
                "{flag} applies to --latency-model linear only (the latency model is stepped, \
                 the default); add --latency-model linear"
            )),
            None => Ok(LatencyModel::of_kind(kind)),
        },
    }
}

fn parse(args: impl IntoIterator<Item = String>) -> Result<Command, String> {
    let mut o = SimOptions::default();
    let mut scripted = false;
    let mut kind = LatencyKind::Stepped;
    let mut linear = LinearFlags::default();
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_owned(), Some(v.to_owned())),
            _ => (arg.clone(), None),
        };
        let switch = inline.is_none();
        let mut value = |name: &str| -> Result<String, String> {
            inline
                .clone()
                .or_else(|| it.next())
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match flag.as_str() {
            "-h" | "--help" => return Ok(Command::Help),
            "--host" => {
                let v = value("--host")?;
                o.host = v
                    .parse::<IpAddr>()
                    .map_err(|_| format!("--host: not an IP address: {v}"))?;
            }
            "--port" => {
                let v = value("--port")?;
                o.port = v
                    .parse()
                    .map_err(|_| format!("--port: not a port number: {v}"))?;
            }
            "--served-model-name" => {
                let v = value("--served-model-name")?;
                if v.is_empty() {
                    return Err("--served-model-name: empty name".to_owned());
                }
                o.served_model_name = vec![v];
            }
            "--max-num-batched-tokens" => {
                o.max_num_batched_tokens = num(&flag, &value(&flag)?)?;
            }
            "--max-num-seqs" => o.max_num_seqs = num(&flag, &value(&flag)?)?,
            "--block-size" => o.block_size = num(&flag, &value(&flag)?)?,
            "--num-gpu-blocks-override" => {
                o.num_gpu_blocks_override = Some(num(&flag, &value(&flag)?)?);
            }
            "--max-model-len" => o.max_model_len = num(&flag, &value(&flag)?)?,
            "--long-prefill-token-threshold" => {
                o.long_prefill_token_threshold = num(&flag, &value(&flag)?)?;
            }
            "--seed" => o.seed = num(&flag, &value(&flag)?)?,
            "--latency-model" => {
                let v = value(&flag)?;
                kind = LatencyKind::parse(&v).ok_or_else(|| {
                    format!("--latency-model: expected stepped or linear, got {v:?}")
                })?;
            }
            "--prefill-token-secs" => {
                linear.prefill_token_secs = Some(secs(&flag, &value(&flag)?)?);
            }
            "--prefill-pair-secs" => {
                linear.prefill_pair_secs = Some(secs(&flag, &value(&flag)?)?);
            }
            "--prefill-fixed-secs" => {
                linear.prefill_fixed_secs = Some(secs(&flag, &value(&flag)?)?);
            }
            "--time-scale" => {
                let v = value(&flag)?;
                o.time_scale = match v.parse::<f64>() {
                    Ok(x) if x.is_finite() && x > 0.0 => x,
                    _ => return Err(format!("--time-scale: not a number above 0: {v}")),
                };
            }
            "--tokenizer" => o.tokenizer = Some(value(&flag)?),
            "--chat-template" => o.chat_template = Some(value(&flag)?),
            "--kv-events-config" => {
                o.kv_events_config = Some(KvEventsConfig::parse(&value(&flag)?)?);
            }
            "--enable-prefix-caching" if switch => o.enable_prefix_caching = true,
            "--no-enable-prefix-caching" if switch => o.enable_prefix_caching = false,
            "--enable-prompt-tokens-details" if switch => o.enable_prompt_tokens_details = true,
            "--enable-request-id-headers" if switch => o.enable_request_id_headers = true,
            "--enable-scale-out" if switch => o.enable_scale_out = true,
            "--zero-latency" if switch => o.zero_latency = true,
            "--scripted" if switch => scripted = true,
            _ => return Err(format!("unknown argument: {arg}")),
        }
    }
    o.latency = latency_model(kind, &linear)?;
    Ok(if scripted {
        Command::Scripted(o)
    } else {
        Command::Run(o)
    })
}

fn run_scripted(o: &SimOptions) -> ExitCode {
    let behavior = if o.zero_latency {
        Behavior::Instant
    } else {
        Behavior::Stream {
            chunks: 16,
            interval: Duration::from_millis(20).mul_f64(o.time_scale),
        }
    };
    let opts = EngineOptions {
        port: o.port,
        model: o.served_model_name[0].clone(),
        behavior,
        record: false,
    };
    match ScriptedEngine::start_on(o.host, opts) {
        Ok(engine) => {
            println!(
                "inferrail-sim (scripted) listening on {} (model {})",
                engine.url(),
                o.served_model_name[0]
            );
            let _keep = engine;
            loop {
                std::thread::park();
            }
        }
        Err(e) => {
            eprintln!("inferrail-sim: cannot listen on {}:{}: {e}", o.host, o.port);
            ExitCode::FAILURE
        }
    }
}

/// vLLM's reading of a boolean env var (`bool(int(value))`); anything unparsable is off.
fn env_flag(value: Option<&str>) -> bool {
    value.is_some_and(|v| v.trim().parse::<i64>().is_ok_and(|n| n != 0))
}

fn main() -> ExitCode {
    let dev_mode = env_flag(std::env::var("VLLM_SERVER_DEV_MODE").ok().as_deref());
    let opts = match parse(std::env::args().skip(1)) {
        Ok(Command::Run(o)) => SimOptions {
            server_dev_mode: dev_mode,
            ..o
        },
        Ok(Command::Scripted(o)) => return run_scripted(&o),
        Ok(Command::Help) => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("inferrail-sim: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let server = match SimServer::try_start(opts.clone()) {
        Ok(s) => s,
        Err(StartError::Config(e)) => {
            eprintln!("inferrail-sim: refusing to start: {e}");
            return ExitCode::from(2);
        }
        Err(StartError::KvEvents(e)) => {
            eprintln!("inferrail-sim: {e}");
            return ExitCode::FAILURE;
        }
        Err(e @ StartError::Tokenizer(_)) => {
            eprintln!("inferrail-sim: {e}");
            return ExitCode::from(2);
        }
        Err(StartError::Io(e)) => {
            eprintln!(
                "inferrail-sim: cannot listen on {}:{}: {e}",
                opts.host, opts.port
            );
            return ExitCode::FAILURE;
        }
    };
    println!(
        "inferrail-sim listening on {} (model {}, {} blocks of {}, {})",
        server.url(),
        opts.served_model_name[0],
        opts.scheduler_config().num_gpu_blocks,
        opts.block_size,
        if opts.zero_latency {
            "zero latency".to_owned()
        } else {
            format!("{} latency model", opts.latency.kind().as_str())
        }
    );
    if let Some(kv) = server.kv_events() {
        let endpoint = match (kv.local_addr(), opts.kv_events_config.as_ref()) {
            (Some(a), _) => a.to_string(),
            (None, Some(c)) => format!("{} (connecting)", c.endpoint),
            (None, None) => String::new(),
        };
        println!(
            "inferrail-sim: KV events on {endpoint}{}",
            match kv.replay_addr() {
                Some(a) => format!(", replay on {a}"),
                None => String::new(),
            }
        );
    }
    // The engine runs on its own thread; SIGINT/SIGTERM end the process.
    let _keep = server;
    loop {
        std::thread::park();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Result<Command, String> {
        parse(args.iter().map(|s| s.to_string()))
    }

    #[test]
    fn defaults_and_flags() {
        let Ok(Command::Run(a)) = run(&[]) else {
            panic!()
        };
        assert_eq!(
            (a.port, a.served_model_name[0].as_str(), a.zero_latency),
            (8000, "sim-llama", false)
        );
        assert_eq!(a.host.to_string(), "127.0.0.1");
        assert!(a.enable_prefix_caching);
        let Ok(Command::Run(a)) = run(&[
            "--host",
            "0.0.0.0",
            "--port=9001",
            "--served-model-name",
            "tiny",
            "--zero-latency",
            "--max-num-batched-tokens",
            "512",
            "--max-num-seqs=8",
            "--block-size",
            "32",
            "--num-gpu-blocks-override",
            "128",
            "--no-enable-prefix-caching",
            "--enable-prompt-tokens-details",
            "--max-model-len",
            "2048",
            "--seed",
            "7",
        ]) else {
            panic!()
        };
        assert_eq!(
            (a.port, a.served_model_name[0].as_str(), a.zero_latency),
            (9001, "tiny", true)
        );
        assert_eq!(a.host.to_string(), "0.0.0.0");
        assert_eq!(
            (a.max_num_batched_tokens, a.max_num_seqs, a.block_size),
            (512, 8, 32)
        );
        assert_eq!(a.num_gpu_blocks_override, Some(128));
        assert!(!a.enable_prefix_caching && a.enable_prompt_tokens_details);
        assert_eq!((a.max_model_len, a.seed), (2048, 7));
        assert!(matches!(run(&["--scripted"]), Ok(Command::Scripted(_))));
        let Ok(Command::Run(a)) = run(&["--enable-scale-out"]) else {
            panic!()
        };
        assert!(a.enable_scale_out && !a.server_dev_mode);
        assert!(run(&["--enable-scale-out=1"]).is_err());
        assert!(env_flag(Some("1")) && !env_flag(Some("0")) && !env_flag(None));
        assert!(!env_flag(Some("yes")));
        assert_eq!(run(&["--help"]), Ok(Command::Help));
        assert!(run(&["--port"]).is_err());
        assert!(run(&["--port", "x"]).is_err());
        assert!(run(&["--max-num-seqs", "x"]).is_err());
        assert!(run(&["--nope"]).is_err());
    }

    /// The linear coefficients `args` set (with `--latency-model linear` among them).
    fn linear_of(args: &[&str]) -> LinearLatency {
        match run(args) {
            Ok(Command::Run(SimOptions {
                latency: LatencyModel::Linear(l),
                ..
            })) => l,
            other => panic!("{args:?}: {other:?}"),
        }
    }

    #[test]
    fn latency_flags() {
        let Ok(Command::Run(a)) = run(&[]) else {
            panic!()
        };
        assert_eq!(a.latency, LatencyModel::default());
        assert_eq!(a.latency.kind(), LatencyKind::Stepped);
        let Ok(Command::Run(a)) = run(&["--latency-model", "stepped"]) else {
            panic!()
        };
        assert_eq!(a.latency, LatencyModel::default());
        assert_eq!(
            linear_of(&["--latency-model=linear"]),
            LinearLatency::default()
        );
        // The coefficient flags apply to the linear model, before or after --latency-model.
        for args in [
            [
                "--latency-model",
                "linear",
                "--prefill-token-secs",
                "2e-4",
                "--prefill-pair-secs=1e-8",
                "--prefill-fixed-secs",
                "0.01",
            ],
            [
                "--prefill-token-secs",
                "2e-4",
                "--prefill-pair-secs=1e-8",
                "--prefill-fixed-secs",
                "0.01",
                "--latency-model",
                "linear",
            ],
        ] {
            let l = linear_of(&args);
            assert_eq!(
                (
                    l.prefill_token_secs,
                    l.prefill_pair_secs,
                    l.prefill_fixed_secs
                ),
                (2e-4, 1e-8, 0.01)
            );
            // The decode terms keep their defaults.
            let d = LinearLatency::default();
            assert_eq!(
                (l.decode_token_secs, l.decode_seq_secs),
                (d.decode_token_secs, d.decode_seq_secs)
            );
        }
        let l = linear_of(&["--latency-model", "linear", "--prefill-fixed-secs", "0"]);
        assert_eq!(l.prefill_fixed_secs, 0.0);
        // With the stepped model (the default) a linear-only flag is refused, not ignored.
        for flag in [
            "--prefill-token-secs",
            "--prefill-pair-secs",
            "--prefill-fixed-secs",
        ] {
            for args in [
                vec![flag, "1e-4"],
                vec!["--latency-model", "stepped", flag, "1e-4"],
            ] {
                let e = run(&args).unwrap_err();
                assert!(
                    e.contains(flag) && e.contains("--latency-model linear"),
                    "{args:?}: {e}"
                );
            }
        }
        for bad in ["Linear", "quadratic", ""] {
            let e = run(&["--latency-model", bad]).unwrap_err();
            assert!(e.contains("--latency-model"), "{e}");
        }
        assert!(run(&["--latency-model"]).is_err());
        for bad in ["-1e-4", "x", "NaN", "inf", ""] {
            let e = run(&["--latency-model", "linear", "--prefill-token-secs", bad]).unwrap_err();
            assert!(e.contains("--prefill-token-secs"), "{e}");
        }
        assert!(run(&["--latency-model", "linear", "--prefill-pair-secs"]).is_err());
        assert_eq!(a_default_scale(), 1.0);
        // --time-scale and --zero-latency apply to both models.
        for model in ["stepped", "linear"] {
            let Ok(Command::Run(a)) = run(&["--time-scale", "0.1", "--latency-model", model])
            else {
                panic!()
            };
            assert_eq!(a.time_scale, 0.1);
            assert_eq!(a.latency.kind().as_str(), model);
            assert_eq!(a.effective_latency(), a.latency.scaled(0.1));
            let Ok(Command::Run(z)) = run(&["--zero-latency", "--latency-model", model]) else {
                panic!()
            };
            assert_eq!(z.effective_latency(), LatencyModel::zero());
            assert_eq!(z.latency.kind().as_str(), model);
        }
        let Ok(Command::Run(a)) = run(&["--time-scale", "0.1"]) else {
            panic!()
        };
        assert_eq!(a.latency, LatencyModel::default());
        assert_eq!(a.effective_latency(), LatencyModel::default().scaled(0.1));
        for bad in ["0", "-1", "x", "NaN", "inf", ""] {
            let e = run(&["--time-scale", bad]).unwrap_err();
            assert!(e.contains("--time-scale"), "{e}");
        }
        assert!(run(&["--time-scale"]).is_err());
    }

    fn a_default_scale() -> f64 {
        let Ok(Command::Run(a)) = run(&[]) else {
            panic!()
        };
        a.time_scale
    }

    #[test]
    fn kv_events_config_flag() {
        let Ok(Command::Run(a)) = run(&[
            "--kv-events-config",
            r#"{"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://*:5557", "replay_endpoint": "tcp://*:5558", "topic": "kv"}"#,
        ]) else {
            panic!()
        };
        let c = a.kv_events_config.as_ref().unwrap();
        assert!(c.publishes() && a.scheduler_config().enable_kv_events);
        assert_eq!(c.replay_endpoint.as_deref(), Some("tcp://*:5558"));
        let Ok(Command::Run(a)) = run(&[r#"--kv-events-config={"enable_kv_cache_events":false}"#])
        else {
            panic!()
        };
        assert!(!a.scheduler_config().enable_kv_events);
        let Ok(Command::Run(a)) = run(&[]) else {
            panic!()
        };
        assert_eq!(a.kv_events_config, None);
        let e = run(&[
            "--kv-events-config",
            r#"{"enable_kv_cache_events":true,"bogus":1}"#,
        ])
        .unwrap_err();
        assert!(
            e.contains("--kv-events-config") && e.contains("bogus"),
            "{e}"
        );
        assert!(run(&["--kv-events-config"]).is_err());
        assert!(run(&["--kv-events-config", r#"{"publisher":"kafka"}"#]).is_err());
    }

    #[test]
    fn kv_events_bind_failure_is_reported() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = taken.local_addr().unwrap().port();
        let Ok(Command::Run(a)) = run(&[
            "--port",
            "0",
            "--kv-events-config",
            &format!(
                r#"{{"enable_kv_cache_events":true,"endpoint":"tcp://*:0","replay_endpoint":"tcp://127.0.0.1:{port}"}}"#
            ),
        ]) else {
            panic!()
        };
        match SimServer::try_start(a) {
            Err(StartError::KvEvents(e)) => assert!(
                e.to_string().contains("replay") || e.to_string().contains(&port.to_string()),
                "{e}"
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn refusals_are_config_errors() {
        let Ok(Command::Run(mut a)) = run(&["--max-num-batched-tokens", "4", "--port", "0"]) else {
            panic!()
        };
        assert!(matches!(
            SimServer::try_start(a.clone()),
            Err(StartError::Config(_))
        ));
        a.max_num_batched_tokens = 2048;
        a.num_gpu_blocks_override = Some(4);
        assert!(matches!(
            SimServer::try_start(a),
            Err(StartError::Config(_))
        ));
    }
}
