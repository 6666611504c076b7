//! The configuration as a JSON document: what a control plane keeps as "the config in effect",
//! shows and PATCHes. [`document_of_yaml`] turns the YAML file into it (merge keys applied) and
//! [`parse_document`] validates it exactly like YAML text, so `parse_document(document_of_yaml(t))`
//! accepts and refuses what `parse_str(t)` does, with the same problems at the same paths.
//!
//! Values stay as written: durations (`"250ms"`), sizes (`"32MiB"`) and `auto` remain strings,
//! numbers remain numbers. Object members come out sorted by name (serde_json's map).

use serde_json::Value as Json;
use serde_yaml::Value as Yaml;

use crate::error::{ConfigError, Problem, Problems};
use crate::schema::Config;
use crate::walk::{describe, index, join};

/// The YAML text as a JSON document, with anchors resolved and merge keys (`<<`) applied. Only
/// YAML syntax is checked here, not the configuration (see [`parse_document`]); a YAML value
/// JSON cannot hold (a non-string mapping key, a tagged value, `.nan` or `.inf`) is a problem at
/// its path. Empty text is an empty object.
pub fn document_of_yaml(text: &str) -> Result<Json, ConfigError> {
    let mut root: Yaml = serde_yaml::from_str(text).map_err(crate::syntax_error)?;
    root.apply_merge().map_err(crate::syntax_error)?;
    if root.is_null() {
        return Ok(Json::Object(serde_json::Map::new()));
    }
    let mut problems = Vec::new();
    let doc = to_json("", &root, &mut problems);
    if problems.is_empty() {
        Ok(doc)
    } else {
        Err(ConfigError::Invalid(Problems(problems)))
    }
}

/// Parses and validates a configuration held as a JSON document, exactly as [`crate::parse_str`]
/// would the same values written in YAML (merge keys are not applied: JSON has no anchors).
pub fn parse_document(doc: &Json) -> Result<Config, ConfigError> {
    let root = serde_yaml::to_value(doc).map_err(|err| {
        ConfigError::Invalid(Problems(vec![Problem::new(
            "",
            format!("cannot read the document: {err}"),
        )]))
    })?;
    crate::parse_value(&root)
}

