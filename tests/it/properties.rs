//! Property tests (`proptest`): the sealed token and the form validation, on arbitrary input.
//!
//! - For arbitrary claims, sealing then opening gives the claims back, and any other binding is
//!   refused.
//! - Arbitrary tokens, and every kind of mutation of a valid token (byte changes, truncation,
//!   extension, key id swaps, base64 padding and alphabet variants, non-canonical trailing bits,
//!   re-encoded claims JSON with reordered, duplicated or escaped keys, parts spliced from
//!   another token), never open.
//! - Through the whole layer, for arbitrary forms inside the MCP subset and arbitrary answers:
//!   the inner service only ever receives content that the form accepts (by `jsonschema` and by
//!   an independent check written here), and every answer the form accepts does reach it.
//! - Through the whole layer, however the inner service spells its answer: an `input_required`
//!   reaches the client only sealed, and any other answer byte for byte.
//! - The layer's one-pass JSON reader takes every JSON object, compact or pretty, and reads it as
//!   serde_json does; on arbitrary text it never reads otherwise than serde_json.
//!
//! The number of cases per property is set below; `PROPTEST_CASES` overrides them all.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use bytes::Bytes;
use http::{Request, Response, header};
use proptest::prelude::*;
use proptest::test_runner::Config as ProptestConfig;
use serde_json::{Map, Number, Value, json};
use tower_elicitation::__fuzz::{
    Binding, Chunks, Opening, SealedTokens, args_digest, args_digest_json, exchange,
    json_reads_agree, json_skims, open_token, seal_claims_json, sse_split,
};
use tower_elicitation::{ElicitationLayer, Keyring};

const SKEW: u64 = 60;
const NOW: u64 = 1_800_000_000;

/// `cases` per property unless `PROPTEST_CASES` is set.
fn cases(cases: u32) -> ProptestConfig {
    let mut config = ProptestConfig::default();
    if std::env::var_os("PROPTEST_CASES").is_none() {
        config.cases = cases;
    }
    config
}

fn k1() -> Keyring {
    Keyring::new("k1", [7u8; 32]).unwrap()
}

/// k1 signs; k2 (another key) and K1 (k1's key under another id) verify too.
fn ring() -> Keyring {
    k1().with_verify_key("k2", [8u8; 32])
        .unwrap()
        .with_verify_key("K1", [7u8; 32])
        .unwrap()
}

// ---------------------------------------------------------------------------------------------
// Strategies.

