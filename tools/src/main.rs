//! `inferrail-tools`: the offline commands `inferrail demo` and `inferrail calibrate` run (the
//! serving binary starts this one beside it), kept out of the serving binary.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

use std::process::ExitCode;

const USAGE: &str = "\
inferrail-tools: offline tools for the inferrail gateway (also reached as `inferrail demo` and
`inferrail calibrate`)

usage:
  inferrail-tools demo [--requests N]
                                  run a gateway in front of three simulated engines
  inferrail-tools calibrate --url ENGINE [--model NAME] [--out FILE] [--probes N]
                    [--block-size N] [--max-tokens-total N]
                                  measure an idle vLLM engine's prefill time (TTFT from its
                                  /metrics) over prompts of known cached and uncached length,
                                  fit the cost model and print its YAML (routing.cost_model,
                                  or models[NAME].cost_model with --model); exit 1 on errors
  inferrail-tools kv-events --endpoint tcp://HOST:PORT [--topic T] [--count N] [--timeout SECS]
                                  subscribe to an engine's KV events and print each batch as a
                                  JSON line; exit 1 when nothing arrives within --timeout
                                  (default 10) or the subscription fails
";

/// `inferrail-tools kv-events ...`: 2 on a usage error, 1 when the stream fails or stays silent.
fn kv_events(args: &[String]) -> ExitCode {
    use inferrail_tools::kv_watch::{self, WatchError};
    let result =
        kv_watch::parse_args(args).and_then(|o| kv_watch::run(&o, &mut std::io::stdout().lock()));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(WatchError::Usage(e)) => {
            eprintln!("inferrail-tools kv-events: {e}\n\n{USAGE}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("inferrail-tools kv-events: {e}");
            ExitCode::from(1)
        }
    }
}

/// `inferrail calibrate ...`: the fit's table on stderr, the YAML fragment on stdout (or
/// `--out`); 2 on a usage error, 1 when calibration fails.
fn calibrate(args: &[String]) -> ExitCode {
    use inferrail_tools::calibrate::{self as cal, CalibrateError};
    let opts = match cal::parse_args(args) {
        Ok(o) => o,
        Err(CalibrateError::Usage(e)) => {
            eprintln!("inferrail calibrate: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("inferrail calibrate: {e}");
            return ExitCode::from(1);
        }
    };
    let result = cal::run(&opts).and_then(|report| {
        eprint!("{}", report.summary());
        cal::emit(
            &cal::fragment(&report, opts.model.as_deref()),
            opts.out.as_deref(),
        )
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("inferrail calibrate: {e}");
            ExitCode::from(1)
        }
    }
}

/// `inferrail demo [--requests N]`: 0 when every client request succeeded, 1 otherwise.
fn demo(rest: &[String]) -> ExitCode {
    let requests = match rest {
        [] => 6,
        [flag, n] if flag == "--requests" => match n.parse() {
            Ok(n) => n,
            Err(_) => {
                eprintln!("inferrail demo: --requests needs a number");
                return ExitCode::from(2);
            }
        },
        _ => {
            eprint!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match inferrail_tools::demo::run(requests) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("inferrail demo: {e}");
            ExitCode::from(1)
        }
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.split_first() {
        Some((cmd, rest)) if cmd == "demo" => demo(rest),
        Some((cmd, rest)) if cmd == "calibrate" => calibrate(rest),
        Some((cmd, rest)) if cmd == "kv-events" => kv_events(rest),
        Some((cmd, _)) if cmd == "--help" || cmd == "-h" || cmd == "help" => {
            print!("{USAGE}");
            ExitCode::SUCCESS
        }
        Some((other, _)) => {
            eprintln!("inferrail-tools: unknown command `{other}`\n\n{USAGE}");
            ExitCode::from(2)
        }
        None => {
            eprint!("{USAGE}");
            ExitCode::from(2)
        }
    }
}
