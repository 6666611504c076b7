//! Reads one top-level string member (such as `user`) of a JSON object body without building a
//! tree: members are scanned in order, other values skipped by bracket depth with strings
//! respected, the same way [`crate::model_field`] finds `model`.

/// A cursor over the body; every method returns `None` on a syntax error instead of panicking.
struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.buf.get(self.pos) {
            self.pos += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.buf.get(self.pos).copied()
    }

    fn eat(&mut self, byte: u8) -> Option<()> {
        if self.peek() == Some(byte) {
            self.pos += 1;
            Some(())
        } else {
            None
        }
    }

    /// Reads the string literal at the cursor; decodes it into `out` when one is given.
    fn string(&mut self, mut out: Option<&mut String>) -> Option<()> {
        self.eat(b'"')?;
        let mut run_start = self.pos;
        loop {
            match self.peek()? {
                b'"' => {
                    let run = std::str::from_utf8(&self.buf[run_start..self.pos]).ok()?;
                    if let Some(o) = out.as_deref_mut() {
                        o.push_str(run);
                    }
                    self.pos += 1;
                    return Some(());
                }
                b'\\' => {
                    let run = std::str::from_utf8(&self.buf[run_start..self.pos]).ok()?;
                    if let Some(o) = out.as_deref_mut() {
                        o.push_str(run);
                    }
                    self.pos += 1;
                    let esc = self.peek()?;
                    self.pos += 1;
                    let ch = match esc {
                        b'"' => '"',
                        b'\\' => '\\',
                        b'/' => '/',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'n' => '\n',
                        b'r' => '\r',
                        b't' => '\t',
                        b'u' => self.unicode_escape()?,
                        _ => return None,
                    };
                    if let Some(o) = out.as_deref_mut() {
                        o.push(ch);
                    }
                    run_start = self.pos;
                }
                0x00..=0x1f => return None,
                _ => self.pos += 1,
            }
        }
    }

    fn hex4(&mut self) -> Option<u32> {
        let digits = self.buf.get(self.pos..self.pos + 4)?;
        if !digits.iter().all(u8::is_ascii_hexdigit) {
            return None;
        }
        let v = u32::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()?;
        self.pos += 4;
        Some(v)
    }

    /// Decodes `\uXXXX` (the `\u` already read), joining surrogate pairs; a lone surrogate
    /// becomes U+FFFD.
    fn unicode_escape(&mut self) -> Option<char> {
        let first = self.hex4()?;
        let code = if (0xD800..0xDC00).contains(&first) {
            if self.buf.get(self.pos..self.pos + 2) != Some(b"\\u") {
                return Some('\u{FFFD}');
            }
            self.pos += 2;
            let second = self.hex4()?;
            if !(0xDC00..0xE000).contains(&second) {
                return Some('\u{FFFD}');
            }
            0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00)
        } else {
            first
        };
        Some(char::from_u32(code).unwrap_or('\u{FFFD}'))
    }

    /// Skips one value of any kind; containers by bracket depth, strings respected.
    fn skip_value(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.string(None),
            b'{' | b'[' => {
                let mut depth = 0usize;
                loop {
                    match self.peek()? {
                        b'"' => self.string(None)?,
                        b'{' | b'[' => {
                            depth += 1;
                            self.pos += 1;
                        }
                        b'}' | b']' => {
                            depth = depth.checked_sub(1)?;
                            self.pos += 1;
                            if depth == 0 {
                                return Some(());
                            }
                        }
                        _ => self.pos += 1,
                    }
                }
            }
            b'-' | b'0'..=b'9' | b't' | b'f' | b'n' => {
                let start = self.pos;
                while let Some(b'-' | b'+' | b'.' | b'0'..=b'9' | b'a'..=b'z' | b'E') = self.peek()
                {
                    self.pos += 1;
                }
                let token = &self.buf[start..self.pos];
                let is_literal = matches!(token, b"true" | b"false" | b"null");
                let is_number = token
                    .first()
                    .is_some_and(|b| *b == b'-' || b.is_ascii_digit())
                    && token.iter().all(|b| b"-+.0123456789eE".contains(b));
                (is_literal || is_number).then_some(())
            }
            _ => None,
        }
    }
}

/// The decoded value of the top-level member `key` of the JSON object `body`.
///
/// Guarantees: `None` when the member is absent, when its value is not a string, or when `body`
/// is not a single JSON object (checked at the top level; nested containers are only balanced,
/// their inner grammar is left to the engine). With duplicate keys the last one wins, as in the
/// engines' JSON parsers. Escapes are decoded (a lone surrogate becomes U+FFFD). Never panics, on
/// any bytes.
pub fn find_top_level_string(body: &[u8], key: &str) -> Option<String> {
    let mut c = Cursor { buf: body, pos: 0 };
    c.skip_ws();
    c.eat(b'{')?;
    // Outer None: the last `key` member seen was not a string (or none yet).
    let mut found: Option<String> = None;
    let mut name = String::new();
    c.skip_ws();
    if c.eat(b'}').is_none() {
        loop {
            c.skip_ws();
            name.clear();
            c.string(Some(&mut name))?;
            c.skip_ws();
            c.eat(b':')?;
            c.skip_ws();
            if name == key {
                if c.peek() == Some(b'"') {
                    let mut value = String::new();
                    c.string(Some(&mut value))?;
                    found = Some(value);
                } else {
                    c.skip_value()?;
                    found = None;
                }
            } else {
                c.skip_value()?;
            }
            c.skip_ws();
            match c.peek()? {
                b',' => c.pos += 1,
                b'}' => {
                    c.pos += 1;
                    break;
                }
                _ => return None,
            }
        }
    }
    c.skip_ws();
    if c.pos != body.len() {
        return None;
    }
    found
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
