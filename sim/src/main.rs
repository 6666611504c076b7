//! `inferrail-sim`: runs the scripted engine standalone, with flags named like `vllm serve`'s.
#![forbid(unsafe_code)]
#![deny(rust_2018_idioms)]

use std::net::IpAddr;
use std::process::ExitCode;
use std::time::Duration;

use inferrail_sim::{Behavior, EngineOptions, ScriptedEngine};

const USAGE: &str = "\
usage: inferrail-sim [--host HOST] [--port PORT] [--served-model-name NAME] [--zero-latency]

An OpenAI-compatible engine that answers like vLLM (shapes, not yet bytes or timing).

  --host HOST                address to listen on (default 127.0.0.1)
  --port PORT                TCP port (default 8000)
  --served-model-name NAME   the model name clients must use (default sim-llama)
  --zero-latency             answer every request at once (for gateway overhead benchmarks);
                             without it, responses stream 16 tokens 20 ms apart
  -h, --help                 print this help
";

/// Parsed command line.
#[derive(Debug, PartialEq)]
struct Args {
    host: IpAddr,
    port: u16,
    model: String,
    zero_latency: bool,
}

/// What the command line asks for.
#[derive(Debug, PartialEq)]
enum Command {
    Run(Args),
    Help,
}

fn parse(args: impl IntoIterator<Item = String>) -> Result<Command, String> {
    let mut out = Args {
        host: IpAddr::from([127, 0, 0, 1]),
        port: 8000,
        model: "sim-llama".to_owned(),
        zero_latency: false,
    };
    let mut it = args.into_iter();
    while let Some(arg) = it.next() {
        let (flag, inline) = match arg.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f.to_owned(), Some(v.to_owned())),
            _ => (arg.clone(), None),
        };
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
                out.host = v
                    .parse()
                    .map_err(|_| format!("--host: not an IP address: {v}"))?;
            }
            "--port" => {
                let v = value("--port")?;
                out.port = v
                    .parse()
                    .map_err(|_| format!("--port: not a port number: {v}"))?;
            }
            "--served-model-name" => {
                let v = value("--served-model-name")?;
                if v.is_empty() {
                    return Err("--served-model-name: empty name".to_owned());
                }
                out.model = v;
            }
            "--zero-latency" if inline.is_none() => out.zero_latency = true,
            _ => return Err(format!("unknown argument: {arg}")),
        }
    }
    Ok(Command::Run(out))
}

fn main() -> ExitCode {
    let args = match parse(std::env::args().skip(1)) {
        Ok(Command::Run(a)) => a,
        Ok(Command::Help) => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("inferrail-sim: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let behavior = if args.zero_latency {
        Behavior::Instant
    } else {
        // A stand-in until the latency model lands.
        Behavior::Stream {
            chunks: 16,
            interval: Duration::from_millis(20),
        }
    };
    let opts = EngineOptions {
        port: args.port,
        model: args.model.clone(),
        behavior,
        record: false,
    };
    let engine = match ScriptedEngine::start_on(args.host, opts) {
        Ok(e) => e,
        Err(e) => {
            eprintln!(
                "inferrail-sim: cannot listen on {}:{}: {e}",
                args.host, args.port
            );
            return ExitCode::FAILURE;
        }
    };
    println!(
        "inferrail-sim listening on {} (model {}, {})",
        engine.url(),
        args.model,
        if args.zero_latency {
            "zero latency"
        } else {
            "16 tokens 20 ms apart"
        }
    );
    // The engine runs on its own thread; SIGINT/SIGTERM end the process.
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
            (a.port, a.model.as_str(), a.zero_latency),
            (8000, "sim-llama", false)
        );
        assert_eq!(a.host.to_string(), "127.0.0.1");
        let Ok(Command::Run(a)) = run(&[
            "--host",
            "0.0.0.0",
            "--port=9001",
            "--served-model-name",
            "tiny",
            "--zero-latency",
        ]) else {
            panic!()
        };
        assert_eq!(
            (a.port, a.model.as_str(), a.zero_latency),
            (9001, "tiny", true)
        );
        assert_eq!(a.host.to_string(), "0.0.0.0");
        assert_eq!(run(&["--help"]), Ok(Command::Help));
        assert!(run(&["--port"]).is_err());
        assert!(run(&["--port", "x"]).is_err());
        assert!(run(&["--nope"]).is_err());
    }
}
