//! One test per vLLM preparation rule.

use super::*;

fn prep(body: &str, format: ContentFormat) -> Result<Prepared, Unpredictable> {
    let j = J::parse(body.as_bytes()).expect("json");
    prepare(
        &j,
        format,
        false,
        &[("bos_token".into(), "<s>".into())],
        &serde_json::Map::new(),
    )
}

fn ctx<'a>(p: &'a Prepared, key: &str) -> Option<&'a J> {
    p.context.iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

fn msg(p: &Prepared, i: usize) -> String {
    format!("{:?}", p.messages[i])
}

#[test]
fn null_and_string_and_parts_in_string_format() {
    let p = prep(
        r#"{"messages":[{"role":"user","content":null},{"role":"user","content":"a"},
        {"role":"user","content":[{"type":"text","text":"x"},"y",{"type":"text","text":null},{"type":"refusal","refusal":"z"}]}]}"#,
        ContentFormat::String,
    )
    .expect("prepared");
    assert_eq!(p.messages[0].get("content"), Some(&J::Str(String::new())));
    assert_eq!(p.messages[1].get("content"), Some(&J::Str("a".into())));
    assert_eq!(
        p.messages[2].get("content"),
        Some(&J::Str("x\ny\nz".into()))
    );
}

#[test]
fn openai_format_keeps_typed_parts() {
    let p = prep(
        r#"{"messages":[{"role":"user","content":"a"},{"role":"user","content":null}]}"#,
        ContentFormat::OpenAi,
    )
    .expect("prepared");
    assert_eq!(
        p.messages[0].get("content"),
        Some(&J::Arr(vec![J::Obj(vec![
            ("type".into(), J::Str("text".into())),
            ("text".into(), J::Str("a".into()))
        ])]))
    );
    assert_eq!(p.messages[1].get("content"), Some(&J::Arr(Vec::new())));
}

#[test]
fn non_text_parts_are_unpredictable() {
    for part in [
        r#"{"type":"image_url","image_url":{"url":"http://x/y.png"}}"#,
        r#"{"image_url":"http://x/y.png"}"#,
        r#"{"type":"input_audio","input_audio":{"data":"","format":"wav"}}"#,
        r#"{"type":"video_url","video_url":{"url":"v"}}"#,
    ] {
        let body = format!(r#"{{"messages":[{{"role":"user","content":[{part}]}}]}}"#);
        assert_eq!(
            prep(&body, ContentFormat::String).err(),
            Some(Unpredictable::Images),
            "{part}"
        );
    }
}

#[test]
fn only_known_keys_reach_the_template() {
    let p = prep(
        r#"{"messages":[{"role":"user","content":"a","name":"bob","extra":1,"reasoning":"r"},
        {"role":"assistant","content":"b","reasoning_content":"think"},
        {"role":"tool","content":[{"type":"text","text":"t1"},{"type":"text","text":"t2"}],"tool_call_id":"c1"}]}"#,
        ContentFormat::OpenAi,
    )
    .expect("prepared");
    assert_eq!(
        msg(&p, 0),
        format!(
            "{:?}",
            J::parse(br#"{"role":"user","content":[{"type":"text","text":"a"}],"name":"bob"}"#)
                .expect("j")
        )
    );
    assert_eq!(
        msg(&p, 1),
        format!("{:?}", J::parse(br#"{"role":"assistant","content":[{"type":"text","text":"b"}],"reasoning":"think","reasoning_content":"think"}"#).expect("j"))
    );
    assert_eq!(
        msg(&p, 2),
        format!(
            "{:?}",
            J::parse(br#"{"role":"tool","content":"t1\nt2","tool_call_id":"c1"}"#).expect("j")
        )
    );
}

#[test]
fn tool_call_arguments_become_objects() {
    let p = prep(
        r#"{"messages":[{"role":"assistant","content":null,"tool_calls":[
            {"type":"function","id":"1","function":{"name":"f","arguments":"{\"b\":1,\"a\":[2]}"},"index":0},
            {"id":"2","function":{"name":"g","arguments":"not json"}},
            {"id":"3","function":{"name":"h","arguments":"[1]"}},
            {"id":"4","function":{"name":"k","arguments":""}}]},
            {"role":"assistant","content":"x","tool_calls":[]}]}"#,
        ContentFormat::String,
    )
    .expect("prepared");
    let expect = J::parse(
        br#"[{"id":"1","function":{"arguments":{"b":1,"a":[2]},"name":"f"},"type":"function"},
             {"id":"2","function":{"arguments":{},"name":"g"}},
             {"id":"3","function":{"arguments":{},"name":"h"}},
             {"id":"4","function":{"arguments":{},"name":"k"}}]"#,
    )
    .expect("j");
    assert_eq!(p.messages[0].get("tool_calls"), Some(&expect));
    assert_eq!(p.messages[0].get("content"), Some(&J::Str(String::new())));
    assert_eq!(
        p.messages[1].get("tool_calls"),
        None,
        "empty tool_calls dropped"
    );
}

