//! Config documents: a JSON merge patch of any JSON onto any JSON never panics, and validating
//! the result never panics either.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some(split) = data.first().map(|b| usize::from(*b)) else { return };
    let rest = &data[1..];
    let split = split.min(rest.len());
    let (Ok(mut doc), Ok(patch)) = (
        serde_json::from_slice::<serde_json::Value>(&rest[..split]),
        serde_json::from_slice::<serde_json::Value>(&rest[split..]),
    ) else {
        return;
    };
    inferrail_config::merge_patch(&mut doc, &patch);
    let _ = inferrail_config::parse_document(&doc);
});