fn json_leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter_map("finite", Number::from_f64)
            .prop_map(Value::Number),
        any::<String>().prop_map(Value::String),
        "[a-z]{0,8}".prop_map(Value::String),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    json_leaf().prop_recursive(3, 24, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::btree_map(any::<String>(), inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn json_map() -> impl Strategy<Value = Map<String, Value>> {
    prop::collection::btree_map("[a-z-]{1,12}", json_value(), 0..4)
        .prop_map(|m| m.into_iter().collect())
}

/// Claims as the token carries them: every field, optional ones present or not.
fn claims() -> impl Strategy<Value = Value> {
    (
        (
            any::<u64>(),
            0u64..2_000_000,
            any::<String>(),
            any::<String>(),
        ),
        (
            "[A-Za-z0-9_-]{22}",
            proptest::option::of(any::<String>()),
            any::<u32>(),
            proptest::option::of(any::<String>()),
        ),
        (json_map(), json_map(), json_map()),
    )
        .prop_map(|((iat, ttl, m, t), (a, aud, r, s), (q, k, g))| {
            let mut claims = json!({"v": 1, "iat": iat, "exp": iat.saturating_add(ttl),
                "m": m, "t": t, "a": a, "r": r});
            let object = claims.as_object_mut().unwrap();
            if let Some(aud) = aud {
                object.insert("aud".into(), aud.into());
            }
            if let Some(s) = s {
                object.insert("s".into(), s.into());
            }
            for (name, map) in [("q", q), ("k", k), ("g", g)] {
                if !map.is_empty() {
                    object.insert(name.into(), Value::Object(map));
                }
            }
            claims
        })
}

fn text(claims: &Value, key: &str) -> String {
    claims[key].as_str().unwrap_or_default().to_owned()
}

// ---------------------------------------------------------------------------------------------
// Seal and open.

proptest! {
    #![proptest_config(cases(1000))]

    #[test]
    fn seal_then_open_gives_the_claims_back(
        claims in claims(),
        principal in proptest::option::of(prop::collection::vec(any::<u8>(), 0..40)),
    ) {
        let json = serde_json::to_vec(&claims).unwrap();
        let kept = SealedTokens::default();
        let token = kept.seal_claims_json(&ring(), &json, principal.as_deref()).expect("claims seal");
        // Sealed the same way, not kept: the same token.
        let unkept = seal_claims_json(&ring(), &json, principal.as_deref());
        prop_assert_eq!(unkept.as_deref(), Some(token.as_str()));
        let open = |max: usize, now: u64, binding: &Binding<'_>| open_both(&kept, &token, max, now, binding);
        prop_assert!(token.starts_with("v1.k1."));
        let (m, t, a) = (text(&claims, "m"), text(&claims, "t"), text(&claims, "a"));
        let aud = claims.get("aud").and_then(Value::as_str);
        let binding = Binding {
            method: &m,
            target: &t,
            args_digest: &a,
            principal: principal.as_deref(),
            audience: aud,
        };
        let iat = claims["iat"].as_u64().unwrap();
        let mut opened = open(usize::MAX, iat, &binding)
            .map_err(|e| TestCaseError::fail(format!("refused: {e}")))?;
        // The principal travels as a keyed tag, never in clear.
        let tag = opened.as_object_mut().unwrap().remove("p");
        prop_assert_eq!(tag.is_some(), principal.is_some());
        if let (Some(Value::String(tag)), Some(principal)) = (&tag, &principal)
            && principal.len() >= 4
        {
            prop_assert!(!token.contains(&URL_SAFE_NO_PAD.encode(principal)));
            prop_assert!(tag.len() < 32);
        }
        prop_assert_eq!(&opened, &claims);

        // Any one binding different: refused.
        let other = |s: &str| format!("{s}\u{0}");
        let (m2, t2, a2) = (other(&m), other(&t), other(&a));
        let wrong_principal = principal.as_ref().map_or(b"someone".to_vec(), |p| {
            let mut p = p.clone();
            p.push(0);
            p
        });
        let aud2 = aud.map_or_else(|| "api".to_owned(), other);
        let wrongs = [
            Binding { method: &m2, ..binding },
            Binding { target: &t2, ..binding },
            Binding { args_digest: &a2, ..binding },
            Binding { principal: Some(&wrong_principal), ..binding },
            Binding { principal: if principal.is_some() { None } else { Some(b"x") }, ..binding },
            Binding { audience: Some(&aud2), ..binding },
            Binding { audience: if aud.is_some() { None } else { Some("api") }, ..binding },
        ];
        for (i, wrong) in wrongs.iter().enumerate() {
            prop_assert!(
                open(usize::MAX, iat, wrong).is_err(),
                "binding change {} accepted", i
            );
        }
        // Expired (past the skew), and issued in the future (past the skew): refused.
        let exp = claims["exp"].as_u64().unwrap();
        if let Some(late) = exp.checked_add(SKEW) {
            prop_assert!(open(usize::MAX, late, &binding).is_err());
        }
        if let Some(early) = iat.checked_sub(SKEW + 1) {
            prop_assert!(open(usize::MAX, early, &binding).is_err());
        }
        // Over the size bound: refused before anything else.
        prop_assert!(open(token.len() - 1, iat, &binding).is_err());
    }
}

/// A valid token for `deploy {"environment": "staging"}`, anonymous, no audience, open at NOW.
fn deploy_binding(args: &str) -> Binding<'_> {
    Binding {
        method: "tools/call",
        target: "deploy",
        args_digest: args,
        principal: None,
        audience: None,
    }
}

fn staging() -> String {
    args_digest(Some(&json!({"environment": "staging"})))
}

/// Opens `token` in full and through `kept` (the tokens a layer keeps after sealing them): both
/// ways must agree, whatever the outcome.
fn open_both(
    kept: &SealedTokens,
    token: &str,
    max_len: usize,
    now: u64,
    binding: &Binding<'_>,
) -> Result<Value, String> {
    let in_full = open_token(
        &ring(),
        token,
        Opening {
            max_len,
            now,
            skew: SKEW,
        },
        binding,
    );
    let through_kept = kept.open_token(
        &ring(),
        token,
        Opening {
            max_len,
            now,
            skew: SKEW,
        },
        binding,
    );
    assert_eq!(in_full, through_kept, "{token}: kept and in full differ");
    in_full
}

/// A valid token (sealed by `k1`, kept in `kept`) for `deploy`, asking `q`.
fn valid_token(kept: &SealedTokens, q: Map<String, Value>, s: Option<String>, r: u32) -> String {
    let mut claims = json!({"v": 1, "iat": NOW - 5, "exp": NOW + 600, "m": "tools/call",
        "t": "deploy", "a": staging(), "r": r});
    if let Some(s) = s {
        claims["s"] = s.into();
    }
    if !q.is_empty() {
        claims["q"] = Value::Object(q);
    }
    kept.seal_claims_json(&k1(), claims.to_string().as_bytes(), None)
        .unwrap()
}

/// Whether `token` opens for `deploy` at `NOW`, in full and through `kept` alike.
fn opens(kept: &SealedTokens, token: &str) -> bool {
    open_both(kept, token, 64 * 1024, NOW, &deploy_binding(&staging())).is_ok()
}

fn parts(token: &str) -> Vec<String> {
    token.split('.').map(str::to_owned).collect()
}

/// The claims JSON of a token, re-encoded by `rewrite`, with the original MAC.
fn reencoded(token: &str, rewrite: impl Fn(&Map<String, Value>) -> String) -> String {
    let p = parts(token);
    let claims: Map<String, Value> =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(&p[2]).unwrap()).unwrap();
    let body = URL_SAFE_NO_PAD.encode(rewrite(&claims));
    format!("{}.{}.{}.{}", p[0], p[1], body, p[3])
}

fn object_text(entries: &[(String, String)], sep: &str) -> String {
    let fields: Vec<String> = entries
        .iter()
        .map(|(k, v)| format!("{}:{v}", serde_json::to_string(k).unwrap()))
        .collect();
    format!("{{{}}}", fields.join(sep))
}

fn entries(claims: &Map<String, Value>) -> Vec<(String, String)> {
    claims
        .iter()
        .map(|(k, v)| (k.clone(), v.to_string()))
        .collect()
}

/// Every base64 character whose 6 bits differ from `c`'s only in the low `unused` bits.
fn same_bits_variants(c: char, unused: u32) -> Vec<char> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let index = ALPHABET.iter().position(|&a| a as char == c).unwrap() as u32;
    (0..(1 << unused))
        .map(|low| (index & !((1 << unused) - 1)) | low)
        .filter(|&i| i != index)
        .map(|i| ALPHABET[i as usize] as char)
        .collect()
}

