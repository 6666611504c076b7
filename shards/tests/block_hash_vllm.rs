//! Block hashes against a real vLLM 0.32.0 capture (`shared/fixtures/vllm/kv_events`) and
//! against vectors produced by CPython's `pickle` + `hashlib` for cases the capture lacks.
use std::collections::HashMap;

use inferrail_shards::block_hash::{
    as_event_int, extend_block_hashes, hash_block, hash_block_with_none_hash, none_hash_from_seed,
    pickle_block_key, prompt_block_hashes, BlockHash, ExtraKey, NONE_HASH,
};

const BLOCK_STORED: &str = include_str!("fixtures/vllm_block_stored.txt");

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn nums<T: std::str::FromStr>(s: &str) -> Vec<T>
where
    T::Err: std::fmt::Debug,
{
    s.split(',')
        .filter(|x| !x.is_empty())
        .map(|x| x.parse().unwrap())
        .collect()
}

struct Stored {
    seq: u32,
    parent: Option<u64>,
    hashes: Vec<u64>,
    tokens: Vec<u32>,
}

fn events() -> Vec<Stored> {
    BLOCK_STORED
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split('|').collect();
            Stored {
                seq: f[0].parse().unwrap(),
                parent: (f[1] != "-").then(|| f[1].parse().unwrap()),
                hashes: nums(f[2]),
                tokens: nums(f[3]),
            }
        })
        .collect()
}

/// Every BlockStored hash vLLM published (14 events, 179 blocks) is reproduced, chaining on the
/// full digest learned from earlier events, exactly as `kv_decode.py` checked it.
#[test]
fn reproduces_every_block_stored_hash() {
    let evs = events();
    assert_eq!(evs.len(), 14);
    let mut full_by_ext: HashMap<u64, BlockHash> = HashMap::new();
    let mut checked = 0;
    for ev in &evs {
        assert_eq!(ev.tokens.len(), ev.hashes.len() * 32, "seq {}", ev.seq);
        let mut parent: Option<BlockHash> = ev
            .parent
            .map(|p| *full_by_ext.get(&p).expect("parent seen earlier"));
        for (i, &want) in ev.hashes.iter().enumerate() {
            let h = hash_block(parent.as_ref(), &ev.tokens[i * 32..(i + 1) * 32], None);
            assert_eq!(as_event_int(&h), want, "seq {} block {i}", ev.seq);
            full_by_ext.insert(want, h);
            parent = Some(h);
            checked += 1;
        }
    }
    assert_eq!(
        checked,
        6 + 1 + 1 + 1 + 5 + 2 + 1 + 25 + 25 + 27 + 25 + 27 + 27 + 6
    );
}

/// Events whose parent is null start a prompt: `prompt_block_hashes` gives the same chain.
#[test]
fn prompt_block_hashes_match_prefill_events() {
    for ev in events().iter().filter(|e| e.parent.is_none()) {
        let got: Vec<u64> = prompt_block_hashes(&ev.tokens, 32)
            .iter()
            .map(as_event_int)
            .collect();
        assert_eq!(got, ev.hashes, "seq {}", ev.seq);
        // A partial trailing block is not hashed.
        let mut longer = ev.tokens.clone();
        longer.extend_from_slice(&[5; 31]);
        assert_eq!(prompt_block_hashes(&longer, 32).len(), ev.hashes.len());
    }
}

/// The worked example in hash_check.json: NONE_HASH, the pickle bytes and digest of block 6 of
/// seq 0.
#[test]
fn worked_example_bytes() {
    assert_eq!(
        hex(&NONE_HASH),
        "066b1e8987e027138e98701c46128929378935f9b6cd1549105ae6b4f0d71198"
    );
    assert_eq!(none_hash_from_seed("vllm-none-hash"), NONE_HASH);
    let ev = &events()[0];
    let hashes = prompt_block_hashes(&ev.tokens, 32);
    let pickle = pickle_block_key(&hashes[4], &ev.tokens[160..192], None);
    let want = "8005958700000000000000432004bedf85b8d6f3aa3b605c07e5d4b415fd9ce904be2bc272a8a62186985b48e294284d42014d4c014d41064d24014ddc024d96014d1e044dd0034dfe044d14024b544d68014d4c014d78064d52034b574b104d9a014d7b024d11014d96014df8024d3a014dd1034d52014d52034d53014d62014da3014d3b014d31014d3e0274944e87942e";
    assert_eq!(hex(&pickle), want);
    assert_eq!(
        hex(&hashes[5]),
        "0ff4d6b254ebbf76cde4a49a1a4a3c55962faf30cb87ba9b5d1024145809b5bf"
    );
    assert_eq!(as_event_int(&hashes[5]), 6705899514949645759);
    assert_eq!(unhex(want).len(), pickle.len());
}

