//! Response heads: parsing never panics; the reason phrase lies inside the status line.
#![no_main]
use inferrail_wire::{Method, ResponseHead};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    for method in [Method::Post, Method::Head] {
        if let Ok(Some((head, used))) = ResponseHead::parse(data, method) {
            assert!(used <= data.len());
            assert!(head.reason().len() < head.bytes.len());
        }
    }
});
