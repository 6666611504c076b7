//! Which content format a chat template expects, decided as vLLM decides it
//! (`_detect_content_format`): `openai` when the template loops over a message's content
//! (`{% for part in message['content'] %}`, or over a variable named `content` outside a
//! macro), else `string`. In `string` format vLLM joins a message's text parts with `\n`; in
//! `openai` format it hands the template the list of parts.
//!
//! vLLM walks the Jinja AST; this walks the template's statements with the same rules:
//! the variables bound to `messages` (`set x = messages[1:]`, transitively, through filters,
//! tests and slices), the loop variables over them, then loops over their `content`.

/// The content format a template expects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContentFormat {
    /// Message content is one string (text parts joined with `\n`).
    String,
    /// Message content is a list of typed parts (`{"type": "text", "text": ...}`).
    OpenAi,
}

/// One `{% ... %}` statement: its text without delimiters and whitespace markers, and whether
/// it sits inside a macro.
struct Stmt<'a> {
    text: &'a str,
    in_macro: bool,
}

fn statements(src: &str) -> Vec<Stmt<'_>> {
    let mut out = Vec::new();
    let mut rest = src;
    let mut macro_depth = 0usize;
    while let Some(start) = rest.find("{%") {
        let after = &rest[start + 2..];
        let Some(end) = after.find("%}") else { break };
        let text = after[..end]
            .trim_start_matches(['-', '+'])
            .trim_end_matches(['-', '+'])
            .trim();
        let first = text.split_whitespace().next().unwrap_or("");
        if first == "endmacro" {
            macro_depth = macro_depth.saturating_sub(1);
        }
        out.push(Stmt {
            text,
            in_macro: macro_depth > 0,
        });
        if first == "macro" {
            macro_depth += 1;
        }
        rest = &after[end + 2..];
    }
    out
}

/// Cuts `expr` at the first top-level occurrence of any of `seps` (outside brackets and
/// quotes).
fn top_level_prefix<'a>(expr: &'a str, seps: &[&str]) -> &'a str {
    let bytes = expr.as_bytes();
    let mut depth = 0i32;
    let mut quote: Option<u8> = None;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        match quote {
            Some(q) if b == q => quote = None,
            Some(_) => {}
            None => match b {
                b'\'' | b'"' => quote = Some(b),
                b'(' | b'[' | b'{' => depth += 1,
                b')' | b']' | b'}' => depth -= 1,
                _ if depth == 0 => {
                    if let Some(sep) = seps.iter().find(|s| expr[i..].starts_with(**s)) {
                        let _ = sep;
                        return &expr[..i];
                    }
                }
                _ => {}
            },
        }
        i += 1;
    }
    expr
}

/// The variable and optional key an expression reads, seen through filters, tests and
/// slices: `messages[1:] | selectattr(...)` reads `("messages", None)`,
/// `message['content']|trim` reads `("message", Some("content"))`.
fn access(expr: &str) -> Option<(&str, Option<&str>)> {
    let mut e = top_level_prefix(expr.trim(), &["|", " is ", " if ", " recursive"]).trim();
    while e.starts_with('(') && e.ends_with(')') {
        e = e[1..e.len() - 1].trim();
    }
    // Strip trailing slices `[a:b]`.
    while e.ends_with(']') {
        let Some(open) = e.rfind('[') else { break };
        if e[open..].contains(':') {
            e = e[..open].trim_end();
        } else {
            break;
        }
    }
    let ident_end = e
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(e.len());
    if ident_end == 0 {
        return None;
    }
    let (name, rest) = e.split_at(ident_end);
    let rest = rest.trim();
    if rest.is_empty() {
        return Some((name, None));
    }
    if let Some(attr) = rest.strip_prefix('.') {
        let attr = attr.trim();
        if !attr.is_empty() && attr.chars().all(|c| c.is_alphanumeric() || c == '_') {
            return Some((name, Some(attr)));
        }
        return None;
    }
    let inner = rest.strip_prefix('[')?.strip_suffix(']')?.trim();
    let key = inner
        .strip_prefix('\'')
        .and_then(|k| k.strip_suffix('\''))
        .or_else(|| inner.strip_prefix('"').and_then(|k| k.strip_suffix('"')))?;
    Some((name, Some(key)))
}

/// `for TARGET in ITER` → (target, iter).
fn for_loop(text: &str) -> Option<(&str, &str)> {
    let body = text.strip_prefix("for ")?;
    let (target, iter) = body.split_once(" in ")?;
    Some((target.trim(), iter.trim()))
}

/// `set NAME = EXPR` → (name, expr).
fn assignment(text: &str) -> Option<(&str, &str)> {
    let body = text.strip_prefix("set ")?;
    let (name, expr) = body.split_once('=')?;
    let name = name.trim();
    if name.is_empty() || !name.chars().all(|c| c.is_alphanumeric() || c == '_') {
        return None;
    }
    Some((name, expr.trim()))
}

/// The content format `template` expects (see the module docs).
pub fn detect(template: &str) -> ContentFormat {
    let stmts = statements(template);
    // Variables bound to `messages`, transitively.
    let mut message_lists: Vec<&str> = vec!["messages"];
    let mut i = 0;
    while i < message_lists.len() {
        let var = message_lists[i];
        for s in &stmts {
            if let Some((name, expr)) = assignment(s.text) {
                if access(expr) == Some((var, None)) && !message_lists.contains(&name) {
                    message_lists.push(name);
                }
            }
        }
        i += 1;
    }
    // Loop variables over those lists.
    let mut message_vars: Vec<&str> = Vec::new();
    for s in &stmts {
        if let Some((target, iter)) = for_loop(s.text) {
            if let Some((var, None)) = access(iter) {
                if message_lists.contains(&var) && !target.contains(',') {
                    message_vars.push(target);
                }
            }
        }
    }
    for s in &stmts {
        if let Some((_, iter)) = for_loop(s.text) {
            match access(iter) {
                Some((var, Some("content"))) if message_vars.contains(&var) => {
                    return ContentFormat::OpenAi
                }
                Some(("content", None)) if !s.in_macro => return ContentFormat::OpenAi,
                _ => {}
            }
        }
    }
    ContentFormat::String
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_templates() {
        for t in [
            "{% for m in messages %}{{ m.role }}: {{ m.content }}{% endfor %}",
            "{%- for message in messages[::-1] %}{% if message.content is string %}x{% endif %}{% endfor %}",
            "{% for x in tools %}{% for c in x.content %}{% endfor %}{% endfor %}",
        ] {
            assert_eq!(detect(t), ContentFormat::String, "{t}");
        }
    }

    #[test]
    fn openai_templates() {
        for t in [
            "{% for m in messages %}{% for p in m['content'] %}{{ p.text }}{% endfor %}{% endfor %}",
            "{%- set loop_messages = messages[1:] %}{%- for message in loop_messages %}{%- for item in message.content | selectattr('type', 'equalto', 'text') %}{% endfor %}{% endfor %}",
            "{% set ms = messages %}{% set rest = ms[1:] %}{% for m in rest %}{% for c in m.content %}{% endfor %}{% endfor %}",
            "{% for m in messages %}{% set content = m.content %}{% for c in content %}{% endfor %}{% endfor %}",
        ] {
            assert_eq!(detect(t), ContentFormat::OpenAi, "{t}");
        }
    }

    #[test]
    fn content_loop_inside_macro_alone_is_not_openai() {
        let t = "{% macro r(content) %}{% for c in content %}{% endfor %}{% endmacro %}{% for m in messages %}{{ m.content }}{% endfor %}";
        assert_eq!(detect(t), ContentFormat::String);
    }
}
