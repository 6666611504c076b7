//! Finds the top-level `"model"` member of a JSON request body without parsing the rest, and
//! splices a new model name in by rewriting only those bytes.

use std::borrow::Cow;
use std::ops::Range;

/// Where the body names its model, or where a name can be inserted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelField<'a> {
    /// `"model": "<name>"`; `value` spans the string literal including its quotes.
    Present {
        /// The unescaped model name, borrowed from the body unless it has escapes.
        name: Cow<'a, str>,
        /// Byte range of the string literal, quotes included.
        value: Range<usize>,
    },
    /// No top-level `model` member.
    Absent {
        /// Offset just after the opening `{`.
        insert_at: usize,
        /// The object has no members at all.
        empty_object: bool,
    },
}

/// Why the body could not be read far enough to find `model`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ModelFieldError {
    /// The body is not a JSON object (syntax error at this byte offset).
    #[error("request body is not a valid JSON object (at byte {0})")]
    NotJsonObject(usize),
    /// `model` is present but not a string.
    #[error("`model` must be a string")]
    NotAString,
}

/// Length of the leading run of bytes that need no attention inside a JSON string: anything but
/// a quote, a backslash or a control byte (< 0x20). The first [`PRELUDE_BYTES`] are checked a
/// word at a time; past them the quote or backslash that ends the run is found with `memchr2`
/// (vectorised) and the run checked for control bytes ([`long_plain_run`]). Message contents are
/// most of a body's bytes, so this is the scan that costs.
fn plain_run(bytes: &[u8]) -> usize {
    // Most strings of a request body are short (keys, roles, names): the first bytes are looked
    // at eight at a time in a register, which costs less than setting up the vectorised search.
    let mut start = 0;
    while start < PRELUDE_BYTES && start + 8 <= bytes.len() {
        let hits = special_bytes(word_at(bytes, start));
        if hits != 0 {
            return start + (hits.trailing_zeros() / 8) as usize;
        }
        start += 8;
    }
    if start + 8 > bytes.len() {
        let tail = &bytes[start..];
        return start
            + tail
                .iter()
                .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
                .unwrap_or(tail.len());
    }
    start + long_plain_run(&bytes[start..])
}

/// Bytes [`plain_run`] examines a word at a time before it hands a long string to `memchr2`.
const PRELUDE_BYTES: usize = 32;

