//! KV event payloads (the third frame of a PUB message): the decoder never panics, and what it
//! accepts re-encodes to a payload that decodes to the same batch.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(d) = inferrail_events::decode_batch(data) {
        if d.batch.ts.is_nan() {
            return;
        }
        let again = inferrail_events::decode_batch(&d.batch.encode()).expect("re-encoded batch decodes");
        assert_eq!(again.batch, d.batch);
    }
});
