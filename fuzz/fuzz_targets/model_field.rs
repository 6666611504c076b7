//! The model-field scanner: never panics; splicing a found or missing model keeps every other byte.
#![no_main]
use inferrail_wire::{find_model, splice_model, ModelField};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(field) = find_model(data) {
        let out = splice_model(data, &field, "m");
        match &field {
            ModelField::Present { value, .. } => {
                assert_eq!(&out[..value.start], &data[..value.start]);
                assert_eq!(&out[value.start + 3..], &data[value.end..]);
            }
            ModelField::Absent { insert_at, .. } => {
                assert_eq!(&out[..*insert_at], &data[..*insert_at]);
            }
        }
        // The spliced body names the model it was given.
        match find_model(&out) {
            Ok(ModelField::Present { name, .. }) => assert_eq!(name, "m"),
            other => panic!("spliced body lost its model: {other:?}"),
        }
    }
});