#[derive(Debug, Clone)]
enum Mutation {
    Replace { at: usize, with: char },
    Truncate { to: usize },
    Extend { with: String },
    Insert { at: usize, with: char },
    Remove { at: usize },
    Kid(&'static str),
    Pad { part: usize, pad: &'static str },
    StandardAlphabet { part: usize, padded: bool },
    TrailingBits { part: usize, variant: usize },
    ReorderKeys { rotate: usize },
    DuplicateKey { which: usize, same_value: bool },
    Whitespace,
    EscapedKey { which: usize },
    SpliceBody,
    SpliceMac,
    Prefix(&'static str),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<prop::sample::Index>(), any::<char>()).prop_map(|(i, c)| Mutation::Replace {
            at: i.index(usize::MAX),
            with: c
        }),
        (any::<prop::sample::Index>(), "[A-Za-z0-9_=.+/-]").prop_map(|(i, c)| Mutation::Replace {
            at: i.index(usize::MAX),
            with: c.chars().next().unwrap()
        }),
        any::<prop::sample::Index>().prop_map(|i| Mutation::Truncate {
            to: i.index(usize::MAX)
        }),
        ".{1,8}".prop_map(|with| Mutation::Extend { with }),
        "[A-Za-z0-9_=.-]{1,4}".prop_map(|with| Mutation::Extend { with }),
        (any::<prop::sample::Index>(), any::<char>()).prop_map(|(i, c)| Mutation::Insert {
            at: i.index(usize::MAX),
            with: c
        }),
        any::<prop::sample::Index>().prop_map(|i| Mutation::Remove {
            at: i.index(usize::MAX)
        }),
        prop::sample::select(vec!["k2", "K1", "k1 ", "", "k1.k1", "k3"]).prop_map(Mutation::Kid),
        (2usize..4, prop::sample::select(vec!["=", "==", "==="]))
            .prop_map(|(part, pad)| Mutation::Pad { part, pad }),
        (2usize..4, any::<bool>())
            .prop_map(|(part, padded)| Mutation::StandardAlphabet { part, padded }),
        (2usize..4, 0usize..16)
            .prop_map(|(part, variant)| Mutation::TrailingBits { part, variant }),
        (1usize..12).prop_map(|rotate| Mutation::ReorderKeys { rotate }),
        (any::<prop::sample::Index>(), any::<bool>()).prop_map(|(i, same_value)| {
            Mutation::DuplicateKey {
                which: i.index(usize::MAX),
                same_value,
            }
        }),
        Just(Mutation::Whitespace),
        any::<prop::sample::Index>().prop_map(|i| Mutation::EscapedKey {
            which: i.index(usize::MAX)
        }),
        Just(Mutation::SpliceBody),
        Just(Mutation::SpliceMac),
        prop::sample::select(vec!["V1", "v2", "v1.v1", "", " v1"]).prop_map(Mutation::Prefix),
    ]
}

/// `token` mutated; `None` when the mutation does not apply to it.
fn mutate(token: &str, other: &str, mutation: &Mutation) -> Option<String> {
    let chars: Vec<char> = token.chars().collect();
    let p = parts(token);
    let out = match mutation {
        Mutation::Replace { at, with } => {
            let mut chars = chars.clone();
            let at = at % chars.len();
            chars[at] = *with;
            chars.into_iter().collect()
        }
        Mutation::Truncate { to } => chars[..to % chars.len()].iter().collect(),
        Mutation::Extend { with } => format!("{token}{with}"),
        Mutation::Insert { at, with } => {
            let mut chars = chars.clone();
            chars.insert(at % (chars.len() + 1), *with);
            chars.into_iter().collect()
        }
        Mutation::Remove { at } => {
            let mut chars = chars.clone();
            chars.remove(at % chars.len());
            chars.into_iter().collect()
        }
        Mutation::Kid(kid) => format!("{}.{kid}.{}.{}", p[0], p[2], p[3]),
        Mutation::Pad { part, pad } => {
            let mut p = p.clone();
            p[*part].push_str(pad);
            p.join(".")
        }
        Mutation::StandardAlphabet { part, padded } => {
            let mut p = p.clone();
            let bytes = URL_SAFE_NO_PAD.decode(&p[*part]).unwrap();
            p[*part] = if *padded {
                STANDARD.encode(&bytes)
            } else {
                STANDARD_NO_PAD.encode(&bytes)
            };
            if !padded && p[*part] == token.split('.').nth(*part).unwrap() {
                // No `-` or `_` in it: try the padded URL-safe form instead.
                p[*part] = URL_SAFE.encode(&bytes);
            }
            p.join(".")
        }
        Mutation::TrailingBits { part, variant } => {
            // The last character of unpadded base64 carries 2 or 4 bits that decode to nothing:
            // a lenient decoder would accept another spelling of the same bytes.
            let mut p = p.clone();
            let unused = match p[*part].len() % 4 {
                2 => 4,
                3 => 2,
                _ => return None,
            };
            let last = p[*part].pop().unwrap();
            let variants = same_bits_variants(last, unused);
            p[*part].push(variants[variant % variants.len()]);
            p.join(".")
        }
        Mutation::ReorderKeys { rotate } => reencoded(token, |claims| {
            let mut e = entries(claims);
            let n = e.len();
            e.rotate_left(rotate % n);
            if *rotate % n == 0 {
                e.reverse();
            }
            object_text(&e, ",")
        }),
        Mutation::DuplicateKey { which, same_value } => reencoded(token, |claims| {
            let mut e = entries(claims);
            let (k, v) = e[which % e.len()].clone();
            let v = if *same_value { v } else { "1".to_owned() };
            e.push((k, v));
            object_text(&e, ",")
        }),
        Mutation::Whitespace => reencoded(token, |claims| object_text(&entries(claims), ", ")),
        Mutation::EscapedKey { which } => reencoded(token, |claims| {
            let e = entries(claims);
            let which = which % e.len();
            let fields: Vec<String> = e
                .iter()
                .enumerate()
                .map(|(i, (k, v))| {
                    if i == which {
                        let escaped: String =
                            k.chars().map(|c| format!("\\u{:04x}", c as u32)).collect();
                        format!("\"{escaped}\":{v}")
                    } else {
                        format!("{}:{v}", serde_json::to_string(k).unwrap())
                    }
                })
                .collect();
            format!("{{{}}}", fields.join(","))
        }),
        Mutation::SpliceBody => {
            let o = parts(other);
            format!("{}.{}.{}.{}", p[0], p[1], o[2], p[3])
        }
        Mutation::SpliceMac => {
            let o = parts(other);
            format!("{}.{}.{}.{}", p[0], p[1], p[2], o[3])
        }
        Mutation::Prefix(prefix) => format!("{prefix}.{}.{}.{}", p[1], p[2], p[3]),
    };
    (out != token).then_some(out)
}