#[test]
fn tools_are_model_dumped() {
    let p = prep(
        r#"{"messages":[{"role":"user","content":"a"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"},"extra":1}}]}"#,
        ContentFormat::String,
    )
    .expect("prepared");
    let expect = J::parse(
        br#"[{"type":"function","function":{"name":"f","description":null,"parameters":{"type":"object"}}}]"#,
    )
    .expect("j");
    assert_eq!(ctx(&p, "tools"), Some(&expect));
    assert_eq!(ctx(&p, "documents"), Some(&J::Null));
}

#[test]
fn kwargs_merge_request_over_config_and_fields_over_kwargs() {
    let j = J::parse(
        br#"{"messages":[{"role":"user","content":"a"}],
            "chat_template_kwargs":{"enable_thinking":false,"x":null,"y":"auto","add_generation_prompt":false},
            "documents":[{"title":"t","text":"d"}]}"#,
    )
    .expect("json");
    let mut config = serde_json::Map::new();
    config.insert("enable_thinking".into(), serde_json::Value::Bool(true));
    config.insert("x".into(), serde_json::Value::from(7));
    config.insert("y".into(), serde_json::Value::from("cfg"));
    let p = prepare(&j, ContentFormat::String, false, &[], &config).expect("prepared");
    assert_eq!(ctx(&p, "enable_thinking"), Some(&J::Bool(false)));
    assert_eq!(ctx(&p, "x"), Some(&J::Int(7)), "null does not override");
    assert_eq!(
        ctx(&p, "y"),
        Some(&J::Str("cfg".into())),
        "auto does not override"
    );
    assert_eq!(
        ctx(&p, "add_generation_prompt"),
        Some(&J::Bool(true)),
        "the field wins"
    );
    assert!(matches!(ctx(&p, "documents"), Some(J::Arr(d)) if d.len() == 1));
    assert_eq!(ctx(&p, "tokenize"), None);
    assert_eq!(ctx(&p, "continue_final_message"), None);
}

#[test]
fn reasoning_effort_sets_enable_thinking_unless_given() {
    let p = prep(
        r#"{"messages":[{"role":"user","content":"a"}],"reasoning_effort":"none"}"#,
        ContentFormat::String,
    )
    .expect("prepared");
    assert_eq!(ctx(&p, "enable_thinking"), Some(&J::Bool(false)));
    assert_eq!(ctx(&p, "reasoning_effort"), Some(&J::Str("none".into())));
    let p = prep(
        r#"{"messages":[{"role":"user","content":"a"}],"reasoning_effort":"high","chat_template_kwargs":{"enable_thinking":false}}"#,
        ContentFormat::String,
    )
    .expect("prepared");
    assert_eq!(ctx(&p, "enable_thinking"), Some(&J::Bool(false)));
}

#[test]
fn developer_becomes_system_and_systems_merge_when_template_lacks_developer() {
    let p = prep(
        r#"{"messages":[{"role":"system","content":"s"},{"role":"user","content":"u"},{"role":"developer","content":"d","tools":[]}]}"#,
        ContentFormat::String,
    )
    .expect("prepared");
    assert_eq!(p.messages.len(), 2);
    assert_eq!(
        format!("{:?}", p.messages[0]),
        format!(
            "{:?}",
            J::parse(br#"{"role":"system","content":"s\n\nd"}"#).expect("j")
        )
    );
}

#[test]
fn refusals() {
    let cases = [
        (
            r#"{"messages":[{"role":"user","content":"a"}],"chat_template":"x"}"#,
            "template_in_request",
        ),
        (
            r#"{"messages":[{"role":"user","content":"a"}],"chat_template_kwargs":{"chat_template":"x"}}"#,
            "template_in_request",
        ),
        (
            r#"{"messages":[{"role":"user","content":"a"}],"continue_final_message":true}"#,
            "invalid_request",
        ),
        (r#"{"messages":[]}"#, "invalid_request"),
        (r#"{"messages":[{"content":"a"}]}"#, "invalid_request"),
        (
            r#"{"messages":[{"role":"user","content":"a"}],"chat_template_kwargs":{"tokenize":true}}"#,
            "template_kwargs",
        ),
        (r#"[1]"#, "not_an_object"),
    ];
    for (body, label) in cases {
        let e = prep(body, ContentFormat::String).expect_err(body);
        assert_eq!(e.label(), label, "{body}");
    }
    let ok = prep(
        r#"{"messages":[{"role":"assistant","content":"a"}],"continue_final_message":true,"add_generation_prompt":false}"#,
        ContentFormat::String,
    )
    .expect("prepared");
    assert!(ok.continue_final_message);
}

#[test]
fn claude_billing_header_is_dropped_from_system_text() {
    let p = prep(
        r#"{"messages":[{"role":"system","content":"x-anthropic-billing-header: cch=1\nreal"},{"role":"user","content":"x-anthropic-billing-header: keep"}]}"#,
        ContentFormat::String,
    )
    .expect("prepared");
    assert_eq!(p.messages[0].get("content"), Some(&J::Str("real".into())));
    assert_eq!(
        p.messages[1].get("content"),
        Some(&J::Str("x-anthropic-billing-header: keep".into()))
    );
}
