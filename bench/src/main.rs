//! `inferrail-bench`: the benchmark harness's command line. Today it has one command, `load`.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

use std::process::ExitCode;

use inferrail_bench::{parse_load_args, run, ArgsError, LOAD_USAGE};

const USAGE: &str =
    "usage: inferrail-bench load --url URL --rate R [options]   (load --help for more)";

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    match args.next().as_deref() {
        Some("load") => load(args),
        Some("-h" | "--help" | "help") => {
            println!("{USAGE}");
            ExitCode::SUCCESS
        }
        Some(other) => {
            eprintln!("unknown command {other:?}\n{USAGE}");
            ExitCode::from(2)
        }
        None => {
            eprintln!("{USAGE}");
            ExitCode::from(2)
        }
    }
}

fn load(args: impl Iterator<Item = String>) -> ExitCode {
    let parsed = match parse_load_args(args) {
        Ok(parsed) => parsed,
        Err(ArgsError::Help) => {
            print!("{LOAD_USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("inferrail-bench load: {e}\n\n{LOAD_USAGE}");
            return ExitCode::from(2);
        }
    };
    let report = match run(&parsed.config) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("inferrail-bench load: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("{report}");
    if let Some(path) = &parsed.json {
        let written = serde_json::to_vec_pretty(&report)
            .map_err(std::io::Error::other)
            .and_then(|mut json| {
                json.push(b'\n');
                std::fs::write(path, json)
            });
        if let Err(e) = written {
            eprintln!("inferrail-bench load: writing {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}
