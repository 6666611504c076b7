//! A running gateway: data cores plus the control thread, started from a validated config.

use crate::admin;
use inferrail_config::{Config, Count};
use inferrail_dataplane::metrics::MetricsLayout;
use inferrail_dataplane::{start_cores, CoreOptions, CoreSet, ShutdownSignal, Snapshot};
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::Arc;
use std::thread::JoinHandle;

/// Why the gateway could not start.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// A replica's host name does not resolve.
    #[error("replicas[{index}].url: cannot resolve {authority}: {reason}")]
    Resolve {
        /// Replica index in config.
        index: usize,
        /// host:port.
        authority: String,
        /// Why.
        reason: String,
    },
    /// A configured feature this release does not provide yet.
    #[error("{path}: {message}")]
    Unsupported {
        /// Config path.
        path: &'static str,
        /// What is missing.
        message: &'static str,
    },
    /// The config cannot become a routing snapshot.
    #[error(transparent)]
    Snapshot(#[from] inferrail_dataplane::SnapshotError),
    /// The data cores did not start.
    #[error(transparent)]
    Cores(#[from] inferrail_dataplane::StartError),
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

/// A running gateway. Dropping it does not stop it; call [`Gateway::shutdown`] then
/// [`Gateway::wait`].
pub struct Gateway {
    cores: CoreSet,
    control: JoinHandle<()>,
    shutdown: Arc<ShutdownSignal>,
    /// The client listen address (real port).
    pub listen_addr: SocketAddr,
    /// The admin listen address (real port).
    pub admin_addr: SocketAddr,
    /// Number of data cores running.
    pub core_count: usize,
}

fn resolve_replicas(config: &Config) -> Result<Vec<SocketAddr>, GatewayError> {
    config
        .replicas
        .iter()
        .enumerate()
        .map(|(index, r)| {
            let authority = r.url.authority();
            let mut addrs = (r.url.host.as_str(), r.url.port)
                .to_socket_addrs()
                .map_err(|e| GatewayError::Resolve {
                    index,
                    authority: authority.clone(),
                    reason: e.to_string(),
                })?;
            addrs.next().ok_or(GatewayError::Resolve {
                index,
                authority,
                reason: "no address".into(),
            })
        })
        .collect()
}

/// Number of data cores for `count`: `auto` is every CPU this process may run on.
pub fn resolve_cores(count: Count) -> usize {
    let available = std::thread::available_parallelism().map_or(1, |n| n.get());
    count.resolve(available).max(1)
}

impl Gateway {
    /// Starts data cores and the control thread for `config`. Returns once both listeners accept.
    pub fn start(config: &Config) -> Result<Gateway, GatewayError> {
        if !config.discovery.dns.is_empty() {
            return Err(GatewayError::Unsupported {
                path: "discovery.dns",
                message: "DNS discovery is not implemented in this release; list replicas under `replicas`",
            });
        }
        let addrs = resolve_replicas(config)?;
        let created = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let snapshot = Arc::new(Snapshot::build(config, &addrs, 1, created)?);
        let layout = Arc::new(MetricsLayout {
            models: config.models.iter().map(|m| m.name.clone()).collect(),
            replicas: config.replicas.iter().map(|r| r.id.clone()).collect(),
        });
        let seed = config
            .routing
            .seed
            .unwrap_or(created ^ u64::from(std::process::id()));
        let core_count = resolve_cores(config.server.cores);
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
            layout.clone(),
            shutdown.clone(),
        )?;
        let listen_addr = cores.local_addr;
        let admin_state = admin::AdminState {
            layout,
            recorders: cores.recorders.clone(),
            snapshot,
        };
        let (control, admin_addr) =
            match admin::spawn(config.server.admin_listen, admin_state, shutdown.clone()) {
                Ok(ok) => ok,
                Err(source) => {
                    shutdown.trigger();
                    cores.join();
                    return Err(GatewayError::Admin {
                        addr: config.server.admin_listen,
                        source,
                    });
                }
            };
        Ok(Gateway {
            cores,
            control,
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

    /// Waits until every core and the control thread have stopped.
    pub fn wait(self) {
        self.cores.join();
        let _ = self.control.join();
    }
}
