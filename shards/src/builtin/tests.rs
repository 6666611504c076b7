//! Unit tests over the whole vocabulary and a few pinned examples.

use std::collections::HashSet;

use super::*;

const T: BuiltinTokenizer = BuiltinTokenizer;

#[test]
fn vocabulary_is_pinned() {
    // Changing the vocabulary changes the ids every simulator and gateway computes; if this
    // fails on purpose, update the pin and say so in the change log.
    assert_eq!(T.fingerprint(), 0x7789_a8af_14ab_c21b);
    assert_eq!(vocab().pieces.len(), VOCAB_SIZE as usize);
    assert_eq!(T.vocab_size(), VOCAB_SIZE);
    assert_eq!(NAME, "builtin:sim");
}

#[test]
fn pieces_are_distinct_and_index_is_inverse() {
    let v = vocab();
    let distinct: HashSet<&[u8]> = v.pieces.iter().map(|p| &p[..]).collect();
    assert_eq!(distinct.len(), VOCAB_SIZE as usize);
    assert_eq!(v.index.len(), VOCAB_SIZE as usize);
    for id in 0..VOCAB_SIZE {
        let piece = T.token_to_piece(id).expect("id below VOCAB_SIZE");
        assert_eq!(T.piece_to_id(piece), Some(id));
    }
    assert_eq!(T.token_to_piece(VOCAB_SIZE), None);
    assert_eq!(T.token_to_piece(u32::MAX), None);
}

#[test]
fn special_and_byte_layout() {
    assert_eq!((T.bos_id(), T.eos_id()), (BOS_ID, EOS_ID));
    assert_eq!(T.token_to_str(UNK_ID), Some("<unk>"));
    assert_eq!(T.token_to_str(BOS_ID), Some("<s>"));
    assert_eq!(T.token_to_str(EOS_ID), Some("</s>"));
    for b in 0..=u8::MAX {
        assert_eq!(T.token_to_piece(BYTE_BASE + u32::from(b)), Some(&[b][..]));
    }
    assert_eq!(T.token_to_str(BYTE_BASE + 0xC3), None);
    assert_eq!(FIRST_WORD_ID, 259);
}

#[test]
fn every_word_is_one_complete_piece_that_encodes_to_itself() {
    for id in FIRST_WORD_ID..VOCAB_SIZE {
        assert!(T.is_word(id));
        let word = T.token_to_str(id).expect("words are UTF-8");
        assert!(word.len() >= 2 && word.len() <= MAX_PIECE_BYTES, "{word:?}");
        assert_eq!(pieces(word).collect::<Vec<_>>(), vec![word], "{word:?}");
        assert!(ends_at_boundary(word), "{word:?}");
        assert_eq!(T.encode(word), vec![id], "{word:?}");
    }
    for id in 0..FIRST_WORD_ID {
        assert!(!T.is_word(id));
    }
    assert!(!T.is_word(VOCAB_SIZE));
}

#[test]
fn pieces_examples() {
    let p = |s| pieces(s).collect::<Vec<_>>();
    assert_eq!(p(""), Vec::<&str>::new());
    assert_eq!(p("hello, world!\n"), ["hello,", " ", "world!", "\n"]);
    assert_eq!(p("  a"), [" ", " ", "a"]);
    assert_eq!(
        p("internationalization "),
        ["internat", "ionaliza", "tion "]
    );
    // 7 ASCII bytes then a 2-byte char: cut at 7, never split a char.
    assert_eq!(p("abcdefgé"), ["abcdefg", "é"]);
    assert_eq!(p("日本語です"), ["日本", "語で", "す"]);
    assert_eq!(p("🦀🦀🦀"), ["🦀🦀", "🦀"]);
    // Unicode whitespace terminates too.
    assert_eq!(p("a\u{3000}b"), ["a\u{3000}", "b"]);
}

#[test]
fn ends_at_boundary_examples() {
    assert!(ends_at_boundary(""));
    assert!(ends_at_boundary("hi "));
    assert!(ends_at_boundary("hi."));
    assert!(ends_at_boundary("abcdefgh"));
    assert!(!ends_at_boundary("hi"));
    assert!(!ends_at_boundary("abcdefg"));
}

#[test]
fn encode_examples() {
    let the = T.piece_to_id("the ").expect("english word");
    let ka = T.piece_to_id("ka ").expect("syllable word");
    assert!(T.is_word(the) && T.is_word(ka));
    assert_eq!(T.encode("the ka "), vec![the, ka]);
    // Unknown piece: one byte-fallback id per byte.
    assert_eq!(
        T.encode("xq"),
        vec![BYTE_BASE + u32::from(b'x'), BYTE_BASE + u32::from(b'q')]
    );
    // Single terminators are byte tokens.
    assert_eq!(T.encode(" "), vec![BYTE_BASE + 32]);
    assert_eq!(T.encode_with_special("the ", true), vec![BOS_ID, the]);
    assert_eq!(T.encode_with_special("the ", false), vec![the]);
    assert_eq!(T.encode(""), Vec::<u32>::new());
}

#[test]
fn special_strings_are_not_special_tokens() {
    for text in ["<s>", "</s>", "<unk>", "<s>hello</s>"] {
        let ids = T.encode(text);
        assert!(ids.iter().all(|&id| id >= BYTE_BASE), "{text:?} -> {ids:?}");
        assert_eq!(T.decode(&ids), text);
    }
}

#[test]
fn decode_skips_or_keeps_specials() {
    let the = T.piece_to_id("the ").expect("english word");
    let ids = [BOS_ID, the, UNK_ID, EOS_ID, VOCAB_SIZE, u32::MAX];
    assert_eq!(T.decode(&ids), "the ");
    assert_eq!(T.decode_with_special(&ids), "<s>the <unk></s>");
    // Broken UTF-8 from byte tokens becomes U+FFFD instead of failing.
    assert_eq!(T.decode(&[BYTE_BASE + 0xC3]), "\u{FFFD}");
    assert_eq!(T.decode(&[BYTE_BASE + 0xC3, BYTE_BASE + 0xA9]), "é");
}

#[test]
fn sampler_is_pinned_and_deterministic() {
    let run = |seed: u64| {
        let mut s = seed;
        (0..8).map(|_| T.sample_token(&mut s)).collect::<Vec<_>>()
    };
    assert_eq!(
        run(42),
        [23797, 5334, 9102, 11183, 1466, 27817, 7191, 25671]
    );
    assert_eq!(
        T.decode(&run(42)),
        "yapi.fivi,hura,lefa.bata pusila gore\nzeme "
    );
    assert_eq!(run(7), run(7));
    assert_ne!(run(7), run(8));
}

#[test]
fn sampler_covers_the_word_range() {
    let mut s = 1;
    let mut lo = u32::MAX;
    let mut hi = 0;
    for _ in 0..200_000 {
        let id = T.sample_token(&mut s);
        assert!(T.is_word(id));
        lo = lo.min(id);
        hi = hi.max(id);
    }
    assert!(
        lo < FIRST_WORD_ID + 10 && hi > VOCAB_SIZE - 10,
        "{lo}..{hi}"
    );
}

#[test]
fn tokenizer_is_usable_from_many_threads() {
    let handles: Vec<_> = (0..4)
        .map(|i| std::thread::spawn(move || T.encode(&format!("thread {i} says ka mo. "))))
        .collect();
    for (i, h) in handles.into_iter().enumerate() {
        let ids = h.join().expect("no panic");
        assert_eq!(T.decode(&ids), format!("thread {i} says ka mo. "));
    }
}