proptest! {
    #![proptest_config(cases(4000))]

    #[test]
    fn no_mutation_of_a_valid_token_opens(
        q in json_map(),
        s in proptest::option::of(any::<String>()),
        r in any::<u32>(),
        mutation in mutation(),
    ) {
        // Both kept, as by the layer that sealed them: a mutant must not open through them either.
        let kept = SealedTokens::default();
        let token = valid_token(&kept, q.clone(), s.clone(), r);
        prop_assert!(opens(&kept, &token));
        let other = valid_token(&kept, q, s, r.wrapping_add(1));
        prop_assert!(opens(&kept, &other));
        let Some(mutated) = mutate(&token, &other, &mutation) else {
            return Ok(());
        };
        prop_assert!(!opens(&kept, &mutated), "{:?} opened: {}", mutation, mutated);
    }

    #[test]
    fn arbitrary_tokens_never_open(
        token in prop_oneof![
            any::<String>(),
            "v1\\.k[12]\\.[A-Za-z0-9_-]{0,300}\\.[A-Za-z0-9_-]{0,50}",
            "v1\\.k1\\.[A-Za-z0-9_-]{200,400}\\.[A-Za-z0-9_-]{43}",
            "[v1.k=A-Za-z0-9_-]{0,80}",
        ],
    ) {
        prop_assert!(!opens(&SealedTokens::default(), &token));
    }

    #[test]
    fn arguments_are_bound_by_value(args in json_value(), other in json_value()) {
        // The same value in any key order binds alike; a different value never does.
        // Keys reversed, as text: parsed back into a `Value` they would be sorted again.
        let reordered = respell(&args, &mut std::iter::repeat(1));
        prop_assert_eq!(args_digest_json(&reordered), Some(args_digest(Some(&args))));
        let empty = |v: &Value| v.is_null() || v.as_object().is_some_and(Map::is_empty);
        if args != other && !(empty(&args) && empty(&other)) {
            prop_assert_ne!(args_digest(Some(&args)), args_digest(Some(&other)));
        }
    }

    #[test]
    fn arguments_are_bound_by_meaning_whatever_their_spelling(
        args in json_value(),
        choices in prop::collection::vec(any::<u8>(), 64),
    ) {
        // Keys in reverse order, whitespace between tokens, characters escaped as `\uXXXX` (and
        // surrogate pairs), `\/`: the same arguments, so the same digest as serde_json's own
        // (sorted, compact) text. The layer's canonical pass reads all of these.
        let spelled = respell(&args, &mut choices.iter().copied().cycle());
        prop_assert_eq!(
            args_digest_json(&spelled),
            Some(args_digest(Some(&args))),
            "{}", spelled
        );
    }

    #[test]
    fn arguments_are_bound_by_their_exact_numbers(
        a in number_text(),
        b in number_text(),
        spaced in any::<bool>(),
    ) {
        // Numbers are bound as written: two spellings are two calls, even where an f64 cannot
        // tell them apart (the inner service gets the bytes, and may read them exactly).
        let call = |n: &str| format!(r#"{{"amount":{n},"env":"staging"}}"#);
        let da = args_digest_json(&call(&a)).expect("JSON");
        if a == b {
            let other = if spaced {
                format!(r#" {{ "env" : "staging" , "amount" : {b} }} "#)
            } else {
                format!(r#"{{"env":"staging","amount":{b}}}"#)
            };
            prop_assert_eq!(Some(da), args_digest_json(&other));
        } else {
            prop_assert_ne!(Some(da), args_digest_json(&call(&b)));
        }
    }

    #[test]
    fn the_sse_splitter_does_not_depend_on_chunk_boundaries(
        stream in prop::collection::vec(
            prop_oneof![
                Just(b"\n".to_vec()), Just(b"\r".to_vec()), Just(b"\r\n".to_vec()),
                Just(b"data: {}".to_vec()), Just(b":".to_vec()), Just(b"id: 7".to_vec()),
                prop::collection::vec(any::<u8>(), 0..6),
            ],
            0..24,
        ).prop_map(|pieces| pieces.concat()),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
    ) {
        let mut at: Vec<usize> = cuts.iter().map(|i| i.index(stream.len() + 1)).collect();
        at.sort_unstable();
        let mut chunks: Vec<&[u8]> = Vec::new();
        let mut start = 0;
        for cut in at {
            chunks.push(&stream[start..cut]);
            start = cut;
        }
        chunks.push(&stream[start..]);
        let (events, rest) = sse_split(&chunks);
        let (whole, whole_rest) = sse_split(&[&stream]);
        prop_assert_eq!(&events, &whole);
        prop_assert_eq!(&rest, &whole_rest);
        let joined: Vec<u8> = events.iter().flat_map(|e| e.to_vec()).chain(rest.to_vec()).collect();
        prop_assert_eq!(joined, stream);
    }
}

/// A JSON number as written: integers of any length, decimals and exponents, often close to one
/// another and beyond what an f64 tells apart.
fn number_text() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        "-?[1-9][0-9]{18,30}",
        "-?(0|[1-9][0-9]{0,3})\\.[0-9]{1,20}",
        "-?[1-9](\\.[0-9]{1,6})?[eE][+-]?[0-9]{1,3}",
        prop::sample::select(vec![
            "18446744073709551616".to_owned(),
            "18446744073709551617".to_owned(),
            "0.1".to_owned(),
            "0.10000000000000001".to_owned(),
            "1e400".to_owned(),
            "0".to_owned(),
            "-0".to_owned(),
        ]),
    ]
}

/// `value` as JSON text spelled another way, each choice taken from `choices`: keys in reverse
/// order, whitespace around tokens, escaped characters.
fn respell(value: &Value, choices: &mut impl Iterator<Item = u8>) -> String {
    fn space(out: &mut String, choices: &mut impl Iterator<Item = u8>) {
        out.push_str(match choices.next().unwrap_or(0) % 4 {
            0 => "",
            1 => " ",
            2 => "\n\t",
            _ => " \r\n ",
        });
    }
    fn string(text: &str, out: &mut String, choices: &mut impl Iterator<Item = u8>) {
        out.push('"');
        for c in text.chars() {
            let escape = choices.next().unwrap_or(0).is_multiple_of(3);
            match c {
                '"' => out.push_str("\\\""),
                '\\' => out.push_str("\\\\"),
                '/' if escape => out.push_str("\\/"),
                c if (c as u32) < 0x20 || escape => {
                    let mut units = [0u16; 2];
                    for unit in c.encode_utf16(&mut units) {
                        out.push_str(&format!("\\u{unit:04x}"));
                    }
                }
                c => out.push(c),
            }
        }
        out.push('"');
    }
    fn write(value: &Value, out: &mut String, choices: &mut impl Iterator<Item = u8>) {
        space(out, choices);
        match value {
            Value::Object(map) => {
                out.push('{');
                for (i, (k, v)) in map.iter().rev().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    space(out, choices);
                    string(k, out, choices);
                    space(out, choices);
                    out.push(':');
                    write(v, out, choices);
                }
                space(out, choices);
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    write(v, out, choices);
                }
                space(out, choices);
                out.push(']');
            }
            Value::String(text) => string(text, out, choices),
            scalar => out.push_str(&scalar.to_string()),
        }
        space(out, choices);
    }
    let mut out = String::new();
    write(value, &mut out, choices);
    out
}

