//! Socket operations monoio does not offer: noticing that a client went away while the gateway
//! waits on an engine, and shutting a socket down from outside the task that owns it.
//!
//! A readiness poll on the client socket costs nothing to cancel (unlike an in-flight read, which
//! could swallow pipelined bytes), and a `MSG_PEEK` tells a close from pipelined data.

use monoio::net::TcpStream;
use std::os::fd::{AsRawFd, RawFd};

/// Watches one client connection for the duration of one proxied exchange.
pub(crate) struct ClientWatch {
    active: bool,
    /// When the readiness poll starts; `None` once it has (see [`ClientWatch::closed`]).
    arm_at: Option<std::time::Instant>,
}

/// How long an exchange runs before the client socket is watched for a close.
pub(crate) const ARM_DELAY: std::time::Duration = std::time::Duration::from_millis(20);

/// What a peek at a readable client socket found.
enum Peek {
    Closed,
    Data,
    Nothing,
}

fn peek(stream: &TcpStream) -> Peek {
    let mut byte = [0u8; 1];
    // SAFETY: `fd` is a valid open socket owned by `stream` for this call's duration; the buffer
    // is a live 1-byte stack array; MSG_PEEK leaves the data in the socket and MSG_DONTWAIT
    // keeps the call non-blocking whatever mode the driver put the socket in.
    let n = unsafe {
        libc::recv(
            stream.as_raw_fd(),
            byte.as_mut_ptr().cast(),
            1,
            libc::MSG_PEEK | libc::MSG_DONTWAIT,
        )
    };
    match n {
        0 => Peek::Closed,
        n if n > 0 => Peek::Data,
        _ => match std::io::Error::last_os_error().kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted => Peek::Nothing,
            _ => Peek::Closed,
        },
    }
}

impl ClientWatch {
    /// A watch for a client that has not sent anything beyond the current request (`active`),
    /// armed [`ARM_DELAY`] after `started`.
    pub(crate) fn new(active: bool, started: std::time::Instant) -> ClientWatch {
        ClientWatch {
            active,
            arm_at: Some(started + ARM_DELAY),
        }
    }

    /// When the watch wants to be armed, if it still does. Most exchanges with a fast engine end
    /// before that, and then cost no poll and no cancellation; the driver folds this instant into
    /// the one timer it already sleeps on, so waiting for it costs no timer of its own either.
    pub(crate) fn arm_at(&self) -> Option<std::time::Instant> {
        self.arm_at.filter(|_| self.active)
    }

    /// Starts watching: from now on [`ClientWatch::closed`] polls the socket.
    pub(crate) fn arm(&mut self) {
        self.arm_at = None;
    }

    /// Completes when the client has closed or reset its connection, once armed; never before
    /// (the driver arms it at [`ClientWatch::arm_at`]). If the client sends more bytes (a
    /// pipelined request) the watch stops: those bytes stay in the socket for later. A close is
    /// noticed within [`ARM_DELAY`] plus one wake-up.
    pub(crate) async fn closed(&mut self, stream: &TcpStream) {
        while self.active && self.arm_at.is_none() {
            if stream.readable(false).await.is_err() {
                return;
            }
            match peek(stream) {
                Peek::Closed => return,
                Peek::Data => self.active = false,
                Peek::Nothing => {}
            }
        }
        std::future::pending::<()>().await
    }
}

/// Shuts both directions of socket `fd` down, so every pending read, write or readiness poll on it
/// completes at once (the owning task then sees an error or end of file and closes it). Used to
/// end connections at shutdown; `fd` must belong to a connection that is still registered.
pub(crate) fn shutdown_socket(fd: RawFd) {
    // SAFETY: shutdown(2) only changes the state of the socket behind `fd`; it never frees the
    // descriptor or touches memory. The caller holds `fd` registered while its owner is alive,
    // so it still refers to that connection's socket.
    unsafe {
        libc::shutdown(fd, libc::SHUT_RDWR);
    }
}