/// `v` as JSON; each value JSON cannot hold is reported at its path and becomes null.
fn to_json(path: &str, v: &Yaml, problems: &mut Vec<Problem>) -> Json {
    match v {
        Yaml::Null => Json::Null,
        Yaml::Bool(b) => Json::Bool(*b),
        Yaml::String(s) => Json::String(s.clone()),
        Yaml::Number(n) => {
            if let Some(u) = n.as_u64() {
                Json::from(u)
            } else if let Some(i) = n.as_i64() {
                Json::from(i)
            } else if let Some(x) = n.as_f64().and_then(serde_json::Number::from_f64) {
                Json::Number(x)
            } else {
                problems.push(Problem::new(
                    path,
                    format!("{n} cannot be kept in a JSON document; use a finite number"),
                ));
                Json::Null
            }
        }
        Yaml::Sequence(items) => Json::Array(
            items
                .iter()
                .enumerate()
                .map(|(i, item)| to_json(&index(path, i), item, problems))
                .collect(),
        ),
        Yaml::Mapping(map) => {
            let mut object = serde_json::Map::new();
            for (key, value) in map {
                match key {
                    Yaml::String(k) => {
                        let value = to_json(&join(path, k), value, problems);
                        object.insert(k.clone(), value);
                    }
                    other => problems.push(Problem::new(
                        join(path, &describe(other)),
                        "keys must be strings",
                    )),
                }
            }
            Json::Object(object)
        }
        Yaml::Tagged(tagged) => {
            problems.push(Problem::new(
                path,
                format!(
                    "tagged values ({}) cannot be kept in a JSON document",
                    tagged.tag
                ),
            ));
            Json::Null
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use serde_json::json;

    use super::{document_of_yaml, parse_document};
    use crate::testing::MINIMAL;
    use crate::{parse_str, ConfigError};

    fn problems(result: Result<impl std::fmt::Debug, ConfigError>) -> Vec<String> {
        match result {
            Err(ConfigError::Invalid(problems)) => {
                problems.0.iter().map(ToString::to_string).collect()
            }
            other => panic!("expected problems, got {other:?}"),
        }
    }

    #[test]
    fn examples_round_trip_through_their_document() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
        for name in ["inferrail.yaml", "local-3-replicas.yaml"] {
            let text = std::fs::read_to_string(dir.join(name)).unwrap();
            let doc = document_of_yaml(&text).unwrap();
            assert_eq!(parse_document(&doc).unwrap(), parse_str(&text).unwrap());
            // The document's JSON text is YAML too, and reads back to the same document.
            let json_text = serde_json::to_string(&doc).unwrap();
            assert_eq!(document_of_yaml(&json_text).unwrap(), doc, "{name}");
        }
    }

    #[test]
    fn values_stay_as_written() {
        let text = "\
server: {request_timeout: 250ms, shutdown_timeout: 0, max_body_bytes: 32MiB, cores: auto}
models:
  - name: m
    chat_template_kwargs: {enable_thinking: false, n: [1, 2.5]}
replicas: [{id: r0, url: 'http://127.0.0.1:8001', models: [m]}]
routing: {epsilon: 0.5, seed: 18446744073709551615, cost_model: {prefill_pair_secs: 3.3e-9}}
";
        let doc = document_of_yaml(text).unwrap();
        assert_eq!(
            doc["server"],
            json!({"request_timeout": "250ms", "shutdown_timeout": 0, "max_body_bytes": "32MiB", "cores": "auto"})
        );
        assert_eq!(
            doc["models"][0]["chat_template_kwargs"],
            json!({"enable_thinking": false, "n": [1, 2.5]})
        );
        assert_eq!(doc["routing"]["seed"], json!(u64::MAX));
        assert_eq!(
            doc["routing"]["cost_model"]["prefill_pair_secs"],
            json!(3.3e-9)
        );
        assert_eq!(parse_document(&doc).unwrap(), parse_str(text).unwrap());
    }

    #[test]
    fn merge_keys_are_applied() {
        let text = "\
models: [{name: m}]
replicas:
  - &base {id: r0, url: 'http://a:1', models: [m], max_pending: 7}
  - <<: *base
    id: r1
    url: http://a:2
";
        let doc = document_of_yaml(text).unwrap();
        assert_eq!(
            doc["replicas"][1],
            json!({"id": "r1", "url": "http://a:2", "models": ["m"], "max_pending": 7})
        );
        assert_eq!(parse_document(&doc).unwrap().replicas[1].max_pending, 7);
    }

    #[test]
    fn invalid_documents_have_the_same_problems_as_their_yaml() {
        let text = "\
server: {listn: 1, request_timeout: soon}
models: [{name: m, policy: foo, split: {p2c: 60}}]
replicas: [{id: r0, url: 'ftp://x', models: [m]}]
";
        let doc = document_of_yaml(text).unwrap();
        assert_eq!(problems(parse_document(&doc)), problems(parse_str(text)));
        assert_eq!(
            problems(parse_document(&json!("text"))),
            problems(parse_str("text"))
        );
        assert_eq!(
            problems(parse_document(&json!({}))),
            [
                "models: required; list at least one model",
                "replicas: required; list at least one replica (or add a discovery.dns group)",
            ]
        );
    }

    #[test]
    fn a_document_edited_as_json_is_validated() {
        let mut doc = document_of_yaml(MINIMAL).unwrap();
        crate::merge_patch(
            &mut doc,
            &json!({"routing": {"epsilon": 2, "split": {"p2c": 100}}}),
        );
        let config = parse_document(&doc).unwrap();
        assert_eq!(config.routing.epsilon, 2.0);
        crate::merge_patch(&mut doc, &json!({"health": {"interval": "100ms"}}));
        assert_eq!(
            problems(parse_document(&doc)),
            ["health.timeout: must be less than health.interval (100ms) (got 500ms)"]
        );
    }

    #[test]
    fn what_json_cannot_hold_is_reported_at_its_path() {
        assert_eq!(
            problems(document_of_yaml(
                "routing: {epsilon: .nan}\nmodels: [{name: m, chat_template_kwargs: {1: a, b: !x c}}]\n"
            )),
            [
                "routing.epsilon: .nan cannot be kept in a JSON document; use a finite number",
                "models[0].chat_template_kwargs.1: keys must be strings",
                "models[0].chat_template_kwargs.b: tagged values (!x) cannot be kept in a JSON document",
            ]
        );
        let syntax = problems(document_of_yaml("models: [\n  a: b"));
        assert!(
            syntax[0].starts_with("invalid YAML at line 3, column 1: "),
            "{syntax:?}"
        );
        assert_eq!(document_of_yaml("").unwrap(), json!({}));
    }
}