// ---------------------------------------------------------------------------------------------
// Forms, through the whole layer.

/// One property of a form inside the MCP subset.
fn property() -> impl Strategy<Value = Value> {
    let bound = || proptest::option::of(0u64..12);
    let number = || {
        proptest::option::of(prop_oneof![
            (-50i64..50).prop_map(Value::from),
            (-50.0f64..50.0).prop_map(|f| json!((f * 4.0).round() / 4.0)),
        ])
    };
    let names = || prop::collection::btree_set("[a-z]{1,6}|[A-Z ]{1,3}|x-y", 1..5);
    prop_oneof![
        (
            bound(),
            bound(),
            proptest::option::of(prop::sample::select(vec![
                "email",
                "uri",
                "date",
                "date-time"
            ]))
        )
            .prop_map(|(min, max, format)| {
                let mut p = json!({"type": "string"});
                let (min, max) = order(min, max);
                if let Some(min) = min {
                    p["minLength"] = min.into();
                }
                if let Some(max) = max {
                    p["maxLength"] = max.into();
                }
                if let Some(format) = format {
                    p["format"] = format.into();
                }
                p
            }),
        (
            prop::sample::select(vec!["number", "integer"]),
            number(),
            number()
        )
            .prop_map(|(kind, min, max)| {
                let mut p = json!({"type": kind});
                let (min, max) = match (min, max) {
                    (Some(a), Some(b)) if a.as_f64() > b.as_f64() => (Some(b), Some(a)),
                    other => other,
                };
                if let Some(min) = min {
                    p["minimum"] = min;
                }
                if let Some(max) = max {
                    p["maximum"] = max;
                }
                p
            }),
        Just(json!({"type": "boolean"})),
        names().prop_map(|names| json!({"type": "string", "enum": names})),
        names().prop_map(|names| {
            let one_of: Vec<Value> = names
                .iter()
                .map(|n| json!({"const": n, "title": n.to_uppercase()}))
                .collect();
            json!({"type": "string", "oneOf": one_of})
        }),
        (names(), bound(), bound()).prop_map(|(names, min, max)| {
            let mut p = json!({"type": "array", "items": {"type": "string", "enum": names}});
            let (min, max) = order(min, max);
            if let Some(min) = min {
                p["minItems"] = min.into();
            }
            if let Some(max) = max {
                p["maxItems"] = max.into();
            }
            p
        }),
    ]
}

fn order(a: Option<u64>, b: Option<u64>) -> (Option<u64>, Option<u64>) {
    match (a, b) {
        (Some(a), Some(b)) if a > b => (Some(b), Some(a)),
        other => other,
    }
}

/// A form: 1 to 4 properties, some required.
fn form_schema() -> impl Strategy<Value = Value> {
    prop::collection::btree_map(
        prop::sample::select(vec![
            "approve", "note", "n", "007", "a b", "when", "tags", "é",
        ]),
        (property(), any::<bool>()),
        1..5,
    )
    .prop_map(|props: BTreeMap<&str, (Value, bool)>| {
        let required: Vec<&str> = props
            .iter()
            .filter(|(_, (_, r))| *r)
            .map(|(k, _)| *k)
            .collect();
        let properties: Map<String, Value> = props
            .into_iter()
            .map(|(k, (p, _))| (k.to_owned(), p))
            .collect();
        json!({"type": "object", "properties": properties, "required": required})
    })
}

