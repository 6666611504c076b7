//! The top-level string member scanner (`user`, `cache_salt`): never panics, and agrees with the
//! `model` scanner it shares its code with.
#![no_main]
use inferrail_wire::json_field::find_top_level_string;
use inferrail_wire::{find_model, ModelField};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let model = find_top_level_string(data, "model");
    match find_model(data) {
        Ok(ModelField::Present { name, .. }) => assert_eq!(model, Some(name.into_owned())),
        _ => assert_eq!(model, None),
    }
    let _ = find_top_level_string(data, "user");
});
