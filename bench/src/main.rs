//! `inferrail-bench`: the benchmark harness's command line: `load` (open-loop requests at a
//! rate), `run` (a named workload open loop, streamed and measured) and `streams` (N concurrent
//! SSE streams released at once).
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

use std::process::ExitCode;

use inferrail_bench::{
    parse_load_args, parse_run_args, parse_streams_args, run, run_streams, run_workload, ArgsError,
    LOAD_USAGE, RUN_USAGE, STREAMS_USAGE,
};

const USAGE: &str = "\
usage: inferrail-bench load --url URL --rate R [options]          (load --help for more)
       inferrail-bench run --url URL --workload W --rate R [options] (run --help for more)
       inferrail-bench streams --url URL --streams N [options]    (streams --help for more)
       inferrail-bench compare --workload W --rate R --policies a,b (compare --help for more)
       inferrail-bench sweep FILE.toml [--jobs N] [--out DIR]     (sweep --help for more)
       inferrail-bench knee [SPEC.toml] --workload W --front F --low R --high R (knee --help)
       inferrail-bench report DIR [--out REPORT.md]              (report --help for more)";

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    match args.next().as_deref() {
        Some("load") => load(args),
        Some("run") => run_cmd(args),
        Some("streams") => streams(args),
        Some("compare") => inferrail_bench::harness::cli::compare_main(args),
        Some("sweep") => inferrail_bench::harness::cli::sweep_main(args),
        Some("knee") => inferrail_bench::harness::cli::knee_main(args),
        Some("report") => report_cmd(args),
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
    write_json(parsed.json.as_deref(), &report, "load")
}

fn run_cmd(args: impl Iterator<Item = String>) -> ExitCode {
    let parsed = match parse_run_args(args) {
        Ok(parsed) => parsed,
        Err(ArgsError::Help) => {
            print!("{RUN_USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("inferrail-bench run: {e}\n\n{RUN_USAGE}");
            return ExitCode::from(2);
        }
    };
    let report = match run_workload(&parsed.config) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("inferrail-bench run: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("{report}");
    write_json(parsed.json.as_deref(), &report, "run")
}

fn streams(args: impl Iterator<Item = String>) -> ExitCode {
    let parsed = match parse_streams_args(args) {
        Ok(parsed) => parsed,
        Err(ArgsError::Help) => {
            print!("{STREAMS_USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("inferrail-bench streams: {e}\n\n{STREAMS_USAGE}");
            return ExitCode::from(2);
        }
    };
    let report = match run_streams(&parsed.config) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("inferrail-bench streams: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("{report}");
    write_json(parsed.json.as_deref(), &report, "streams")
}

/// Writes `report` as pretty JSON to `path` when one is given.
fn write_json(
    path: Option<&std::path::Path>,
    report: &impl serde::Serialize,
    cmd: &str,
) -> ExitCode {
    if let Some(path) = path {
        let written = serde_json::to_vec_pretty(report)
            .map_err(std::io::Error::other)
            .and_then(|mut json| {
                json.push(b'\n');
                std::fs::write(path, json)
            });
        if let Err(e) = written {
            eprintln!("inferrail-bench {cmd}: writing {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    }
    ExitCode::SUCCESS
}

/// `report DIR [--out REPORT.md]`: the Markdown report and its charts from result files.
fn report_cmd(args: impl Iterator<Item = String>) -> ExitCode {
    use inferrail_bench::report_md::{parse_report_args, write_report, REPORT_USAGE};
    let parsed = match parse_report_args(args) {
        Ok(parsed) => parsed,
        Err(ArgsError::Help) => {
            print!("{REPORT_USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("inferrail-bench report: {e}\n\n{REPORT_USAGE}");
            return ExitCode::from(2);
        }
    };
    match write_report(&parsed) {
        Ok(path) => {
            println!("wrote {}", path.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("inferrail-bench report: {e}");
            ExitCode::FAILURE
        }
    }
}
