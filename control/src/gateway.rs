//! A running gateway: data cores plus the control thread, started from a validated config.

use crate::control_thread::{self, ControlInputs};
use crate::controller::{self, CoreLinks, Observers, Seed, DISCOVERY_START_WAIT};
use crate::fleet::discovery::{Discovery, Resolver, SystemResolver};
use crate::fleet::registry::{static_replicas, Registry, ResolveError};
use crate::live_config::ConfigStore;
use crate::observe::decision_log::{spawn_decision_log, DecisionLogHandle};
use crate::observe::shadow::{spawn_shadow, ShadowHandle};
use inferrail_config::{Config, ConfigError, Count};
use inferrail_dataplane::core_stats::{BrainStats, CoreStats, PredictionStats};
use inferrail_dataplane::cores::CoreWiring;
use inferrail_dataplane::fleet::FleetClock;
use inferrail_dataplane::metrics::MetricsEpoch;
use inferrail_dataplane::observe::sink_pair;
use inferrail_dataplane::reports::ReportQueue;
use inferrail_dataplane::snapshot::{ConfigPart, ReplicaLive};
use inferrail_dataplane::{start_cores, CoreOptions, CoreSet, ShutdownSignal, Snapshot};
use inferrail_routing::FleetFacts;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::thread::JoinHandle;

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// A replica's host name does not resolve.
    #[error(transparent)]
    Resolve(#[from] ResolveError),
    /// The config could not be read or is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// An observer or discovery thread did not start.
    #[error("cannot start {what}: {source}")]
    Thread {
        /// Which thread.
        what: &'static str,
        /// OS error.
        #[source]
        source: std::io::Error,
    },
    /// The data cores did not start.
    #[error(transparent)]
    Cores(#[from] inferrail_dataplane::StartError),
    /// The tokenizer pool or the index shards did not start.
    #[error(transparent)]
    Prediction(#[from] crate::prediction::PredictionError),
    /// The admin listener did not start.
    #[error("cannot start the admin listener on {addr}: {source}")]
    Admin {
        /// Address.
        addr: SocketAddr,
        /// OS error.
        #[source]
        source: std::io::Error,
    },
}

/// A config with the document it was read from (what the admin API shows and patches) and the
/// file it came from, if any (what reloads re-read).
#[derive(Debug, Clone)]
pub struct ConfigSource {
    /// The validated config.
    pub config: Config,
    /// Its document.
    pub document: serde_json::Value,
    /// The file, when there is one.
    pub path: Option<PathBuf>,
}

impl ConfigSource {
    /// A config from YAML text (no file: reloads are refused, PATCH works).
    pub fn from_yaml(text: &str) -> Result<ConfigSource, ConfigError> {
        let config = inferrail_config::parse_str(text)?;
        let document = inferrail_config::document_of_yaml(text)?;
        Ok(ConfigSource {
            config,
            document,
            path: None,
        })
    }

    /// A config from a file, which reloads re-read.
    pub fn load(path: &Path) -> Result<ConfigSource, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Io {
            path: path.display().to_string(),
            source,
        })?;
        let mut source = ConfigSource::from_yaml(&text)?;
        source.path = Some(path.to_path_buf());
        Ok(source)
    }
}

/// How to start a gateway beyond its config.
#[derive(Clone, Default)]
pub struct GatewayOptions {
    /// Resolver for DNS discovery (the system resolver when `None`).
    pub resolver: Option<Arc<dyn Resolver>>,
    /// Set on SIGHUP: the control thread re-reads the config file when it is.
    pub sighup: Option<Arc<AtomicBool>>,
}

/// A running gateway. Dropping it does not stop it; call [`Gateway::shutdown`] then
/// [`Gateway::wait`].
pub struct Gateway {
    cores: CoreSet,
    control: JoinHandle<()>,
    /// The observer threads, released last so their logs are complete when `wait` returns.
    observers: (Option<Arc<ShadowHandle>>, Option<Arc<DecisionLogHandle>>),
    shutdown: Arc<ShutdownSignal>,
    /// The client listen address (real port).
    pub listen_addr: SocketAddr,
    /// The admin listen address (real port).
    pub admin_addr: SocketAddr,
    /// Number of data cores running.
    pub core_count: usize,
}

