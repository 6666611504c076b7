//! The control thread: one monoio runtime off the data cores that runs the controller's tasks
//! (request reports, ticks, config file polling and SIGHUP, replica workers) and the admin
//! listener.

use crate::admin::listener;
use crate::controller::{Controller, Seed};
use crate::live_config::{take_sighup, FilePoller, Refusal};
use inferrail_dataplane::reports::ReportQueue;
use inferrail_dataplane::ShutdownSignal;
use monoio::net::TcpListener;
use std::cell::RefCell;
use std::rc::Rc;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The longest the tick loop sleeps: SIGHUP and discovery results are noticed within this.
/// Ejection ends and config-file polls wake it at their own deadlines.
pub const MAX_TICK_GAP: Duration = Duration::from_millis(100);

/// What the control thread runs with.
pub struct ControlInputs {
    /// The controller's starting state.
    pub seed: Seed,
    /// The bound admin listener.
    pub admin: std::net::TcpListener,
    /// Request reports from the cores.
    pub reports: Arc<ReportQueue>,
    /// Stops the thread.
    pub shutdown: Arc<ShutdownSignal>,
    /// Set on SIGHUP, when the process handles it.
    pub sighup: Option<Arc<AtomicBool>>,
}

/// Starts the control thread.
pub fn spawn(inputs: ControlInputs) -> std::io::Result<JoinHandle<()>> {
    inputs.admin.set_nonblocking(true)?;
    std::thread::Builder::new()
        .name("inferrail-control".into())
        .spawn(move || {
            let rt = monoio::RuntimeBuilder::<monoio::FusionDriver>::new()
                .enable_timer()
                .build();
            let mut rt = match rt {
                Ok(rt) => rt,
                Err(e) => {
                    eprintln!("inferrail: control thread runtime failed: {e}");
                    return;
                }
            };
            rt.block_on(run(inputs));
        })
}

async fn run(inputs: ControlInputs) {
    let ControlInputs {
        seed,
        admin,
        reports,
        shutdown,
        sighup,
    } = inputs;
    let listener = match TcpListener::from_std(admin) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("inferrail: admin listener failed: {e}");
            return;
        }
    };
    let ctl = Controller::start(seed);
    let reporter = monoio::spawn(report_loop(ctl.clone(), reports, shutdown.clone()));
    let ticker = monoio::spawn(tick_loop(ctl.clone(), sighup, shutdown.clone()));
    listener::serve(listener, Rc::downgrade(&ctl), shutdown.wait()).await;
    reporter.await;
    ticker.await;
    // The last strong reference: the replica workers stop and the observer references go.
    drop(ctl);
}

async fn report_loop(
    ctl: Rc<RefCell<Controller>>,
    reports: Arc<ReportQueue>,
    shutdown: Arc<ShutdownSignal>,
) {
    let mut stop = std::pin::pin!(shutdown.wait());
    loop {
        monoio::select! {
            _ = &mut stop => break,
            batch = reports.next_batch() => ctl.borrow_mut().on_reports(&batch),
        }
    }
}

async fn tick_loop(
    ctl: Rc<RefCell<Controller>>,
    sighup: Option<Arc<AtomicBool>>,
    shutdown: Arc<ShutdownSignal>,
) {
    let interval = ctl.borrow().store.config().server.reload_interval;
    let has_file = ctl.borrow().store.path().is_some();
    let mut poller = FilePoller::new(
        if has_file { interval } else { Duration::ZERO },
        Instant::now(),
    );
    let mut stop = std::pin::pin!(shutdown.wait());
    let bell = ctl.borrow().tick_bell.clone();
    loop {
        let next = {
            let c = ctl.borrow();
            let next = c.next_tick(Instant::now(), MAX_TICK_GAP);
            poller.next_due().map_or(next, |due| next.min(due))
        };
        monoio::select! {
            _ = &mut stop => break,
            _ = monoio::time::sleep_until(next.into()) => {}
            _ = bell.rung() => continue,
        }
        let now = Instant::now();
        let mut c = ctl.borrow_mut();
        let hup = sighup.as_deref().is_some_and(take_sighup);
        if has_file && (hup || poller.due(now)) {
            if hup {
                eprintln!("inferrail: SIGHUP: re-reading the config file");
            }
            match c.reload_file(now) {
                Ok(_) => {}
                Err(refusal) => {
                    let label = match refusal {
                        Refusal::Invalid(_) => "invalid",
                        Refusal::RestartRequired(_) => "restart_required",
                        Refusal::Io(_) | Refusal::NoFile => "error",
                    };
                    c.count_reload(label);
                    eprintln!("inferrail: {refusal}");
                }
            }
            let interval = c.store.config().server.reload_interval;
            poller.set_interval(interval, now);
        }
        c.tick(now);
    }
}