/// A value for a field: often of the kind the form wants, often not.
fn field_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        json_leaf(),
        prop::sample::select(vec![
            json!("a@example.com"),
            json!("not an email"),
            json!("https://example.com/x"),
            json!("2024-02-29"),
            json!("2023-02-29"),
            json!("2024-01-31T10:00:00Z"),
            json!("yesterday"),
            json!(""),
            json!("x-y"),
            json!(2.0),
            json!(2.5),
            json!(-0.0),
            json!(1e300),
            json!(49),
            json!(true),
        ]),
        "[a-zA-Z ]{0,14}".prop_map(Value::from),
        (-60i64..60).prop_map(Value::from),
        prop::collection::vec(
            prop_oneof!["[a-z]{1,6}|x-y".prop_map(Value::from), json_leaf()],
            0..6
        )
        .prop_map(Value::Array),
        json_value(),
    ]
}

/// A value the property accepts (bounds permitting), to reach the forwarding path often.
fn valid_value(property: &Value) -> BoxedStrategy<Value> {
    let bound = |key: &str| property.get(key).and_then(Value::as_f64);
    match property["type"].as_str().unwrap() {
        "string" if property.get("enum").is_some() || property.get("oneOf").is_some() => {
            let choices: Vec<Value> = match property.get("enum") {
                Some(list) => list.as_array().unwrap().clone(),
                None => property["oneOf"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|o| o["const"].clone())
                    .collect(),
            };
            prop::sample::select(choices).boxed()
        }
        "string" => {
            let min = bound("minLength").unwrap_or(0.0) as usize;
            let max = bound("maxLength").map_or(min + 8, |m| m as usize);
            match property.get("format").and_then(Value::as_str) {
                Some("email") => Just(json!("a@example.com")).boxed(),
                Some("uri") => Just(json!("https://example.com/x")).boxed(),
                Some("date") => Just(json!("2024-02-29")).boxed(),
                Some(_) => Just(json!("2024-01-31T10:00:00Z")).boxed(),
                None => prop::collection::vec(prop::char::range('a', 'z'), min..=max.max(min))
                    .prop_map(|c| Value::String(c.into_iter().collect()))
                    .boxed(),
            }
        }
        kind @ ("number" | "integer") => {
            let min = bound("minimum").unwrap_or(-100.0);
            let max = bound("maximum").unwrap_or(100.0).max(min);
            let integer = kind == "integer";
            (0.0f64..=1.0)
                .prop_map(move |t| {
                    let n = min + (max - min) * t;
                    if integer {
                        let whole = n.ceil();
                        if whole <= max {
                            json!(whole as i64)
                        } else {
                            json!(n)
                        }
                    } else {
                        json!(n)
                    }
                })
                .boxed()
        }
        "boolean" => any::<bool>().prop_map(Value::Bool).boxed(),
        _ => {
            let allowed: Vec<Value> = property["items"]["enum"].as_array().unwrap().clone();
            let min = bound("minItems").unwrap_or(0.0) as usize;
            let max = bound("maxItems").map_or(allowed.len(), |m| m as usize);
            prop::sample::subsequence(allowed.clone(), 0..=allowed.len())
                .prop_map(move |items| {
                    let mut items = items;
                    items.truncate(max);
                    while items.len() < min && !allowed.is_empty() {
                        items.push(allowed[0].clone());
                    }
                    Value::Array(items)
                })
                .boxed()
        }
    }
}

/// Content with a mostly valid value for every field, and sometimes one field replaced.
fn near_valid(schema: &Value) -> BoxedStrategy<Value> {
    let fields: Vec<BoxedStrategy<(String, Value)>> = schema["properties"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(name, p)| {
            let name = name.clone();
            valid_value(p).prop_map(move |v| (name.clone(), v)).boxed()
        })
        .collect();
    (
        fields,
        proptest::option::of(("[a-z]{1,3}|approve|note|n", field_value())),
    )
        .prop_map(|(fields, spoiler)| {
            let mut content: Map<String, Value> = fields.into_iter().collect();
            if let Some((name, value)) = spoiler {
                content.insert(name, value);
            }
            Value::Object(content)
        })
        .boxed()
}

/// An answer: mostly `accept` with content built from the form's own fields and a few others.
fn answer(schema: Value) -> impl Strategy<Value = (Value, Value)> {
    let names: Vec<String> = schema["properties"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    let random = prop::collection::btree_map(
        prop_oneof![
            3 => prop::sample::select(names),
            1 => "[a-z]{1,4}",
        ],
        field_value(),
        0..6,
    )
    .prop_map(|m| Value::Object(m.into_iter().collect()));
    let content = prop_oneof![random, near_valid(&schema)];
    let answer = prop_oneof![
        8 => content.prop_map(|content| json!({"action": "accept", "content": content})),
        1 => Just(json!({"action": "accept"})),
        1 => prop::sample::select(vec!["decline", "cancel"])
            .prop_map(|a| json!({"action": a, "content": {"x": 1}})),
    ];
    (Just(schema), answer)
}

/// What the form accepts, checked here without `jsonschema`: `None` when it accepts `content`,
/// else why not.
fn oracle(schema: &Value, content: &Map<String, Value>) -> Option<String> {
    let properties = schema["properties"].as_object().unwrap();
    for required in schema["required"].as_array().unwrap() {
        if !content.contains_key(required.as_str().unwrap()) {
            return Some(format!("{required} is missing"));
        }
    }
    for (name, value) in content {
        let Some(p) = properties.get(name) else {
            return Some(format!("{name} was never asked"));
        };
        let at_least =
            |key: &str, n: f64| p.get(key).and_then(Value::as_f64).is_none_or(|m| n >= m);
        let at_most = |key: &str, n: f64| p.get(key).and_then(Value::as_f64).is_none_or(|m| n <= m);
        let ok = match p["type"].as_str().unwrap() {
            "string" => match value.as_str() {
                None => false,
                Some(s) => {
                    let len = s.chars().count() as f64;
                    let listed = |list: &Value| {
                        list.as_array()
                            .unwrap()
                            .iter()
                            .any(|o| o == value || o["const"] == *value)
                    };
                    at_least("minLength", len)
                        && at_most("maxLength", len)
                        && p.get("enum").is_none_or(listed)
                        && p.get("oneOf").is_none_or(listed)
                }
            },
            "number" => value
                .as_f64()
                .is_some_and(|n| at_least("minimum", n) && at_most("maximum", n)),
            "integer" => value.as_f64().is_some_and(|n| {
                n.fract() == 0.0 && at_least("minimum", n) && at_most("maximum", n)
            }),
            "boolean" => value.is_boolean(),
            "array" => value.as_array().is_some_and(|items| {
                let allowed = p["items"]["enum"].as_array().unwrap();
                let n = items.len() as f64;
                at_least("minItems", n)
                    && at_most("maxItems", n)
                    && items.iter().all(|i| allowed.contains(i))
            }),
            other => panic!("no such type in the subset: {other}"),
        };
        if !ok {
            return Some(format!("{name} is not what the form asks"));
        }
    }
    None
}

fn json_response(message: &Value) -> Response<Chunks> {
    Response::builder()
        .header(header::CONTENT_TYPE, "application/json")
        .body(Chunks::new([message.to_string()]))
        .unwrap()
}

fn post(body: &Value) -> Request<Chunks> {
    Request::post("/mcp")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Chunks::new([Bytes::from(body.to_string())]))
        .unwrap()
}

