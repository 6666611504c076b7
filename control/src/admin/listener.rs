//! The admin listener on the control thread: merged `/metrics`, `/health`, and the admin API
//! (`/admin/replicas`, `/admin/config` GET and PATCH, `/admin/reload`, `/admin/shadow`).
//!
//! It has no authentication: it listens on 127.0.0.1 by default and must not be exposed.

use crate::admin::api;
use crate::admin::response::AdminResponse;
use crate::controller::Controller;
use inferrail_shards::tokenize::Endpoint;
use inferrail_wire::{full_response, BodyFraming, ErrorKind, Method, RequestHead};
use monoio::io::{AsyncReadRent, AsyncWriteRentExt};
use monoio::net::{TcpListener, TcpStream};
use std::cell::RefCell;
use std::rc::{Rc, Weak};
use std::time::{Duration, Instant};

/// Largest admin request body (a config patch).
const MAX_ADMIN_BODY: usize = 1024 * 1024;

/// Accepts admin connections until `stop` completes.
pub async fn serve(
    listener: TcpListener,
    ctl: Weak<RefCell<Controller>>,
    stop: impl std::future::Future<Output = ()>,
) {
    let mut stop = std::pin::pin!(stop);
    loop {
        monoio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => {
                if let Ok((stream, _)) = accepted {
                    monoio::spawn(serve_connection(ctl.clone(), stream));
                } else {
                    monoio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        }
    }
}

/// Reads into `buf` until it holds at least `want` bytes. False on EOF, error or timeout.
async fn fill(stream: &mut TcpStream, buf: &mut Vec<u8>, want: usize) -> bool {
    while buf.len() < want {
        if buf.capacity() - buf.len() < 1024 {
            buf.reserve(4096);
        }
        let len = buf.len();
        let cap = buf.capacity();
        let owned = std::mem::take(buf);
        let read = monoio::time::timeout(
            Duration::from_secs(30),
            stream.read(monoio::buf::IoBufMut::slice_mut(owned, len..cap)),
        )
        .await;
        let Ok((res, slice)) = read else { return false };
        *buf = slice.into_inner();
        match res {
            Ok(0) | Err(_) => return false,
            Ok(_) => {}
        }
    }
    true
}

/// Serves one admin connection. It holds the controller weakly, so an idle keep-alive connection
/// never keeps the controller (and its workers) alive past shutdown.
async fn serve_connection(ctl: Weak<RefCell<Controller>>, mut stream: TcpStream) {
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
            let want = buf.len() + 1;
            if !fill(&mut stream, &mut buf, want).await {
                return;
            }
        };
        let started = Instant::now();
        let body_len = match head.framing {
            BodyFraming::Length(n) if n as usize <= MAX_ADMIN_BODY => n as usize,
            BodyFraming::Length(_) => {
                let r = AdminResponse::error(
                    ErrorKind::PayloadTooLarge,
                    "admin request body too large",
                );
                write(&mut stream, r, false, true).await;
                return;
            }
            _ => {
                let r = AdminResponse::error(
                    ErrorKind::BadRequest,
                    "admin requests need a content-length body",
                );
                write(&mut stream, r, false, true).await;
                return;
            }
        };
        if !fill(&mut stream, &mut buf, body_len).await {
            return;
        }
        let body: Vec<u8> = buf.drain(..body_len).collect();
        let head_only = head.method == Method::Head;
        let Some(ctl) = ctl.upgrade() else { return };
        let response = route(&ctl, &head, &body, started);
        drop(ctl);
        if !write(&mut stream, response, head_only, head.close).await || head.close {
            return;
        }
    }
}

async fn write(stream: &mut TcpStream, r: AdminResponse, head_only: bool, close: bool) -> bool {
    let bytes = full_response(
        r.status,
        &r.headers,
        Some(r.content_type),
        &r.body,
        head_only,
        close,
    );
    let (res, _) = stream.write_all(bytes).await;
    res.is_ok()
}

fn route(
    ctl: &Rc<RefCell<Controller>>,
    head: &RequestHead,
    body: &[u8],
    started: Instant,
) -> AdminResponse {
    let get = matches!(head.method, Method::Get | Method::Head);
    let path = head.path();
    match path {
        b"/metrics" if get => AdminResponse {
            status: 200,
            content_type: "text/plain; version=0.0.4; charset=utf-8",
            body: api::metrics_text(&mut ctl.borrow_mut()).into_bytes(),
            headers: Vec::new(),
        },
        b"/health" if get => AdminResponse {
            status: 200,
            content_type: "text/plain",
            body: Vec::new(),
            headers: Vec::new(),
        },
        b"/metrics" | b"/health" | b"/admin/replicas" | b"/admin/shadow" => {
            if get {
                let ctl = ctl.borrow();
                if path == b"/admin/replicas" {
                    AdminResponse::json(200, &api::replicas(&ctl, Instant::now()))
                } else {
                    AdminResponse::json(200, &api::shadow(&ctl))
                }
            } else {
                AdminResponse::method_not_allowed(b"GET, HEAD")
            }
        }
        b"/admin/config" => match head.method {
            Method::Get | Method::Head => AdminResponse::json(200, &api::config(&ctl.borrow())),
            Method::Other if head.bytes.starts_with(b"PATCH ") => {
                api::patch_config(&mut ctl.borrow_mut(), body, started)
            }
            _ => AdminResponse::method_not_allowed(b"GET, HEAD, PATCH"),
        },
        b"/admin/index" => {
            if get {
                AdminResponse::json(200, &api::index(&ctl.borrow()))
            } else {
                AdminResponse::method_not_allowed(b"GET, HEAD")
            }
        }
        b"/admin/tokenize/v1/chat/completions"
        | b"/admin/tokenize/v1/completions"
        | b"/admin/explain/v1/chat/completions"
        | b"/admin/explain/v1/completions" => {
            if head.method != Method::Post {
                return AdminResponse::method_not_allowed(b"POST");
            }
            let endpoint = if path.ends_with(b"/v1/completions") {
                Endpoint::Completion
            } else {
                Endpoint::Chat
            };
            if path.starts_with(b"/admin/tokenize/") {
                api::tokenize(&ctl.borrow(), endpoint, body)
            } else {
                crate::admin::explain::explain(&ctl.borrow(), head, endpoint, body)
            }
        }
        b"/admin/reload" => {
            if head.method == Method::Post {
                api::reload(&mut ctl.borrow_mut(), started)
            } else {
                AdminResponse::method_not_allowed(b"POST")
            }
        }
        _ => AdminResponse::error(ErrorKind::NotFound, "Not Found"),
    }
}
