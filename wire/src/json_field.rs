//! Reads one top-level string member (such as `user`) of a JSON object body without building a
//! tree, with the same scanner that finds `model` ([`crate::model_field`]).

use crate::model_field::{find_string_member, ModelField};

/// The value of the top-level string member `key` of a JSON object body, escapes decoded. `None`
/// when the member is absent or not a string, or the body is not a JSON object. With duplicate
/// keys the last one wins, as in Python's `json` module.
pub fn find_top_level_string(body: &[u8], key: &str) -> Option<String> {
    match find_string_member(body, key) {
        Ok(ModelField::Present { name, .. }) => Some(name.into_owned()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::{json, Value};

    #[test]
    fn finds_user_past_tricky_values() {
        let body = br#"{"messages":[{"role":"user","content":"}\"user\":\"x\"{["}], "n":[1,{"user":"nested"}], "user" : "al\u00e9\n\"ice\""}"#;
        assert_eq!(
            find_top_level_string(body, "user").as_deref(),
            Some("al\u{e9}\n\"ice\"")
        );
        assert_eq!(find_top_level_string(body, "role"), None);
        assert_eq!(find_top_level_string(body, "content"), None);
    }

    #[test]
    fn absent_non_string_and_invalid_are_none() {
        assert_eq!(find_top_level_string(br#"{"a":"b"}"#, "user"), None);
        assert_eq!(find_top_level_string(br#"{"user":3}"#, "user"), None);
        assert_eq!(find_top_level_string(br#"{"user":null}"#, "user"), None);
        assert_eq!(find_top_level_string(br#"["user","x"]"#, "user"), None);
        assert_eq!(find_top_level_string(br#"{"user":"x"} y"#, "user"), None);
        assert_eq!(find_top_level_string(br#"{"user":"x""#, "user"), None);
        assert_eq!(find_top_level_string(br#"{"user":"x",}"#, "user"), None);
        assert_eq!(
            find_top_level_string(br#"{"a":tru,"user":"x"}"#, "user"),
            None
        );
        assert_eq!(find_top_level_string(b"", "user"), None);
        assert_eq!(find_top_level_string(b"{}", "user"), None);
    }

    #[test]
    fn last_duplicate_wins_and_escaped_keys_match() {
        let body = br#"{"user":"a","us\u0065r":"b\ud83d\ude00"}"#;
        assert_eq!(
            find_top_level_string(body, "user").as_deref(),
            Some("b\u{1F600}")
        );
        assert_eq!(
            find_top_level_string(br#"{"user":"a","user":1}"#, "user"),
            None
        );
        assert_eq!(
            find_top_level_string(br#"{"user":1,"user":"z"}"#, "user").as_deref(),
            Some("z")
        );
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| json!(f)),
            any::<String>().prop_map(Value::String),
            "[{}\\[\\]\"\\\\:,a-z]{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map("[a-z]{0,3}|user", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn agrees_with_serde_json(
            members in proptest::collection::btree_map("[a-z]{0,4}|user", arb_json(), 0..6),
            pretty in any::<bool>(),
        ) {
            let obj = Value::Object(members.into_iter().collect());
            let body = if pretty { serde_json::to_vec_pretty(&obj) } else { serde_json::to_vec(&obj) }.unwrap();
            for key in ["user", "a", ""] {
                let want = obj.get(key).and_then(Value::as_str).map(str::to_owned);
                prop_assert_eq!(find_top_level_string(&body, key), want);
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(body in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = find_top_level_string(&body, "user");
        }

        #[test]
        fn json_like_bytes_never_panic(body in "[{}\\[\\]\":,\\\\ u0-9a-f]{0,64}") {
            let _ = find_top_level_string(body.as_bytes(), "u");
        }
    }
}
