//! The token decoder.
//!
//! - Input starting with `{`: claims JSON. When it is claims, sealing then opening (with the
//!   binding the claims name, at their issue time) must succeed exactly when the claims are
//!   version 1 and not already expired, give back what was bound, and re-seal stably; any other
//!   binding is refused. Opened from the tokens the layer keeps after sealing, the outcome is the
//!   same as opened in full.
//! - Anything else: a token. It must never open unless it is byte for byte the token the layer
//!   itself would mint for the claims it carries (no malleability: no second spelling of any
//!   part verifies). The seeds hold valid tokens, so libFuzzer's mutations of them are the byte
//!   flips, truncations, extensions and splices of the issue.

#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};
use tower_elicitation::__fuzz::{
    Binding, SealedTokens, Opening, args_digest, open_token, seal_claims_json,
};
use tower_elicitation::Keyring;

const NOW: u64 = 1_800_000_000;
const SKEW: u64 = 60;
const MAX: usize = 64 * 1024;

fn signer(kid: &str) -> Keyring {
    let key = if kid == "k2" { [8u8; 32] } else { [7u8; 32] };
    Keyring::new(kid, key).expect("a valid key")
}

fn ring() -> Keyring {
    signer("k1")
        .with_verify_key("k2", [8u8; 32])
        .expect("a valid key")
}

fuzz_target!(|data: &[u8]| {
    if data.first() == Some(&b'{') {
        claims(data);
    } else if let Ok(token) = std::str::from_utf8(data) {
        arbitrary_token(token);
    }
});

fn arbitrary_token(token: &str) {
    let args = args_digest(Some(&json!({"environment": "staging"})));
    let binding = Binding {
        method: "tools/call",
        target: "deploy",
        args_digest: &args,
        principal: None,
        audience: None,
    };
    let Ok(opened) = open_token(
        &ring(),
        token,
        Opening {
            max_len: MAX,
            now: NOW,
            skew: SKEW,
        },
        &binding,
    ) else {
        return;
    };
    // It opened: it must be exactly the token its signer mints for these claims.
    let kid = token
        .split('.')
        .nth(1)
        .expect("an opened token has a key id");
    let json = serde_json::to_vec(&opened).expect("claims serialize");
    let minted = seal_claims_json(&signer(kid), &json, None).expect("opened claims seal");
    assert_eq!(minted, token, "a second spelling of a valid token opened");
}

fn claims(data: &[u8]) {
    let ring = signer("k1");
    let Some(token) = seal_claims_json(&ring, data, None) else {
        return;
    };
    // Claims carry the asked questions as raw JSON, so numbers beyond f64 seal as written; this
    // oracle reads the claims as `Value`s, which cannot hold them.
    let Ok(claims) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    let text = |key: &str| claims[key].as_str().unwrap_or_default().to_owned();
    let (method, target, args) = (text("m"), text("t"), text("a"));
    let audience = claims["aud"].as_str().map(str::to_owned);
    let iat = claims["iat"].as_u64().expect("sealed claims have iat");
    let exp = claims["exp"].as_u64().expect("sealed claims have exp");
    let version = claims["v"].as_u64().expect("sealed claims have v");
    let binding = Binding {
        method: &method,
        target: &target,
        args_digest: &args,
        principal: None,
        audience: audience.as_deref(),
    };
    let opened = open_token(
        &ring,
        &token,
        Opening {
            max_len: usize::MAX,
            now: iat,
            skew: SKEW,
        },
        &binding,
    );
    // As the layer keeps the tokens it seals: the same token, opened from what was kept, gives
    // the same outcome, and so does any other binding or time.
    let kept = SealedTokens::default();
    let kept_token = kept.seal_claims_json(&ring, data, None);
    assert_eq!(
        kept_token.as_deref(),
        Some(token.as_str()),
        "kept sealing differs"
    );
    let other_target = format!("{target}x");
    let checks = [
        (binding, iat),
        (binding, exp.saturating_add(SKEW)),
        (
            Binding {
                target: &other_target,
                ..binding
            },
            iat,
        ),
    ];
    for (binding, now) in checks {
        assert_eq!(
            kept.open_token(
                &ring,
                &token,
                Opening {
                    max_len: usize::MAX,
                    now: now,
                    skew: SKEW
                },
                &binding
            ),
            open_token(
                &ring,
                &token,
                Opening {
                    max_len: usize::MAX,
                    now: now,
                    skew: SKEW
                },
                &binding
            ),
            "opened from what was kept, at {now}"
        );
    }
    let should_open = version == 1 && iat < exp.saturating_add(SKEW);
    assert_eq!(
        opened.is_ok(),
        should_open,
        "seal then open of v={version} iat={iat} exp={exp}: {opened:?}"
    );
    if let Ok(opened) = opened {
        // What is bound comes back as it went in.
        for key in ["v", "iat", "exp", "m", "t", "a", "r"] {
            assert_eq!(
                opened[key], claims[key],
                "{key} changed through seal and open"
            );
        }
        for key in ["aud", "s"] {
            let given = claims.get(key).filter(|v| !v.is_null());
            assert_eq!(
                opened.get(key),
                given,
                "{key} changed through seal and open"
            );
        }
        // Opened claims seal to a token that opens to the same claims, and that token is a
        // fixed point: the claims JSON may be respelled once (whitespace in raw questions), then
        // never again.
        let json = serde_json::to_vec(&opened).expect("claims serialize");
        let again = seal_claims_json(&ring, &json, None).expect("opened claims seal");
        let reopened = open_token(
            &ring,
            &again,
            Opening {
                max_len: usize::MAX,
                now: iat,
                skew: SKEW,
            },
            &binding,
        )
        .expect("a re-sealed token opens");
        assert_eq!(
            reopened, opened,
            "claims changed through a second seal and open"
        );
        let json = serde_json::to_vec(&reopened).expect("claims serialize");
        let third = seal_claims_json(&ring, &json, None).expect("opened claims seal");
        assert_eq!(third, again, "sealing is not stable");
        // Any other binding is refused.
        let other = format!("{target}x");
        let wrong = Binding {
            target: &other,
            ..binding
        };
        assert!(
            open_token(
                &ring,
                &token,
                Opening {
                    max_len: usize::MAX,
                    now: iat,
                    skew: SKEW
                },
                &wrong
            )
            .is_err()
        );
    }
}