/// The eight bytes at `at` (which has eight bytes after it) as a little-endian word.
fn word_at(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

/// The high bit of each byte of `w` that is a quote, a backslash or a control byte (< 0x20),
/// exact at the lowest one: the borrows of the subtractions can only mark bytes above a byte
/// that is marked rightly, so `trailing_zeros / 8` is the first such byte.
fn special_bytes(w: u64) -> u64 {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero_byte = |v: u64| v.wrapping_sub(ONES) & !v;
    let quote = zero_byte(w ^ (u64::from(b'"') * ONES));
    let backslash = zero_byte(w ^ (u64::from(b'\\') * ONES));
    let control = w.wrapping_sub(0x20 * ONES) & !w;
    (quote | backslash | control) & HIGH
}

/// [`plain_run`] for the rest of a long string: `memchr2` to the quote or backslash, then the
/// run is checked for control bytes with a minimum over it (vectorised by the compiler).
fn long_plain_run(bytes: &[u8]) -> usize {
    let end = memchr::memchr2(b'"', b'\\', bytes).unwrap_or(bytes.len());
    let run = &bytes[..end];
    if run.iter().fold(u8::MAX, |low, &b| low.min(b)) >= 0x20 {
        return end;
    }
    run.iter().position(|&b| b < 0x20).unwrap_or(end)
}

struct Scanner<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Scanner<'a> {
    fn fail<T>(&self) -> Result<T, ModelFieldError> {
        Err(ModelFieldError::NotJsonObject(self.pos))
    }

    fn skip_ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.buf.get(self.pos) {
            self.pos += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.buf.get(self.pos).copied()
    }

    fn expect(&mut self, byte: u8) -> Result<(), ModelFieldError> {
        if self.peek() == Some(byte) {
            self.pos += 1;
            Ok(())
        } else {
            self.fail()
        }
    }

    /// Reads a string literal at `pos` (which must be `"`), decoded: borrowed from the body
    /// unless it has escapes; its bytes must be UTF-8.
    fn string(&mut self) -> Result<Cow<'a, str>, ModelFieldError> {
        self.expect(b'"')?;
        let mut out: Option<String> = None;
        let mut run_start = self.pos;
        loop {
            // Plain bytes run until a quote, a backslash or a control byte: skip the run in one
            // tight pass.
            self.pos += plain_run(self.buf.get(self.pos..).unwrap_or_default());
            match self.peek() {
                Some(b'"') => {
                    let run = self.utf8(run_start, self.pos)?;
                    self.pos += 1;
                    return Ok(match out {
                        None => Cow::Borrowed(run),
                        Some(mut owned) => {
                            owned.push_str(run);
                            Cow::Owned(owned)
                        }
                    });
                }
                Some(b'\\') => {
                    let run = self.utf8(run_start, self.pos)?;
                    let owned = out.get_or_insert_with(String::new);
                    owned.push_str(run);
                    owned.push(self.escape()?);
                    run_start = self.pos;
                }
                _ => return self.fail(),
            }
        }
    }

    /// Reads the escape at `pos` (which must be its backslash) and returns the character it
    /// stands for; fails past the backslash on an escape JSON does not have.
    fn escape(&mut self) -> Result<char, ModelFieldError> {
        self.pos += 1;
        let esc = self.peek().map_or_else(|| self.fail(), Ok)?;
        self.pos += 1;
        Ok(match esc {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => self.unicode_escape()?,
            _ => return self.fail(),
        })
    }

    /// Reads a member key at `pos` as bytes. A key without escapes is the body's own bytes,
    /// checked as UTF-8 only when it is not ASCII (a cheap test, where the UTF-8 check of a short
    /// key costs more than the rest of reading it); an escaped key is decoded as a string.
    fn key(&mut self) -> Result<Cow<'a, [u8]>, ModelFieldError> {
        let start = self.pos;
        self.expect(b'"')?;
        let run_end = self.pos + plain_run(self.buf.get(self.pos..).unwrap_or_default());
        if self.buf.get(run_end) == Some(&b'"') {
            let raw = &self.buf[self.pos..run_end];
            if !raw.is_ascii() {
                self.utf8(self.pos, run_end)?;
            }
            self.pos = run_end + 1;
            return Ok(Cow::Borrowed(raw));
        }
        self.pos = start;
        Ok(match self.string()? {
            Cow::Borrowed(text) => Cow::Borrowed(text.as_bytes()),
            Cow::Owned(text) => Cow::Owned(text.into_bytes()),
        })
    }

    fn utf8(&self, start: usize, end: usize) -> Result<&'a str, ModelFieldError> {
        std::str::from_utf8(&self.buf[start..end])
            .map_err(|_| ModelFieldError::NotJsonObject(start))
    }

    fn hex4(&mut self) -> Result<u32, ModelFieldError> {
        let digits = self
            .buf
            .get(self.pos..self.pos + 4)
            .map_or_else(|| self.fail(), Ok)?;
        let text =
            std::str::from_utf8(digits).map_err(|_| ModelFieldError::NotJsonObject(self.pos))?;
        let v =
            u32::from_str_radix(text, 16).map_err(|_| ModelFieldError::NotJsonObject(self.pos))?;
        self.pos += 4;
        Ok(v)
    }

    fn unicode_escape(&mut self) -> Result<char, ModelFieldError> {
        let first = self.hex4()?;
        let code = if (0xD800..0xDC00).contains(&first) {
            if self.buf.get(self.pos..self.pos + 2) != Some(b"\\u") {
                return Ok('\u{FFFD}');
            }
            self.pos += 2;
            let second = self.hex4()?;
            if !(0xDC00..0xE000).contains(&second) {
                return Ok('\u{FFFD}');
            }
            0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00)
        } else {
            first
        };
        Ok(char::from_u32(code).unwrap_or('\u{FFFD}'))
    }

    /// Skips the string literal at `pos` (which must be `"`) without decoding it: the same
    /// quotes, escapes and control bytes as [`Scanner::string`], but its bytes are not checked
    /// as UTF-8 (a skipped value's text is the engine's to judge) and nothing is built.
    fn skip_string(&mut self) -> Result<(), ModelFieldError> {
        self.expect(b'"')?;
        loop {
            self.pos += plain_run(self.buf.get(self.pos..).unwrap_or_default());
            match self.peek() {
                Some(b'"') => {
                    self.pos += 1;
                    return Ok(());
                }
                Some(b'\\') => {
                    self.escape()?;
                }
                _ => return self.fail(),
            }
        }
    }

    /// Skips the object or array at `pos` by bracket depth, strings respected; its inner
    /// grammar is left to the engine.
    fn skip_container(&mut self) -> Result<(), ModelFieldError> {
        let buf = self.buf;
        let mut pos = self.pos;
        let mut depth = 0usize;
        while let Some(&b) = buf.get(pos) {
            match b {
                b'"' => {
                    self.pos = pos;
                    self.skip_string()?;
                    pos = self.pos;
                    continue;
                }
                b'{' | b'[' => depth += 1,
                b'}' | b']' => {
                    depth -= 1;
                    if depth == 0 {
                        self.pos = pos + 1;
                        return Ok(());
                    }
                }
                _ => {}
            }
            pos += 1;
        }
        self.pos = pos;
        self.fail()
    }

    /// Skips one JSON value of any kind. Nested containers are skipped by bracket depth with
    /// strings respected; their inner grammar is left to the engine.
    fn skip_value(&mut self) -> Result<(), ModelFieldError> {
        match self.peek() {
            Some(b'"') => self.skip_string(),
            Some(b'{' | b'[') => self.skip_container(),
            Some(b'-' | b'0'..=b'9' | b't' | b'f' | b'n') => {
                let start = self.pos;
                while let Some(b'-' | b'+' | b'.' | b'0'..=b'9' | b'a'..=b'z' | b'E') = self.peek()
                {
                    self.pos += 1;
                }
                let token = &self.buf[start..self.pos];
                let is_literal = matches!(token, b"true" | b"false" | b"null");
                let is_number = (token[0] == b'-' || token[0].is_ascii_digit())
                    && token.iter().all(|b| b"-+.0123456789eE".contains(b));
                if is_literal || is_number {
                    Ok(())
                } else {
                    self.pos = start;
                    self.fail()
                }
            }
            _ => self.fail(),
        }
    }
}

