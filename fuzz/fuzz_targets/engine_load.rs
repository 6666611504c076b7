//! The engines' /metrics page parser (vLLM and SGLang load): never panics on any page.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(load) = inferrail_control::fleet::engine_load::parse(data) {
        assert!(load.running >= 0.0 || load.running.is_nan());
    }
});
