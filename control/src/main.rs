//! The `inferrail` command: serve, check, demo, replay-shadow, calibrate.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

use inferrail_control::gateway::Gateway;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

const USAGE: &str = "\
inferrail: a KV-cache-aware router for OpenAI-compatible inference engines

usage:
  inferrail serve --config FILE   run the gateway
  inferrail check --config FILE   validate a config file and exit (non-zero on errors)
  inferrail demo [--requests N]   run a gateway in front of three in-process engines
  inferrail replay-shadow LOG     re-run every pick of a shadow log; exit 0 when all reproduce,
                                  1 on a mismatch, 2 when the log cannot be read
  inferrail calibrate --url ENGINE [--model NAME] [--out FILE] [--probes N]
                    [--block-size N] [--max-tokens-total N]
                                  measure an idle vLLM engine's prefill time (TTFT from its
                                  /metrics) over prompts of known cached and uncached length,
                                  fit the cost model and print its YAML (routing.cost_model,
                                  or models[NAME].cost_model with --model); exit 1 on errors
  inferrail --version
";

fn config_arg(args: &[String]) -> Result<PathBuf, String> {
    match args {
        [flag, path] if flag == "--config" || flag == "-c" => Ok(PathBuf::from(path)),
        [one] if one.starts_with("--config=") => Ok(PathBuf::from(&one["--config=".len()..])),
        [flag] if flag == "--config" || flag == "-c" => Err("--config needs a file".to_string()),
        [] => Err("--config FILE is required".to_string()),
        [first, ..] => Err(format!("unexpected argument `{first}`")),
    }
}

fn load(path: &Path) -> Result<inferrail_config::Config, ExitCode> {
    inferrail_config::load_file(path).map_err(|e| {
        match e {
            inferrail_config::ConfigError::Invalid(problems) => {
                eprintln!("inferrail: {} is invalid:", path.display());
                for p in &problems.0 {
                    let at = if p.path.is_empty() { "(file)" } else { &p.path };
                    eprintln!("  {at}: {}", p.message);
                }
            }
            other => eprintln!("inferrail: {other}"),
        }
        ExitCode::from(2)
    })
}

fn serve(path: &Path) -> ExitCode {
    let config = match load(path) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let source = match inferrail_control::ConfigSource::load(path) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("inferrail: {e}");
            return ExitCode::from(2);
        }
    };
    let sighup = match inferrail_control::live_config::sighup_flag() {
        Ok(flag) => Some(flag),
        Err(e) => {
            eprintln!("inferrail: cannot handle SIGHUP ({e}); the config file is still polled");
            None
        }
    };
    let driver = inferrail_dataplane::driver_name();
    if driver != "io_uring" {
        eprintln!("inferrail: io_uring is unavailable; running on the epoll driver");
    }
    let options = inferrail_control::GatewayOptions {
        sighup,
        ..Default::default()
    };
    let gateway = match Gateway::start_with(source, options) {
        Ok(g) => g,
        Err(e) => {
            eprintln!("inferrail: {e}");
            return ExitCode::from(1);
        }
    };
    eprintln!(
        "inferrail: serving on {} with {} data cores ({driver}); admin on {}",
        gateway.listen_addr, gateway.core_count, gateway.admin_addr
    );
    let signal = gateway.shutdown_signal();
    let mut signals = match signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGTERM,
        signal_hook::consts::SIGINT,
    ]) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("inferrail: cannot install signal handlers: {e}");
            gateway.shutdown();
            gateway.wait();
            return ExitCode::from(1);
        }
    };
    let timeout = config.server.shutdown_timeout;
    std::thread::spawn(move || {
        let mut seen = 0;
        for sig in signals.forever() {
            seen += 1;
            if seen == 1 {
                eprintln!(
                    "inferrail: signal {sig}: stopping; running responses get {:?} to finish",
                    timeout
                );
                signal.trigger();
            } else {
                eprintln!("inferrail: second signal: exiting now");
                std::process::exit(130);
            }
        }
    });
    gateway.wait();
    eprintln!("inferrail: stopped");
    ExitCode::SUCCESS
}

