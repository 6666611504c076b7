//! Request heads: parsing never panics, and a parsed head's ranges stay inside its bytes.
#![no_main]
use inferrail_wire::RequestHead;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(Some((head, used))) = RequestHead::parse(data) {
        assert!(used <= data.len());
        assert_eq!(head.bytes.len(), used);
        let _ = head.path();
        for (name, value) in head.header_lines() {
            assert!(!name.is_empty());
            let _ = value;
        }
    }
});