/// Finds the top-level `model` member of `body`. With duplicate keys the last one wins, as in
/// Python's `json` module that vLLM uses, so the gateway routes on the name the engine will read.
pub fn find_model(body: &[u8]) -> Result<ModelField<'_>, ModelFieldError> {
    find_string_member(body, "model")
}

/// Finds the top-level string member `key` of a JSON object body, scanning members in order and
/// skipping other values (last duplicate wins). `NotAString` when the last `key` is not a string.
pub(crate) fn find_string_member<'a>(
    body: &'a [u8],
    key: &str,
) -> Result<ModelField<'a>, ModelFieldError> {
    let wanted = key;
    let mut s = Scanner { buf: body, pos: 0 };
    s.skip_ws();
    s.expect(b'{')?;
    let insert_at = s.pos;
    let mut found: Option<ModelField<'a>> = None;
    let mut members = 0usize;
    let mut model_not_string = false;
    s.skip_ws();
    if s.peek() == Some(b'}') {
        s.pos += 1;
    } else {
        loop {
            s.skip_ws();
            let key = s.key()?;
            s.skip_ws();
            s.expect(b':')?;
            s.skip_ws();
            members += 1;
            if *key == *wanted.as_bytes() {
                if s.peek() == Some(b'"') {
                    let start = s.pos;
                    let name = s.string()?;
                    found = Some(ModelField::Present {
                        name,
                        value: start..s.pos,
                    });
                    model_not_string = false;
                } else {
                    s.skip_value()?;
                    found = None;
                    model_not_string = true;
                }
            } else {
                s.skip_value()?;
            }
            s.skip_ws();
            match s.peek() {
                Some(b',') => s.pos += 1,
                Some(b'}') => {
                    s.pos += 1;
                    break;
                }
                _ => return s.fail(),
            }
        }
    }
    s.skip_ws();
    if s.pos != body.len() {
        return s.fail();
    }
    if model_not_string {
        return Err(ModelFieldError::NotAString);
    }
    Ok(found.unwrap_or(ModelField::Absent {
        insert_at,
        empty_object: members == 0,
    }))
}

/// Appends `text` as a JSON string literal (quoted and escaped).
pub fn push_json_string(out: &mut Vec<u8>, text: &str) {
    out.push(b'"');
    for ch in text.chars() {
        match ch {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            '\n' => out.extend_from_slice(b"\\n"),
            '\r' => out.extend_from_slice(b"\\r"),
            '\t' => out.extend_from_slice(b"\\t"),
            c if (c as u32) < 0x20 => {
                out.extend_from_slice(format!("\\u{:04x}", c as u32).as_bytes())
            }
            c => {
                let mut tmp = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut tmp).as_bytes());
            }
        }
    }
    out.push(b'"');
}