/// Each hash names its whole prefix: changing any earlier token changes every later hash, and
/// incremental hashing equals hashing at once.
#[test]
fn chaining_property() {
    let tokens: Vec<u32> = (0..200).map(|i| (i * 37 % 2048) as u32).collect();
    let a = prompt_block_hashes(&tokens, 16);
    assert_eq!(a.len(), 12);
    for (i, h) in a.iter().enumerate() {
        let parent = if i == 0 { None } else { Some(&a[i - 1]) };
        assert_eq!(*h, hash_block(parent, &tokens[i * 16..(i + 1) * 16], None));
    }
    let mut changed = tokens.clone();
    changed[40] += 1; // block 2
    let b = prompt_block_hashes(&changed, 16);
    assert_eq!(a[..2], b[..2]);
    for i in 2..12 {
        assert_ne!(a[i], b[i]);
    }
    // Same block contents under a different parent give a different hash.
    assert_ne!(hash_block(None, &tokens[16..32], None), a[1]);
    let mut inc = Vec::new();
    for end in [0, 5, 16, 17, 47, 48, 200] {
        extend_block_hashes(&mut inc, &tokens[..end], 16);
        assert_eq!(inc[..], a[..end / 16]);
    }
}

/// Vectors from CPython 3.11 `hashlib.sha256(pickle.dumps(obj, protocol=5))`, for int widths,
/// tuple sizes, extra keys, PYTHONHASHSEED seeds and pickles longer than one 64 KiB frame.
#[test]
fn cpython_vectors() {
    let h = |parent: Option<&BlockHash>, t: &[u32], e: Option<&[ExtraKey]>| {
        hex(&hash_block(parent, t, e))
    };
    assert_eq!(
        h(
            None,
            &[0, 255, 256, 65535, 65536, (1 << 31) - 1, 1 << 31, u32::MAX],
            None
        ),
        "d3c5c0353aa2f6b5c26e455f78af6431170fcbd87a667493ffa1cb84b1df2861"
    );
    assert_eq!(
        h(None, &[], None),
        "6b385b8167a0f2e87a4d0ef604c1a1398e533330e4b2ad529494414c5810ed15"
    );
    assert_eq!(
        h(None, &[7], None),
        "ad42afba4a7360560993bf7d42e4779856653b1fa26a67489cc9776a59d18d26"
    );
    let t16: Vec<u32> = (0..16).collect();
    assert_eq!(
        h(None, &t16, Some(&[ExtraKey::cache_salt("my-salt")])),
        "a931c0f6ee8aeefaffcecb2528a805467215baabb750546dee82ca779ba24db6"
    );
    let long_salt = "s".repeat(300);
    assert_eq!(
        h(
            None,
            &t16,
            Some(&[
                ExtraKey::lora("adapter", "/p/a"),
                ExtraKey::cache_salt(&long_salt)
            ])
        ),
        "86326d45ad15e774ab591e9f18422eef82f8725d525a08f33ed64f9eff195133"
    );
    let mm = [
        ExtraKey::Tuple(vec![
            ExtraKey::Str("mm".into()),
            ExtraKey::Str("abc".into()),
            ExtraKey::Int(-5),
        ]),
        ExtraKey::Tuple(vec![
            ExtraKey::Str("mm".into()),
            ExtraKey::Str("d".into()),
            ExtraKey::Int(-(1 << 40)),
        ]),
        ExtraKey::Tuple(vec![
            ExtraKey::Str("prompt_embeds".into()),
            ExtraKey::Bytes(vec![1; 32]),
        ]),
    ];
    assert_eq!(
        h(None, &t16, Some(&mm)),
        "dbc63c54894280d3389a5067dbd32e1d5c9450b7e6d8b4c582af484ddc93deeb"
    );
    assert_eq!(
        hex(&none_hash_from_seed("42")),
        "c0bc02c9fc92a4944335649961b9e55cc41b194bece4801e8c6ef0f0f3f5884a"
    );
    let seeded = none_hash_from_seed("42");
    assert_eq!(
        hash_block_with_none_hash(&seeded, None, &[7], None),
        hash_block(Some(&seeded), &[7], None)
    );
    // Multi-frame pickles: 20001 tokens (~100 KB) commit a frame at the first object boundary
    // past 64 KiB; the offset differs with the first token's width.
    for (first, want) in [
        (
            1000u32,
            "dfd606a5b471020633635ee0de6088d789f9c6e0e4a55e83ebf9c8e01516ae95",
        ),
        (
            70000,
            "50beee4835d140cc79255bffb6b3fcc02bf7555e6e7b281cab073bc0f789d0a7",
        ),
    ] {
        let mut t = vec![first];
        t.extend((0..20000u32).map(|i| (i * 7919) % 2048 + 70000));
        assert_eq!(h(None, &t, None), want);
    }
    // A str payload of 64 KiB or more is written outside any frame.
    let big = "x".repeat(70000);
    assert_eq!(
        h(None, &[1, 2], Some(&[ExtraKey::cache_salt(&big)])),
        "d90a5655c17958878eebf0757320acc3d2988b2f787c1cc6b23aecb64d9f2112"
    );
    let big = "y".repeat(70000);
    let t: Vec<u32> = (0..16000).collect();
    assert_eq!(
        h(None, &t, Some(&[ExtraKey::cache_salt(&big)])),
        "d898bef3afc20a3fc684560cbc6048f3239af9c7c777dce6e2964a63d74c8407"
    );
}
