//! Property tests of the builtin tokenizer's guarantees (prefix stability, lossless round trip,
//! generated text retokenizing, multi-turn reuse).

use inferrail_shards::builtin::{
    ends_at_boundary, is_terminator, pieces, BuiltinTokenizer, BOS_ID, MAX_PIECE_BYTES,
};
use proptest::prelude::*;

const T: BuiltinTokenizer = BuiltinTokenizer;

/// Text of every kind: arbitrary Unicode, and text built from vocabulary-like fragments, long
/// words (> 8 bytes), digits, punctuation, multi-byte chars and odd whitespace.
fn text() -> impl Strategy<Value = String> {
    let fragment = prop_oneof![
        Just("the ".to_string()),
        Just("ka ".to_string()),
        Just("moru.".to_string()),
        Just("Hello".to_string()),
        Just("internationalization".to_string()),
        Just("é".to_string()),
        Just("日本語".to_string()),
        Just("🦀".to_string()),
        Just("\u{3000}".to_string()),
        Just("\r\n".to_string()),
        "[0-9]{1,4}",
        "[a-z]{1,12}",
        "[ .,;:!?'\"()\\[\\]{}<>/\\\\\t\n-]",
        any::<char>().prop_map(String::from),
    ];
    prop_oneof![
        any::<String>(),
        "[a-zA-Z0-9 .,!?\n\té漢🦀-]{0,60}",
        prop::collection::vec(fragment, 0..24).prop_map(|v| v.concat()),
    ]
}

fn generate(seed: u64, n: usize) -> Vec<u32> {
    let mut state = seed;
    (0..n).map(|_| T.sample_token(&mut state)).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn round_trip(s in text()) {
        prop_assert_eq!(T.decode(&T.encode(&s)), s.clone());
        let with_bos = T.encode_with_special(&s, true);
        prop_assert_eq!(with_bos[0], BOS_ID);
        prop_assert_eq!(T.decode(&with_bos), s);
    }

    #[test]
    fn pieces_are_well_formed(s in text()) {
        let ps: Vec<&str> = pieces(&s).collect();
        prop_assert_eq!(ps.concat(), s.clone());
        for (i, p) in ps.iter().enumerate() {
            prop_assert!(!p.is_empty() && p.len() <= MAX_PIECE_BYTES);
            let mut chars = p.chars();
            let last = chars.next_back();
            prop_assert!(!chars.any(is_terminator), "terminator inside {:?}", p);
            // Every piece but the last is closed by a terminator, the size limit, or the next
            // char not fitting in the 8 bytes.
            if let Some(next) = ps.get(i + 1) {
                let next_len = next.chars().next().map_or(0, char::len_utf8);
                prop_assert!(
                    last.is_some_and(is_terminator) || p.len() + next_len > MAX_PIECE_BYTES,
                    "{:?} then {:?}", p, next
                );
            }
        }
    }

    #[test]
    fn pieces_are_left_determined(a in text(), b in text()) {
        let pa: Vec<&str> = pieces(&a).collect();
        let ab = format!("{a}{b}");
        let pab: Vec<&str> = pieces(&ab).collect();
        if let Some((last, done)) = pa.split_last() {
            prop_assert_eq!(&pab[..done.len()], done);
            prop_assert!(pab[done.len()].starts_with(last));
            if ends_at_boundary(&a) {
                prop_assert_eq!(pab[done.len()], *last);
            }
        }
    }

    /// encode(a + b) and encode(a) agree on every token except those of a's last piece.
    #[test]
    fn prefix_stable_except_last_piece(a in text(), b in text()) {
        let ea = T.encode(&a);
        let eab = T.encode(&format!("{a}{b}"));
        let last_len = pieces(&a).last().map_or(0, |p| T.encode(p).len());
        let stable = &ea[..ea.len() - last_len];
        prop_assert_eq!(&eab[..stable.len()], stable);
    }

    /// If a ends with a terminator (or otherwise at a boundary), encode(a) is a prefix.
    #[test]
    fn prefix_stable_after_terminator(
        a in text(),
        t in prop::sample::select(vec![' ', '\n', '\t', '.', ',', '!', '?', ')', '\u{3000}']),
        b in text(),
    ) {
        let a = format!("{a}{t}");
        prop_assert!(ends_at_boundary(&a));
        let ea = T.encode(&a);
        let eab = T.encode(&format!("{a}{b}"));
        prop_assert_eq!(&eab[..ea.len()], &ea[..]);
    }

    #[test]
    fn boundary_means_prefix(a in text(), b in text()) {
        if ends_at_boundary(&a) {
            let ea = T.encode(&a);
            prop_assert_eq!(&T.encode(&format!("{a}{b}"))[..ea.len()], &ea[..]);
        }
    }

    #[test]
    fn generated_text_retokenizes(seed in any::<u64>(), n in 0usize..300) {
        let ids = generate(seed, n);
        prop_assert!(ids.iter().all(|&id| T.is_word(id)));
        let text = T.decode(&ids);
        prop_assert_eq!(T.encode(&text), ids);
        prop_assert!(ends_at_boundary(&text));
    }

    /// A multi-turn re-send: previous prompt, the generated reply, then a new user message.
    /// The engine's ids for the first turn (prompt ids, then generated ids) are a prefix of the
    /// ids of the re-sent conversation, so the prefix cache applies.
    #[test]
    fn multi_turn_reuses_prompt_and_generation(
        prompt in text(),
        seed in any::<u64>(),
        n in 0usize..100,
        user in text(),
        bos in any::<bool>(),
    ) {
        // Chat templates end the prompt with a newline/marker; a prompt that ends in an open
        // piece could merge with the reply, exactly as on a real engine.
        let mut prompt = prompt;
        if !ends_at_boundary(&prompt) {
            prompt.push('\n');
        }
        let mut turn1 = T.encode_with_special(&prompt, bos);
        let generated = generate(seed, n);
        turn1.extend_from_slice(&generated);

        let resend = format!("{prompt}{}{user}", T.decode(&generated));
        let turn2 = T.encode_with_special(&resend, bos);
        prop_assert_eq!(&turn2[..turn1.len()], &turn1[..]);
    }

    #[test]
    fn deterministic(s in text()) {
        prop_assert_eq!(T.encode(&s), BuiltinTokenizer::new().encode(&s));
    }
}