/// Returns `body` with its model set to `name`: only the model's string literal is replaced, or
/// `"model":"<name>"` is inserted as the first member. Every other byte is kept.
pub fn splice_model(body: &[u8], field: &ModelField<'_>, name: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + name.len() + 16);
    match field {
        ModelField::Present { value, .. } => {
            out.extend_from_slice(&body[..value.start]);
            push_json_string(&mut out, name);
            out.extend_from_slice(&body[value.end..]);
        }
        ModelField::Absent {
            insert_at,
            empty_object,
        } => {
            out.extend_from_slice(&body[..*insert_at]);
            out.extend_from_slice(b"\"model\":");
            push_json_string(&mut out, name);
            if !empty_object {
                out.push(b',');
            }
            out.extend_from_slice(&body[*insert_at..]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes that stress a string's scanner: quotes, backslashes, escape letters, hex digits,
    /// control bytes and non-ASCII, in runs long enough to pass the word-at-a-time prelude.
    fn string_soup() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        proptest::collection::vec(
            prop_oneof![
                Just(b'"'),
                Just(b'\\'),
                Just(b'u'),
                Just(b'n'),
                Just(b'x'),
                prop::sample::select(b"0123456789abcdefABCDEF".to_vec()),
                prop::sample::select(b"DdC".to_vec()),
                0x00u8..0x20,
                0x20u8..0x7f,
                0x80u8..=0xff,
            ],
            0..80,
        )
    }

    proptest::proptest! {
        /// Skipping a string accepts and refuses what reading it does and stops at the same
        /// offset, UTF-8 aside: the reference reads the same bytes with every non-ASCII byte
        /// made `z` (never a quote, backslash, control byte, escape letter or hex digit, so
        /// the string's shape and its escapes' validity are the same, and the result is UTF-8).
        #[test]
        fn skip_string_agrees_with_reading_it(tail in string_soup(), plain in 0usize..70) {
            let mut body = vec![b'"'];
            body.extend(std::iter::repeat_n(b'a', plain));
            body.extend(tail);
            let ascii: Vec<u8> =
                body.iter().map(|&b| if b.is_ascii() { b } else { b'z' }).collect();
            let mut read = Scanner { buf: &ascii, pos: 0 };
            let mut skip = Scanner { buf: &body, pos: 0 };
            let read_result = read.string().map(|_| ());
            let skip_result = skip.skip_string();
            proptest::prop_assert_eq!(read_result, skip_result);
            proptest::prop_assert_eq!(read.pos, skip.pos);
        }
    }

    proptest::proptest! {
        /// The word-at-a-time run equals the byte-by-byte one, special bytes anywhere.
        #[test]
        fn plain_run_matches_a_byte_loop(
            bytes in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::prelude::any::<u8>(),
                    proptest::prelude::Just(b'"'),
                    proptest::prelude::Just(b'\\'),
                    0x20u8..0x7f,
                    0x80u8..=0xff,
                ],
                0..64,
            )
        ) {
            let naive = bytes
                .iter()
                .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
                .unwrap_or(bytes.len());
            proptest::prop_assert_eq!(plain_run(&bytes), naive);
        }
    }

    proptest::proptest! {
        /// The same for long runs: a plain stretch (past the word-at-a-time prelude), then
        /// anything.
        #[test]
        fn plain_run_matches_a_byte_loop_past_the_prelude(
            plain in proptest::collection::vec(
                proptest::prop_oneof![0x20u8..=0x21, 0x23u8..0x5c, 0x5du8..=0xff],
                0..200,
            ),
            rest in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40),
        ) {
            let mut bytes = plain;
            bytes.extend_from_slice(&rest);
            let naive = bytes
                .iter()
                .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
                .unwrap_or(bytes.len());
            proptest::prop_assert_eq!(plain_run(&bytes), naive);
        }
    }

    #[test]
    fn plain_run_stops_at_each_special_byte_in_every_lane() {
        for special in [b'"', b'\\', 0x00, 0x1f, b'\n'] {
            for at in 0..20 {
                let mut bytes = vec![b'a'; 20];
                bytes[at] = special;
                assert_eq!(plain_run(&bytes), at, "{special:#x} at {at}");
            }
        }
        assert_eq!(
            plain_run(&[0x20, 0x7f, 0x80, 0xff, b'!', b'#', 0x21, 0x5b, 0x5d]),
            9
        );
        assert_eq!(plain_run(b""), 0);
    }
    use proptest::prelude::*;
    use serde_json::{json, Value};

    #[test]
    fn finds_model_and_splices_alias() {
        let body = br#"{"messages":[{"role":"user","content":"{\"model\":\"x\"}"}], "model" : "llama", "n":1}"#;
        let field = find_model(body).unwrap();
        let ModelField::Present { name, .. } = &field else {
            panic!("expected model")
        };
        assert_eq!(name, "llama");
        let out = splice_model(body, &field, "meta/Llama-3");
        assert_eq!(
            std::str::from_utf8(&out).unwrap(),
            r#"{"messages":[{"role":"user","content":"{\"model\":\"x\"}"}], "model" : "meta/Llama-3", "n":1}"#
        );
    }

    #[test]
    fn inserts_missing_model() {
        for (body, want) in [
            (&br#"{"prompt":"hi"}"#[..], r#"{"model":"m","prompt":"hi"}"#),
            (&b" { } "[..], r#" {"model":"m" } "#),
        ] {
            let field = find_model(body).unwrap();
            assert!(matches!(field, ModelField::Absent { .. }));
            let out = splice_model(body, &field, "m");
            assert_eq!(std::str::from_utf8(&out).unwrap(), want);
            let v: Value = serde_json::from_slice(&out).unwrap();
            assert_eq!(v["model"], "m");
        }
    }

    #[test]
    fn errors() {
        assert_eq!(
            find_model(br#"{"model": 3}"#),
            Err(ModelFieldError::NotAString)
        );
        assert!(matches!(
            find_model(br#"{"model": "#),
            Err(ModelFieldError::NotJsonObject(_))
        ));
        assert!(matches!(
            find_model(br#"[1]"#),
            Err(ModelFieldError::NotJsonObject(0))
        ));
        assert!(matches!(
            find_model(br#"{"a":1} x"#),
            Err(ModelFieldError::NotJsonObject(_))
        ));
        assert!(matches!(
            find_model(br#"{"a":tru}"#),
            Err(ModelFieldError::NotJsonObject(_))
        ));
        assert!(matches!(
            find_model(b""),
            Err(ModelFieldError::NotJsonObject(0))
        ));
    }

    #[test]
    fn escaped_key_and_last_duplicate_win() {
        let body = br#"{"model":"a","mod\u0065l":"b\u00e9\ud83d\ude00"}"#;
        match find_model(body).unwrap() {
            ModelField::Present { name, .. } => assert_eq!(name, "b\u{e9}\u{1F600}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn keys_are_checked_as_utf8_whatever_their_bytes() {
        // A non-ASCII key is fine and is not `model`; one that is not UTF-8 makes the body not
        // JSON, escaped or not.
        let ok = "{\"mod\u{e9}l\":\"x\",\"model\":\"m\"}".as_bytes();
        assert!(matches!(find_model(ok), Ok(ModelField::Present { name, .. }) if name == "m"));
        let mut bad = b"{\"mo".to_vec();
        bad.push(0xff);
        bad.extend_from_slice(b"del\":\"x\",\"model\":\"m\"}");
        assert!(matches!(
            find_model(&bad),
            Err(ModelFieldError::NotJsonObject(_))
        ));
        let mut bad_escaped = br#"{"m\u006f"#.to_vec();
        bad_escaped.push(0xfe);
        bad_escaped.extend_from_slice(br#"":1,"model":"m"}"#);
        assert!(matches!(
            find_model(&bad_escaped),
            Err(ModelFieldError::NotJsonObject(_))
        ));
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
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map(any::<String>(), inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn agrees_with_serde_json(
            members in proptest::collection::btree_map("[a-z]{0,6}|model", arb_json(), 0..6),
            pretty in any::<bool>(),
            new_name in any::<String>(),
        ) {
            let obj = Value::Object(members.into_iter().collect());
            let body = if pretty { serde_json::to_vec_pretty(&obj) } else { serde_json::to_vec(&obj) }.unwrap();
            let got = find_model(&body);
            match obj.get("model") {
                Some(Value::String(s)) => {
                    let field = got.unwrap();
                    let is_match = matches!(&field, ModelField::Present { name, .. } if name == s);
                    prop_assert!(is_match);
                    let spliced: Value = serde_json::from_slice(&splice_model(&body, &field, &new_name)).unwrap();
                    let mut expected: Value = serde_json::from_slice(&body).unwrap();
                    expected["model"] = Value::String(new_name);
                    prop_assert_eq!(spliced, expected);
                }
                Some(_) => prop_assert_eq!(got, Err(ModelFieldError::NotAString)),
                None => {
                    let field = got.unwrap();
                    let is_absent = matches!(field, ModelField::Absent { .. });
                    prop_assert!(is_absent);
                    let spliced: Value = serde_json::from_slice(&splice_model(&body, &field, &new_name)).unwrap();
                    let mut expected: Value = serde_json::from_slice(&body).unwrap();
                    expected["model"] = Value::String(new_name);
                    prop_assert_eq!(spliced, expected);
                }
            }
        }

        #[test]
        fn never_panics(body in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = find_model(&body);
        }
    }
}
