//! RFC 7396 JSON merge patch: how a PATCH of the config in effect is applied to its document.

use serde_json::Value;

/// Applies `patch` to `target` as RFC 7396 defines it: when `patch` is an object, each of its
/// members is merged into `target` (turned into an empty object first if it was not one), a
/// `null` member deleting the name and an object member merging recursively; any other `patch`
/// (array, string, number, bool, null) replaces `target` whole. Arrays are never merged.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(members) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(serde_json::Map::new());
    }
    let Value::Object(object) = target else {
        return;
    };
    for (name, value) in members {
        if value.is_null() {
            object.remove(name);
        } else {
            merge_patch(object.entry(name.clone()).or_insert(Value::Null), value);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::merge_patch;

    fn patched(target: Value, patch: Value) -> Value {
        let mut target = target;
        merge_patch(&mut target, &patch);
        target
    }

    /// RFC 7396, Appendix A: every example, in order.
    #[test]
    fn rfc_7396_appendix_a_examples() {
        let cases = [
            (json!({"a": "b"}), json!({"a": "c"}), json!({"a": "c"})),
            (
                json!({"a": "b"}),
                json!({"b": "c"}),
                json!({"a": "b", "b": "c"}),
            ),
            (json!({"a": "b"}), json!({"a": null}), json!({})),
            (
                json!({"a": "b", "b": "c"}),
                json!({"a": null}),
                json!({"b": "c"}),
            ),
            (json!({"a": ["b"]}), json!({"a": "c"}), json!({"a": "c"})),
            (json!({"a": "c"}), json!({"a": ["b"]}), json!({"a": ["b"]})),
            (
                json!({"a": {"b": "c"}}),
                json!({"a": {"b": "d", "c": null}}),
                json!({"a": {"b": "d"}}),
            ),
            (
                json!({"a": [{"b": "c"}]}),
                json!({"a": [1]}),
                json!({"a": [1]}),
            ),
            (json!(["a", "b"]), json!(["c", "d"]), json!(["c", "d"])),
            (json!({"a": "b"}), json!(["c"]), json!(["c"])),
            (json!({"a": "foo"}), json!(null), json!(null)),
            (json!({"a": "foo"}), json!("bar"), json!("bar")),
            (
                json!({"e": null}),
                json!({"a": 1}),
                json!({"e": null, "a": 1}),
            ),
            (
                json!([1, 2]),
                json!({"a": "b", "c": null}),
                json!({"a": "b"}),
            ),
            (
                json!({}),
                json!({"a": {"bb": {"ccc": null}}}),
                json!({"a": {"bb": {}}}),
            ),
        ];
        for (target, patch, expected) in cases {
            let result = patched(target.clone(), patch.clone());
            assert_eq!(result, expected, "{target} patched with {patch}");
        }
    }

    /// RFC 7396, section 3: the worked example.
    #[test]
    fn rfc_7396_section_3_example() {
        let target = json!({
            "title": "Goodbye!",
            "author": {"givenName": "John", "familyName": "Doe"},
            "tags": ["example", "sample"],
            "content": "This will be unchanged"
        });
        let patch = json!({
            "title": "Hello!",
            "phoneNumber": "+01-123-456-7890",
            "author": {"familyName": null},
            "tags": ["example"]
        });
        let expected = json!({
            "title": "Hello!",
            "author": {"givenName": "John"},
            "tags": ["example"],
            "content": "This will be unchanged",
            "phoneNumber": "+01-123-456-7890"
        });
        assert_eq!(patched(target, patch), expected);
    }

    #[test]
    fn empty_patch_changes_nothing_and_deleting_a_missing_name_is_harmless() {
        let doc = json!({"routing": {"epsilon": 1.0}, "models": [{"name": "m"}]});
        assert_eq!(patched(doc.clone(), json!({})), doc);
        assert_eq!(patched(doc.clone(), json!({"health": null})), doc);
        assert_eq!(
            patched(doc, json!({"routing": {"epsilon": 2.0, "seed": 7}})),
            json!({"routing": {"epsilon": 2.0, "seed": 7}, "models": [{"name": "m"}]})
        );
    }
}
