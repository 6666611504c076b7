//! Socket operations monoio does not offer: noticing that a client went away while the gateway
//! waits on an engine, writing what a socket takes at once without a trip through the ring, and
//! shutting a socket down from outside the task that owns it.
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
const ARM_DELAY: std::time::Duration = std::time::Duration::from_millis(20);

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

/// How much of a buffer [`send_now`] wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SentNow {
    /// All of it.
    All,
    /// The first this many bytes; the socket's send buffer is full (the rest must wait).
    Part(usize),
    /// The connection is broken (reset, closed for writing): nothing more can be sent.
    Failed,
}

/// Writes as much of `bytes` as `stream`'s socket takes right now, without waiting: a
/// non-blocking `sendmsg` loop ([`send_now_pair`] with one buffer). Most writes (a response, a
/// request head and its body) fit the socket's buffer, so the write costs one syscall and no
/// submission, completion and wake-up of the task through the ring. The caller writes any
/// remainder through monoio, and must not have another write on the socket in flight.
pub(crate) fn send_now(stream: &TcpStream, bytes: &[u8]) -> SentNow {
    send_now_pair(stream, bytes, &[])
}

/// [`send_now`] for two buffers written back to back (a request head and its body) with one
/// `sendmsg` per step, so neither is copied into the other. `Part(n)` counts bytes of both, the
/// first buffer's first.
pub(crate) fn send_now_pair(stream: &TcpStream, first: &[u8], second: &[u8]) -> SentNow {
    let total = first.len() + second.len();
    let mut done = 0;
    while done < total {
        let (a, b) = if done < first.len() {
            (&first[done..], second)
        } else {
            (&second[done - first.len()..], &[][..])
        };
        let mut iov = [
            libc::iovec {
                iov_base: a.as_ptr() as *mut libc::c_void,
                iov_len: a.len(),
            },
            libc::iovec {
                iov_base: b.as_ptr() as *mut libc::c_void,
                iov_len: b.len(),
            },
        ];
        // SAFETY: a zeroed msghdr is a valid "no name, no control data" header; it points at
        // `iov`, a live local array of two iovecs that describe live initialised slices the
        // kernel only reads (sendmsg never writes through iov_base).
        let n = unsafe {
            let mut msg: libc::msghdr = std::mem::zeroed();
            msg.msg_iov = iov.as_mut_ptr();
            msg.msg_iovlen = if b.is_empty() { 1 } else { 2 };
            libc::sendmsg(
                stream.as_raw_fd(),
                &msg,
                libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL,
            )
        };
        if n > 0 {
            done += n as usize;
            continue;
        }
        match std::io::Error::last_os_error().kind() {
            std::io::ErrorKind::Interrupted if n < 0 => {}
            std::io::ErrorKind::WouldBlock if n < 0 => return SentNow::Part(done),
            _ => return SentNow::Failed,
        }
    }
    SentNow::All
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    fn runtime() -> monoio::Runtime<monoio::time::TimeDriver<monoio::LegacyDriver>> {
        monoio::RuntimeBuilder::<monoio::LegacyDriver>::new()
            .enable_timer()
            .build()
            .expect("runtime")
    }

    /// A connected pair: the monoio side and the std side of one loopback connection.
    async fn pair() -> (TcpStream, std::net::TcpStream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        let ours = TcpStream::connect_addr(addr).await.expect("connect");
        let (theirs, _) = listener.accept().expect("accept");
        (ours, theirs)
    }

    #[test]
    fn send_now_writes_what_fits_and_says_how_much() {
        runtime().block_on(async {
            let (ours, mut theirs) = pair().await;
            assert_eq!(send_now(&ours, b"hello"), SentNow::All);
            let mut got = [0u8; 5];
            theirs.read_exact(&mut got).expect("read");
            assert_eq!(&got, b"hello");
            // A peer that does not read: the send buffer fills and the rest must wait.
            let big = vec![7u8; 64 << 20];
            match send_now(&ours, &big) {
                SentNow::Part(n) => assert!(n > 0 && n < big.len(), "{n}"),
                other => panic!("expected a partial send, got {other:?}"),
            }
        });
    }

    #[test]
    fn send_now_pair_writes_both_buffers_in_order() {
        runtime().block_on(async {
            let (ours, mut theirs) = pair().await;
            assert_eq!(send_now_pair(&ours, b"head:", b"body"), SentNow::All);
            assert_eq!(send_now_pair(&ours, b"", b"+"), SentNow::All);
            let mut got = [0u8; 10];
            theirs.read_exact(&mut got).expect("read");
            assert_eq!(&got, b"head:body+");
            let big = vec![1u8; 64 << 20];
            match send_now_pair(&ours, b"h", &big) {
                SentNow::Part(n) => assert!(n > 1 && n < big.len() + 1, "{n}"),
                other => panic!("expected a partial send, got {other:?}"),
            }
        });
    }

    #[test]
    fn send_now_fails_on_a_connection_the_peer_reset() {
        runtime().block_on(async {
            let (ours, theirs) = pair().await;
            // Unread data at close makes the peer answer with a reset.
            assert_eq!(send_now(&ours, b"x"), SentNow::All);
            monoio::time::sleep(std::time::Duration::from_millis(20)).await;
            drop(theirs);
            monoio::time::sleep(std::time::Duration::from_millis(20)).await;
            let mut outcome = SentNow::All;
            for _ in 0..10 {
                outcome = send_now(&ours, b"more");
                if outcome == SentNow::Failed {
                    break;
                }
                monoio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            assert_eq!(outcome, SentNow::Failed);
        });
    }
}
