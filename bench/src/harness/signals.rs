//! Stops every fleet when the harness is told to stop. The simulators and fronts are child
//! processes: a `kill` of `sweep`, `knee` or `compare` would otherwise leave them running
//! (SIGINT from a terminal reaches them through the process group; SIGTERM does not).

use std::sync::atomic::{AtomicBool, Ordering};

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

/// Set by the signal thread before it kills the fleet: from then on the command's own errors
/// (a run whose simulators just died) are consequences of the stop, not its outcome.
static STOPPING: AtomicBool = AtomicBool::new(false);

/// Starts the thread that, on the first SIGTERM, SIGINT or SIGHUP, kills and reaps every
/// fleet process ([`super::fleet::kill_every_child`]) and exits with 128 + the signal's
/// number. Fails only when the handlers cannot be registered or the thread cannot start.
pub fn stop_fleets_on_signal() -> std::io::Result<()> {
    let mut signals = Signals::new([SIGTERM, SIGINT, SIGHUP])?;
    std::thread::Builder::new()
        .name("harness-signals".into())
        .spawn(move || {
            if let Some(signal) = signals.forever().next() {
                STOPPING.store(true, Ordering::SeqCst);
                let stopped = super::fleet::kill_every_child();
                eprintln!(
                    "[harness] signal {signal}: stopped {stopped} fleet processes; exiting \
                     (a finished run's result is kept, the run in progress is not)"
                );
                std::process::exit(128 + signal);
            }
        })?;
    Ok(())
}

/// The command's outcome, unless a signal is stopping the harness: then the calling thread
/// waits for the signal thread, which reaps the fleet and exits with 128 + the signal's number.
/// Returning first would report (and exit with) the failure the stop caused, before the fleet
/// is reaped.
pub fn unless_stopping<T>(outcome: T) -> T {
    if STOPPING.load(Ordering::SeqCst) {
        loop {
            std::thread::park();
        }
    }
    outcome
}
