//! Whether scripted raw bytes form exactly one well-framed response, so the connection may be kept.

use inferrail_wire::{BodyFraming, ChunkedDecoder, Method, ResponseHead};

/// True when `bytes` are one complete HTTP/1.1 response (after any interim 1xx heads) whose body
/// ends exactly where the bytes end, and which does not ask to close the connection.
pub(crate) fn keeps_connection(bytes: &[u8]) -> bool {
    let mut rest = bytes;
    loop {
        let (head, used) = match ResponseHead::parse(rest, Method::Post) {
            Ok(Some(parsed)) => parsed,
            _ => return false,
        };
        rest = &rest[used..];
        if (100..200).contains(&head.status) {
            if head.status == 101 {
                return false;
            }
            continue;
        }
        if head.close {
            return false;
        }
        return match head.framing {
            BodyFraming::Length(n) => rest.len() as u64 == n,
            BodyFraming::Chunked => {
                let mut d = ChunkedDecoder::new();
                matches!(d.feed(rest, None), Ok(p) if p.done && p.consumed == rest.len())
            }
            BodyFraming::UntilClose => false,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::keeps_connection;

    #[test]
    fn judges_framing() {
        assert!(keeps_connection(
            b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nhi"
        ));
        assert!(!keeps_connection(
            b"HTTP/1.1 200 OK\r\ncontent-length: 3\r\n\r\nhi"
        ));
        assert!(!keeps_connection(
            b"HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\nhi"
        ));
        assert!(keeps_connection(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n"
        ));
        assert!(!keeps_connection(
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nhi\r\n"
        ));
        assert!(!keeps_connection(b"HTTP/1.1 200 OK\r\n\r\nuntil close"));
        assert!(!keeps_connection(
            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
        ));
        assert!(!keeps_connection(b"garbage"));
        assert!(keeps_connection(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n"
        ));
    }
}
