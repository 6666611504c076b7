//! The template environment behaves as transformers' Jinja2 setup.

use super::*;

fn render(src: &str, ctx: Vec<(&str, Value)>) -> Result<String, RenderError> {
    let t = ChatTemplate::new(src)?;
    let ctx = ctx.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
    t.render(Vec::new(), ctx, false)
}

fn msgs(json: &str) -> Vec<J> {
    match J::parse(json.as_bytes()) {
        Some(J::Arr(a)) => a,
        other => panic!("not a list: {other:?}"),
    }
}

#[test]
fn trim_and_lstrip_blocks() {
    let src =
        "{% for x in [1, 2] %}\n    {% if x == 1 %}\n  a{{ x }}\n    {% endif %}\n{% endfor %}\n";
    // Jinja2 with trim_blocks + lstrip_blocks renders "  a1\n" once.
    assert_eq!(render(src, vec![]).expect("render"), "  a1\n");
}

#[test]
fn tojson_is_python_json_dumps_without_html_escaping() {
    let v =
        crate::tokenize::json::ordered_map([("a", Value::from("<b>&'é")), ("n", Value::from(1.5))]);
    assert_eq!(
        render("{{ x | tojson }}", vec![("x", v.clone())]).expect("render"),
        r#"{"a": "<b>&'é", "n": 1.5}"#
    );
    assert_eq!(
        render("{{ x | tojson(indent=2) }}", vec![("x", v.clone())]).expect("render"),
        "{\n  \"a\": \"<b>&'é\",\n  \"n\": 1.5\n}"
    );
    assert_eq!(
        render(
            "{{ x | tojson(ensure_ascii=True, separators=(',', ':')) }}",
            vec![("x", v)]
        )
        .expect("render"),
        r#"{"a":"<b>&'\u00e9","n":1.5}"#
    );
}

#[test]
fn raise_exception_fails_the_render_with_its_message() {
    let e = render("{{ raise_exception('bad roles') }}", vec![]).expect_err("raises");
    assert!(e.0.contains("bad roles"), "{e}");
}

#[test]
fn values_print_as_python_str() {
    let out = render(
        "{{ n }}|{{ t }}|{{ l }}|{{ d }}|{{ u }}|{{ f }}",
        vec![
            ("n", Value::from(())),
            ("t", Value::from(true)),
            ("l", Value::from(vec![Value::from("a"), Value::from(1)])),
            (
                "d",
                crate::tokenize::json::ordered_map([("k", Value::from("it's"))]),
            ),
            ("f", Value::from(2.0)),
        ],
    )
    .expect("render");
    assert_eq!(out, "None|True|['a', 1]|{'k': \"it's\"}||2.0");
}

#[test]
fn python_string_methods_and_loop_controls() {
    let out = render(
        "{% for w in s.split(',') %}{% if w.strip() == 'skip' %}{% continue %}{% endif %}{{ w.strip().upper() }}{% if loop.index == 3 %}{% break %}{% endif %}{% endfor %}",
        vec![("s", Value::from("a, skip ,b,c,d"))],
    )
    .expect("render");
    assert_eq!(out, "AB", "loop.index counts skipped items too");
}

#[test]
fn strftime_of_known_instants() {
    // 2024-07-26 13:25:09 UTC, a Friday.
    assert_eq!(strftime("%d %b %Y", 1_722_000_309), "26 Jul 2024");
    assert_eq!(
        strftime("%A %B %e %H:%M:%S %p %j %y %%", 1_722_000_309),
        "Friday July 26 13:25:09 PM 208 24 %"
    );
    assert_eq!(strftime("%Y-%m-%d", 0), "1970-01-01");
    assert_eq!(strftime("%Y-%m-%d", 951_782_400), "2000-02-29");
}

#[test]
fn continue_final_message_cuts_where_the_message_ends() {
    let t = ChatTemplate::new(
        "{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}</s>\n{% endfor %}",
    )
    .expect("compile");
    let m = msgs(r#"[{"role":"user","content":"hi"},{"role":"assistant","content":"Sure, "}]"#);
    // `trim` ate the space after the tag: the text before it is right-stripped.
    assert_eq!(
        t.render(m.clone(), Vec::new(), true).expect("render"),
        "<user>hi</s>\n<assistant>Sure,"
    );
    let t2 =
        ChatTemplate::new("{% for m in messages %}{{ m.content }} .{% endfor %}").expect("compile");
    assert_eq!(
        t2.render(m, Vec::new(), true).expect("render"),
        "hi .Sure, "
    );
}