/// `inferrail replay-shadow LOG`: prints a summary; 0 when every pick reproduces, 1 on the first
/// mismatch, 2 when the log cannot be read or has a malformed line.
fn replay_shadow(log: &Path) -> ExitCode {
    match inferrail_control::observe::replay::replay_shadow(log) {
        Ok(report) => match report.mismatch {
            None => {
                println!(
                    "{}: {} shadow decisions in {} jobs ({} lines) all reproduce",
                    log.display(),
                    report.decisions_checked,
                    report.jobs,
                    report.lines
                );
                ExitCode::SUCCESS
            }
            Some(m) => {
                println!(
                    "{}:{}: mismatch after {} matching decisions: {}",
                    log.display(),
                    m.line,
                    report.decisions_checked.saturating_sub(1),
                    m.detail
                );
                ExitCode::from(1)
            }
        },
        Err(e @ inferrail_control::observe::replay::ReplayError::Io { .. }) => {
            eprintln!("inferrail replay-shadow: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("inferrail replay-shadow: {}: {e}", log.display());
            ExitCode::from(2)
        }
    }
}

/// `inferrail demo` and `inferrail calibrate` are offline tools that live in the
/// `inferrail-tools` binary (so the serving binary links neither the simulator nor the fit): runs
/// the one installed beside this binary with the same arguments and returns its exit code.
fn run_tool(cmd: &str, rest: &[String]) -> ExitCode {
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join("inferrail-tools")));
    let Some(tool) = beside.filter(|p| p.is_file()) else {
        eprintln!(
            "inferrail {cmd}: needs the inferrail-tools binary beside inferrail \
             (cargo build -p inferrail-tools, or the same --release profile as inferrail)"
        );
        return ExitCode::from(2);
    };
    match std::process::Command::new(&tool)
        .arg(cmd)
        .args(rest)
        .status()
    {
        Ok(status) => match status.code() {
            Some(code) => ExitCode::from(u8::try_from(code).unwrap_or(1)),
            None => ExitCode::from(1),
        },
        Err(e) => {
            eprintln!("inferrail {cmd}: cannot run {}: {e}", tool.display());
            ExitCode::from(2)
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(cmd) = args.first() else {
        eprint!("{USAGE}");
        return ExitCode::from(2);
    };
    let rest = &args[1..];
    match cmd.as_str() {
        "serve" | "check" => {
            let path = match config_arg(rest) {
                Ok(p) => p,
                Err(e) => {
                    eprintln!("inferrail {cmd}: {e}\n\n{USAGE}");
                    return ExitCode::from(2);
                }
            };
            if cmd == "serve" {
                serve(&path)
            } else {
                match load(&path) {
                    Ok(c) => {
                        // Tokenizers are loaded the way `serve` loads them; one that does not
                        // load leaves its model without predictions, which is a warning, not an
                        // invalid config.
                        let (models, problems) = inferrail_control::prediction::load_tokenizers(&c);
                        for p in &problems {
                            println!("warning: {p}");
                        }
                        println!(
                            "{}: ok ({} models, {} with a tokenizer, {} replicas)",
                            path.display(),
                            c.models.len(),
                            models.len(),
                            c.replicas.len()
                        );
                        ExitCode::SUCCESS
                    }
                    Err(code) => code,
                }
            }
        }
        "demo" | "calibrate" => run_tool(cmd, rest),
        "replay-shadow" => match rest {
            [log] => replay_shadow(Path::new(log)),
            _ => {
                eprintln!("inferrail replay-shadow: expected one LOG file\n\n{USAGE}");
                ExitCode::from(2)
            }
        },
        "--version" | "-V" => {
            println!("inferrail {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
        "--help" | "-h" | "help" => {
            print!("{USAGE}");
            ExitCode::SUCCESS
        }
        other => {
            eprintln!("inferrail: unknown command `{other}`\n\n{USAGE}");
            ExitCode::from(2)
        }
    }
}
