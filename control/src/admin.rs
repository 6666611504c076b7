//! The control thread: serves the admin listener (merged `/metrics`, `/health`) on its own
//! monoio runtime, off the data cores.

use inferrail_dataplane::metrics::{render, CoreRecorder, MetricsLayout};
use inferrail_dataplane::{ShutdownSignal, Snapshot};
use inferrail_wire::{full_response, openai_error, ErrorKind, Method, RequestHead};
use monoio::io::{AsyncReadRent, AsyncWriteRentExt};
use monoio::net::{TcpListener, TcpStream};
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// What the admin endpoints read.
pub struct AdminState {
    /// Label layout of the recorders.
    pub layout: Arc<MetricsLayout>,
    /// Every core's recorder.
    pub recorders: Vec<Arc<CoreRecorder>>,
    /// The snapshot in effect.
    pub snapshot: Arc<Snapshot>,
}

/// Binds `addr` and starts the control thread. Returns its handle and the bound address.
pub fn spawn(
    addr: SocketAddr,
    state: AdminState,
    shutdown: Arc<ShutdownSignal>,
) -> std::io::Result<(JoinHandle<()>, SocketAddr)> {
    let std_listener = std::net::TcpListener::bind(addr)?;
    std_listener.set_nonblocking(true)?;
    let bound = std_listener.local_addr()?;
    let handle = std::thread::Builder::new()
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
            rt.block_on(async move {
                let listener = match TcpListener::from_std(std_listener) {
                    Ok(l) => l,
                    Err(e) => {
                        eprintln!("inferrail: admin listener failed: {e}");
                        return;
                    }
                };
                let state = Rc::new(state);
                let mut stop = std::pin::pin!(shutdown.wait());
                loop {
                    monoio::select! {
                        _ = &mut stop => break,
                        accepted = listener.accept() => {
                            if let Ok((stream, _)) = accepted {
                                monoio::spawn(serve_admin(state.clone(), stream));
                            } else {
                                monoio::time::sleep(Duration::from_millis(10)).await;
                            }
                        }
                    }
                }
            });
        })?;
    Ok((handle, bound))
}

async fn serve_admin(state: Rc<AdminState>, mut stream: TcpStream) {
    let mut buf: Vec<u8> = Vec::with_capacity(4096);
    loop {
        let head = loop {
            match RequestHead::parse(&buf) {
                Ok(Some((head, used))) => {
                    buf.drain(..used);
                    break head;
                }
                Ok(None) if buf.len() < 64 * 1024 => {}
                _ => return,
            }
            if buf.capacity() - buf.len() < 1024 {
                buf.reserve(4096);
            }
            let len = buf.len();
            let cap = buf.capacity();
            let read = monoio::time::timeout(
                Duration::from_secs(30),
                stream.read(monoio::buf::IoBufMut::slice_mut(buf, len..cap)),
            )
            .await;
            let Ok((res, slice)) = read else { return };
            buf = slice.into_inner();
            match res {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        };
        let head_only = head.method == Method::Head;
        let get = matches!(head.method, Method::Get | Method::Head);
        let response = match (head.path(), get) {
            (b"/metrics", true) => {
                let text = render(&state.layout, &state.recorders);
                full_response(
                    200,
                    &[],
                    Some("text/plain; version=0.0.4; charset=utf-8"),
                    text.as_bytes(),
                    head_only,
                    head.close,
                )
            }
            (b"/health", true) => full_response(200, &[], None, b"", head_only, head.close),
            (b"/metrics" | b"/health", false) => {
                let body = openai_error(ErrorKind::MethodNotAllowed, "Method Not Allowed", None);
                full_response(
                    405,
                    &[("allow", b"GET, HEAD")],
                    Some("application/json"),
                    &body,
                    false,
                    head.close,
                )
            }
            _ => {
                let body = openai_error(ErrorKind::NotFound, "Not Found", None);
                full_response(404, &[], Some("application/json"), &body, false, head.close)
            }
        };
        let (res, _) = stream.write_all(response).await;
        if res.is_err() || head.close || head.framing != inferrail_wire::BodyFraming::Length(0) {
            return;
        }
    }
}