/// Number of data cores for `count`: `auto` is every CPU this process may run on.
pub fn resolve_cores(count: Count) -> usize {
    let available = std::thread::available_parallelism().map_or(1, |n| n.get());
    count.resolve(available).max(1)
}

impl Gateway {
    /// Starts data cores and the control thread. Returns once both listeners accept.
    pub fn start(source: ConfigSource) -> Result<Gateway, GatewayError> {
        Gateway::start_with(source, GatewayOptions::default())
    }

    /// [`Gateway::start`] with a resolver and a SIGHUP flag.
    pub fn start_with(
        source: ConfigSource,
        options: GatewayOptions,
    ) -> Result<Gateway, GatewayError> {
        let config = source.config;
        let created = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let part = ConfigPart::from_config(&config, 1, created);
        let resolver: Arc<dyn Resolver> =
            options.resolver.unwrap_or_else(|| Arc::new(SystemResolver));
        let (discovery, discovered) = if config.discovery.dns.is_empty() {
            (None, Vec::new())
        } else {
            let d = Discovery::start(config.discovery.dns.clone(), resolver.clone()).map_err(
                |source| GatewayError::Thread {
                    what: "DNS discovery",
                    source,
                },
            )?;
            let members = d.resolve_now_blocking(DISCOVERY_START_WAIT);
            (Some(d), members)
        };
        let statics = static_replicas(&config)?;
        let mut registry = Registry::new();
        registry.update(controller::wanted_members(statics.clone(), &discovered));
        let core_count = resolve_cores(config.server.cores);
        let epoch = MetricsEpoch::new(controller::layout_of(&part, &registry), core_count);
        let replicas = registry
            .members()
            .iter()
            .map(|m| {
                (
                    m.spec.clone(),
                    ReplicaLive {
                        routable: true,
                        ..ReplicaLive::default()
                    },
                )
            })
            .collect();
        let snapshot = Arc::new(Snapshot::assemble(&part, replicas, 1, epoch));
        let seed = config
            .routing
            .seed
            .unwrap_or(created ^ u64::from(std::process::id()));

        // Observers: a shadow worker always (models may gain shadow policies live), a decision
        // log writer when configured.
        let (shadow_sinks, shadow_rx) = sink_pair(4096, core_count);
        let shadow_dropped = shadow_sinks.iter().map(|s| s.dropped_counter()).collect();
        let shadow = spawn_shadow(shadow_rx, seed, config.observability.shadow_log.clone())
            .map(Arc::new)
            .map_err(|source| GatewayError::Thread {
                what: "the shadow worker",
                source,
            })?;
        let log_prompts = Arc::new(AtomicBool::new(config.logging.log_prompts));
        let (decision_sinks, decision_log, decision_dropped) =
            match &config.observability.decision_log {
                Some(d) => {
                    let (sinks, rx) = sink_pair(4096, core_count);
                    let dropped = sinks.iter().map(|s| s.dropped_counter()).collect();
                    let handle = spawn_decision_log(rx, d.path.clone(), log_prompts.clone())
                        .map_err(|source| GatewayError::Thread {
                            what: "the decision log",
                            source,
                        })?;
                    (sinks, Some(Arc::new(handle)), dropped)
                }
                None => (Vec::new(), None, Vec::new()),
            };
        let (predictor, problems) = crate::prediction::build(&config, core_count)?;
        for p in &problems {
            eprintln!("inferrail: {p}");
        }
        let prediction_stats: Vec<Arc<PredictionStats>> = (0..core_count)
            .map(|_| Arc::new(PredictionStats::default()))
            .collect();
        let brain_stats: Vec<Arc<BrainStats>> = (0..core_count)
            .map(|_| Arc::new(BrainStats::default()))
            .collect();
        let fleet = Arc::new(FleetFacts::new(config.routing.hot_prefix.window));
        let fleet_clock = FleetClock::start();
        let reports = Arc::new(ReportQueue::new(65_536));
        let stats: Vec<Arc<CoreStats>> = (0..core_count)
            .map(|_| Arc::new(CoreStats::new()))
            .collect();

        let shutdown = ShutdownSignal::new();
        let cores = start_cores(
            CoreOptions {
                cores: core_count,
                listen: config.server.listen,
                pin: true,
                seed,
                shutdown_timeout: config.server.shutdown_timeout,
            },
            snapshot.clone(),
            CoreWiring {
                reports: reports.clone(),
                shadow: shadow_sinks,
                decisions: decision_sinks,
                stats: stats.clone(),
                predictor: predictor.clone(),
                prediction_stats: prediction_stats.clone(),
                fleet: fleet.clone(),
                fleet_clock,
                brain_stats: brain_stats.clone(),
            },
            shutdown.clone(),
        )?;
        let listen_addr = cores.local_addr;
        let admin_listen = config.server.admin_listen;
        let fail = |shutdown: &Arc<ShutdownSignal>, cores: CoreSet, source| {
            shutdown.trigger();
            cores.join();
            GatewayError::Admin {
                addr: admin_listen,
                source,
            }
        };
        let admin = match std::net::TcpListener::bind(admin_listen) {
            Ok(l) => l,
            Err(e) => return Err(fail(&shutdown, cores, e)),
        };
        let admin_addr = match admin.local_addr() {
            Ok(a) => a,
            Err(e) => return Err(fail(&shutdown, cores, e)),
        };
        let store = ConfigStore::new(source.path, source.document, config);
        let control_seed = Seed {
            store,
            part,
            created_unix: created,
            registry,
            discovery,
            resolver,
            discovered,
            statics,
            first: snapshot,
            cores: CoreLinks {
                mailboxes: cores.mailboxes.clone(),
                doorbells: cores.doorbells.clone(),
            },
            log_prompts,
            observers: Observers {
                shadow: Some(shadow.clone()),
                shadow_dropped,
                decision_log: decision_log.clone(),
                decision_dropped,
                reports: reports.clone(),
                stats,
                predictor,
                prediction_stats,
                fleet,
                fleet_clock,
                brain_stats,
            },
        };
        let control = match control_thread::spawn(ControlInputs {
            seed: control_seed,
            admin,
            reports,
            shutdown: shutdown.clone(),
            sighup: options.sighup,
        }) {
            Ok(h) => h,
            Err(e) => return Err(fail(&shutdown, cores, e)),
        };
        Ok(Gateway {
            cores,
            control,
            observers: (Some(shadow), decision_log),
            shutdown,
            listen_addr,
            admin_addr,
            core_count,
        })
    }

    /// Starts a graceful shutdown: listeners close at once, running responses get
    /// `server.shutdown_timeout` to finish.
    pub fn shutdown(&self) {
        self.shutdown.trigger();
    }

    /// The signal that stops this gateway (to fire it from a signal handler thread).
    pub fn shutdown_signal(&self) -> Arc<ShutdownSignal> {
        self.shutdown.clone()
    }

    /// Waits until every core and the control thread have stopped, then stops the observer
    /// threads, which write out everything the cores handed them.
    pub fn wait(self) {
        self.cores.join();
        let _ = self.control.join();
        let (shadow, decisions) = self.observers;
        for (what, result) in [
            (
                "shadow log",
                shadow
                    .and_then(|h| Arc::try_unwrap(h).ok())
                    .map(ShadowHandle::stop),
            ),
            (
                "decision log",
                decisions
                    .and_then(|h| Arc::try_unwrap(h).ok())
                    .map(DecisionLogHandle::stop),
            ),
        ] {
            if let Some(Err(e)) = result {
                eprintln!("inferrail: {what}: {e}");
            }
        }
    }
}