fn form_call(id: u32, extra: Value) -> Value {
    let mut params = json!({"name": "deploy", "arguments": {}, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}});
    params
        .as_object_mut()
        .unwrap()
        .extend(extra.as_object().unwrap().clone());
    json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params})
}

proptest! {
    #![proptest_config(cases(1500))]

    #[test]
    fn the_inner_service_only_gets_content_the_form_accepts(
        (schema, answer) in form_schema().prop_flat_map(answer),
    ) {
        let layer = ElicitationLayer::new(k1());
        let question = json!({"method": "elicitation/create",
            "params": {"message": "Fill in the form", "requestedSchema": schema.clone()}});
        let respond = move |received: &tower_elicitation::__fuzz::Received| {
            let call: Value = serde_json::from_slice(&received.body).unwrap();
            let result = if call["params"]["inputResponses"].get("form").is_some() {
                json!({"resultType": "complete", "content": []})
            } else {
                json!({"resultType": "input_required", "requestState": "inner-1",
                    "inputRequests": {"form": question.clone()}})
            };
            json_response(&json!({"jsonrpc": "2.0", "id": call["id"], "result": result}))
        };
        let first = exchange(&layer, post(&form_call(1, json!({}))), respond.clone());
        let first: Value = serde_json::from_slice(&first.body).unwrap();
        let state = first["result"]["requestState"].as_str().expect("a sealed state").to_owned();

        let retry = form_call(2, json!({"requestState": state, "inputResponses": {"form": answer}}));
        let second = exchange(&layer, post(&retry), respond);
        let reply: Value = serde_json::from_slice(&second.body).unwrap();
        let action = answer["action"].as_str().unwrap();
        let empty = Map::new();
        let submitted = answer.get("content").and_then(Value::as_object).unwrap_or(&empty);
        let properties = schema["properties"].as_object().unwrap();
        let asked: Map<String, Value> = submitted
            .iter()
            .filter(|(k, _)| properties.contains_key(*k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let validator = jsonschema::options()
            .should_validate_formats(true)
            .build(&schema)
            .unwrap();

        match second.received.as_slice() {
            [] => {
                // Asked again: only ever for an accepted answer the form refuses.
                prop_assert_eq!(action, "accept");
                prop_assert_eq!(&reply["result"]["resultType"], "input_required", "{}", reply);
                prop_assert!(
                    !validator.is_valid(&Value::Object(asked.clone())),
                    "a valid answer was refused: {} for {}", Value::Object(asked), schema
                );
            }
            [forwarded] => {
                let call: Value = serde_json::from_slice(&forwarded.body).unwrap();
                let params = &call["params"];
                prop_assert_eq!(&params["requestState"], "inner-1");
                let responses = params["inputResponses"].as_object().unwrap();
                prop_assert_eq!(responses.keys().collect::<Vec<_>>(), vec!["form"]);
                let got = &responses["form"];
                if action != "accept" {
                    prop_assert_eq!(got, &json!({"action": action}));
                    return Ok(());
                }
                let content = got["content"].as_object().expect("accepted content");
                prop_assert_eq!(got.as_object().unwrap().len(), 2);
                prop_assert!(
                    validator.is_valid(&got["content"]),
                    "the inner service got content the form refuses: {} for {}", got, schema
                );
                if let Some(why) = oracle(&schema, content) {
                    return Err(TestCaseError::fail(format!("{why}: {got} for {schema}")));
                }
                // Exactly what was submitted (minus unknown fields; whole numbers for integers).
                prop_assert_eq!(content.len(), asked.len());
                for (name, value) in content {
                    let sent = &asked[name];
                    prop_assert!(
                        value == sent || value.as_f64().is_some() && value.as_f64() == sent.as_f64(),
                        "{} changed: {} -> {}", name, sent, value
                    );
                }
            }
            more => {
                return Err(TestCaseError::fail(format!("called {} times", more.len())));
            }
        }
    }
}

/// What the inner service's `resultType` may be: `input_required`, or something near it.
fn result_type() -> impl Strategy<Value = &'static str> {
    prop::sample::select(vec![
        "input_required",
        "complete",
        "input_require",
        "Input_required",
        "input_required ",
        "task",
    ])
}

proptest! {
    #![proptest_config(cases(400))]

    /// However the inner service spells its answer (escapes in any string, `\/`, whitespace), an
    /// `input_required` reaches the client only with a sealed `requestState`, and any other
    /// answer reaches it byte for byte.
    #[test]
    fn an_input_required_is_sealed_however_it_is_spelled(
        result_type in result_type(),
        content in json_value(),
        id_first in any::<bool>(),
        choices in prop::collection::vec(any::<u8>(), 64..512),
    ) {
        let form = json!({"method": "elicitation/create", "params": {"message": "Approve?",
            "requestedSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}}}});
        let result = json!({"resultType": result_type, "inputRequests": {"approval": form},
            "requestState": "inner-secret", "content": content});
        let message = if id_first {
            json!({"jsonrpc": "2.0", "id": 1, "result": result})
        } else {
            json!({"result": result, "jsonrpc": "2.0", "id": 1})
        };
        let text = respell(&message, &mut choices.into_iter().cycle());
        let answer = text.clone();
        let done = exchange(&ElicitationLayer::new(k1()), post(&form_call(1, json!({}))), move |_| {
            Response::builder()
                .header(header::CONTENT_TYPE, "application/json")
                .body(Chunks::new([answer.clone()]))
                .unwrap()
        });
        if result_type == "input_required" {
            let reply: Value = serde_json::from_slice(&done.body).unwrap();
            let state = reply["result"]["requestState"].as_str().unwrap_or_default();
            prop_assert!(state.starts_with("v1."), "{text} -> {reply}");
        } else {
            prop_assert_eq!(&done.body[..], text.as_bytes());
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The fuzz seeds (`fuzz/seeds/`, written by `make_seeds.py`) start where they claim to: valid
// tokens open, and a seeded retry gets past the layer to the inner service. A change of the
// token format that leaves them stale fails here, not silently in the fuzzer.

/// The one call the inner service gets when `body` goes through `layer` (it answers an empty
/// result), as JSON.
fn forwarded_once(layer: &ElicitationLayer, body: &[u8], name: &str) -> Value {
    let done = exchange(
        layer,
        post(&serde_json::from_slice(body).unwrap()),
        |received| {
            let call: Value = serde_json::from_slice(&received.body).unwrap();
            json_response(&json!({"jsonrpc": "2.0", "id": call["id"], "result": {}}))
        },
    );
    let [forwarded] = done.received.as_slice() else {
        panic!("{name}: {:?}", done.body);
    };
    serde_json::from_slice(&forwarded.body).unwrap()
}

fn seed(target: &str, name: &str) -> Vec<u8> {
    let path = format!("{}/fuzz/seeds/{target}/{name}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn the_fuzz_seed_tokens_open() {
    for name in ["valid-k1", "valid-k2", "valid-kept-answers"] {
        let token = String::from_utf8(seed("token", name)).unwrap();
        assert!(opens(&SealedTokens::default(), &token), "{name}");
    }
}

#[test]
fn the_fuzz_seed_retries_reach_the_inner_service() {
    for (name, answers) in [
        (
            "retry-valid",
            json!({"approval": {"action": "accept", "content": {"approve": true, "note": "ok"}}}),
        ),
        ("retry-declined", json!({"approval": {"action": "decline"}})),
    ] {
        let input = seed("inbound", name);
        let body = match input[1..].windows(2).position(|w| w == b"\n\n") {
            Some(at) => input[at + 3..].to_vec(),
            None => input[1..].to_vec(),
        };
        let call = forwarded_once(&ElicitationLayer::new(k1()), &body, name);
        assert_eq!(call["params"]["requestState"], "inner-1", "{name}");
        assert_eq!(call["params"]["inputResponses"], answers, "{name}");
    }

    // The gate seed, behind the same gate as the `inbound` target's.
    let confirm = tower_elicitation::Gate::form(
        "confirm-delete",
        json!({"type": "object", "properties": {"confirm": {"type": "string"}},
               "required": ["confirm"]}),
    )
    .unwrap()
    .require(|content, call| content.get("confirm") == call.argument("name"));
    let layer = ElicitationLayer::new(k1())
        .gate(
            tower_elicitation::GateTarget::tool("delete_branch"),
            confirm,
        )
        .unwrap();
    let input = seed("inbound", "gate-retry");
    let call = forwarded_once(&layer, &input[1..], "gate-retry");
    assert_eq!(
        call["params"]["inputResponses"],
        json!({"confirm-delete": {"action": "accept", "content": {"confirm": "dev"}}})
    );
}

// ---------------------------------------------------------------------------------------------
// The strict reader's fast path against serde_json.

proptest! {
    #![proptest_config(cases(512))]

    /// Every object serde_json writes, compact or pretty, alone or as a request's `params`, is
    /// read by the fast path, and read as serde_json reads it.
    #[test]
    fn the_fast_reader_takes_every_object_and_reads_it_as_serde_json(members in json_map()) {
        let object = Value::Object(members);
        let request = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": object});
        for text in [
            object.to_string(),
            serde_json::to_string_pretty(&object).unwrap(),
            request.to_string(),
            serde_json::to_string_pretty(&request).unwrap(),
        ] {
            prop_assert!(json_skims(&text), "{}", text);
            prop_assert!(json_reads_agree(&text), "{}", text);
        }
    }

    /// On arbitrary text, and on objects with a few characters replaced by arbitrary text, the
    /// fast path never reads otherwise than serde_json.
    #[test]
    fn the_fast_reader_never_reads_otherwise_than_serde_json(
        members in json_map(),
        noise in "\\PC{0,6}|[\\\\\"{}\\[\\],:0-9eE.+-]{1,4}",
        at in any::<prop::sample::Index>(),
        cut in 0usize..3,
    ) {
        let text = Value::Object(members).to_string();
        let floor = |mut at: usize| {
            while !text.is_char_boundary(at) {
                at -= 1;
            }
            at
        };
        let start = floor(at.index(text.len() + 1));
        let end = floor((start + cut).min(text.len()));
        let spliced = format!("{}{noise}{}", &text[..start], &text[end..]);
        prop_assert!(json_reads_agree(&spliced), "{}", spliced);
        prop_assert!(json_reads_agree(&noise), "{}", noise);
    }
}
