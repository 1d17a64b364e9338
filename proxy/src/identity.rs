//! `[identity] jwt`, `api_keys` and `stdio_principal`: verified callers. Over HTTP the proxy is
//! an OAuth 2.1 resource server (MCP's authorization spec, RFC 9728): a bearer token is checked
//! against the issuer's JWKS (`jsonwebtoken`, RustCrypto backend), or looked up among the API
//! keys' SHA-256 hashes; the caller goes into the request as a `VerifiedCaller`, which the
//! library binds approvals, parked calls and the decision log's caller tag to. A request without
//! a good credential is answered 401 with `WWW-Authenticate: Bearer resource_metadata="…"`; a
//! JWKS that cannot be had answers 503. `/.well-known/oauth-protected-resource` names the issuer.
//! Over stdio every request's caller is `stdio_principal`, else the OS user (`$USER`, else
//! `$LOGNAME`, else `uid:N` from rustix's `getuid`).
//!
//! The JWKS is fetched at start, kept, and fetched again only when a token names a `kid` it
//! lacks (or none could be read yet), at most once per [`REFRESH_INTERVAL`] (a storm of unknown kids waits on one lock and
//! finds the last attempt too recent), each fetch bounded in time ([`FETCH_TIMEOUT`]) and size
//! ([`MAX_JWKS_BYTES`]).

use std::collections::HashMap;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};
use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use tower_elicitation::VerifiedCaller;

/// The least time between two JWKS fetches that an unknown `kid` asks for.
pub const REFRESH_INTERVAL: Duration = Duration::from_secs(60);
/// How long one JWKS fetch may take.
pub const FETCH_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest JWKS read.
pub const MAX_JWKS_BYTES: usize = 1 << 20;
/// Where the protected resource's metadata is served (RFC 9728 §3).
pub const METADATA_PATH: &str = "/.well-known/oauth-protected-resource";

/// `[identity] jwt = { … }`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JwtSpec {
    /// The `iss` every token must carry; named in the metadata as the authorization server.
    pub issuer: String,
    /// The `aud` values accepted (one of them must be in the token).
    pub audiences: Vec<String>,
    pub jwks_url: Option<String>,
    pub jwks_file: Option<PathBuf>,
    /// Accepted `alg`s (default `RS256`, `ES256`, `EdDSA`); symmetric ones are refused.
    pub algorithms: Option<Vec<String>>,
    /// Seconds of clock difference tolerated on `exp` and `nbf` (default 60).
    pub leeway: Option<u64>,
    /// The claim naming the caller (default `sub`): what approvals bind to.
    pub principal_claim: Option<String>,
    /// This server's resource identifier (e.g. `https://mcp.example.com/mcp`), in the metadata
    /// and `WWW-Authenticate`; default `http://<Host>/mcp`.
    pub resource: Option<String>,
}

/// Why a credential was not accepted.
#[derive(Debug)]
pub enum Refused {
    /// No credential: 401, no `error`.
    Missing,
    /// A bad one: 401 `invalid_token`; the reason is logged.
    Invalid(String),
    /// The keys cannot be had: 503; the reason is logged.
    Unavailable(String),
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Missing => f.write_str("no credential"),
            Self::Invalid(why) => write!(f, "{why}"),
            Self::Unavailable(why) => write!(f, "the keys cannot be read now ({why})"),
        }
    }
}

/// The JWT rules, with the JWKS as last fetched.
pub struct Jwt {
    spec: JwtSpec,
    algorithms: Vec<Algorithm>,
    keys: RwLock<Option<Arc<Keys>>>,
    last_fetch: tokio::sync::Mutex<Option<Instant>>,
    client: reqwest::Client,
}

/// A JWKS's keys by `kid` (a key without one under ""), each with the `alg` its JWK names.
type Keys = HashMap<String, (DecodingKey, Option<String>)>;

impl Jwt {
    /// Checks `spec`.
    ///
    /// # Errors
    ///
    /// Neither or both of `jwks_url` and `jwks_file`, no audience, an empty issuer or claim, an
    /// unknown or symmetric algorithm.
    pub fn new(spec: JwtSpec) -> Result<Self, String> {
        if spec.jwks_url.is_some() == spec.jwks_file.is_some() {
            return Err("[identity] jwt: exactly one of jwks_url and jwks_file".into());
        }
        if spec.issuer.is_empty() {
            return Err("[identity] jwt: issuer is empty".into());
        }
        if spec.audiences.is_empty() || spec.audiences.iter().any(String::is_empty) {
            return Err("[identity] jwt: audiences must name at least one audience".into());
        }
        if spec.principal_claim.as_deref() == Some("") {
            return Err("[identity] jwt: principal_claim is empty".into());
        }
        let names = spec
            .algorithms
            .clone()
            .unwrap_or_else(|| ["RS256", "ES256", "EdDSA"].map(str::to_owned).to_vec());
        if names.is_empty() {
            return Err("[identity] jwt: algorithms is empty".into());
        }
        let mut algorithms = Vec::new();
        for name in &names {
            let algorithm = Algorithm::from_str(name)
                .map_err(|_| format!("[identity] jwt: unknown algorithm {name:?}"))?;
            if matches!(
                algorithm,
                Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512
            ) {
                return Err(format!(
                    "[identity] jwt: {name} is symmetric: a JWKS holds public keys (RS*, PS*, ES*, EdDSA)"
                ));
            }
            algorithms.push(algorithm);
        }
        if let Some(url) = &spec.jwks_url {
            reqwest::Url::parse(url)
                .map_err(|e| format!("[identity] jwt: jwks_url {url:?}: {e}"))?;
        }
        let client = reqwest::Client::builder()
            .timeout(FETCH_TIMEOUT)
            .connect_timeout(FETCH_TIMEOUT)
            .build()
            .map_err(|e| format!("[identity] jwt: {e}"))?;
        Ok(Self {
            spec,
            algorithms,
            keys: RwLock::new(None),
            last_fetch: tokio::sync::Mutex::new(None),
            client,
        })
    }

    /// Fetches the keys once at start; a failure is logged, and calls are refused (503) until a
    /// later fetch succeeds.
    pub async fn prime(&self) {
        if let Err(why) = self.refresh(true).await {
            tracing::warn!(
                "[identity] jwt: the JWKS cannot be read ({why}): calls are refused until it can"
            );
        }
    }

    fn known(&self) -> Option<Arc<Keys>> {
        self.keys.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Fetches the JWKS again unless the last fetch an unknown `kid` asked for was within
    /// [`REFRESH_INTERVAL`] (`force`: at start, which does not count). `Ok(false)`: not
    /// fetched, too soon.
    async fn refresh(&self, force: bool) -> Result<bool, String> {
        let mut last = self.last_fetch.lock().await;
        if !force {
            if last.is_some_and(|at| at.elapsed() < REFRESH_INTERVAL) {
                return Ok(false);
            }
            *last = Some(Instant::now());
        }
        let text = match (&self.spec.jwks_url, &self.spec.jwks_file) {
            (Some(url), _) => self.fetch(url).await?,
            (None, Some(path)) => {
                std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?
            }
            (None, None) => return Err("no JWKS source".into()),
        };
        let set: JwkSet = serde_json::from_slice(&text).map_err(|e| format!("not a JWKS: {e}"))?;
        let mut keys = Keys::new();
        for jwk in &set.keys {
            if matches!(
                jwk.common.public_key_use,
                Some(jsonwebtoken::jwk::PublicKeyUse::Encryption)
            ) {
                continue;
            }
            match DecodingKey::from_jwk(jwk) {
                Ok(key) => {
                    let alg = jwk.common.key_algorithm.map(|alg| alg.to_string());
                    keys.insert(jwk.common.key_id.clone().unwrap_or_default(), (key, alg));
                }
                Err(e) => {
                    tracing::warn!(kid = ?jwk.common.key_id, "[identity] jwt: a JWKS key is skipped: {e}")
                }
            }
        }
        tracing::info!(keys = keys.len(), "[identity] jwt: JWKS read");
        *self.keys.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(keys));
        Ok(true)
    }

    async fn fetch(&self, url: &str) -> Result<Vec<u8>, String> {
        let mut response = self
            .client
            .get(url)
            .header(header::ACCEPT, "application/json")
            .send()
            .await
            .map_err(|e| format!("GET {url}: {e}"))?;
        if !response.status().is_success() {
            return Err(format!("GET {url}: {}", response.status()));
        }
        let mut body = Vec::new();
        while let Some(chunk) = response
            .chunk()
            .await
            .map_err(|e| format!("GET {url}: {e}"))?
        {
            if body.len() + chunk.len() > MAX_JWKS_BYTES {
                return Err(format!("GET {url}: larger than {MAX_JWKS_BYTES} bytes"));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    /// The caller `token` names, once its signature, `alg`, `iss`, `aud`, `exp` (and `nbf`)
    /// check out.
    pub async fn verify(&self, token: &str) -> Result<VerifiedCaller, Refused> {
        let head = jsonwebtoken::decode_header(token)
            .map_err(|e| Refused::Invalid(format!("not a JWT: {e}")))?;
        if !self.algorithms.contains(&head.alg) {
            return Err(Refused::Invalid(format!(
                "alg {:?} is not accepted",
                head.alg
            )));
        }
        let kid = head.kid.clone().unwrap_or_default();
        let key = match self.known().and_then(|keys| keys.get(&kid).cloned()) {
            Some(key) => key,
            None => {
                let fetched = self.refresh(false).await;
                match (fetched, self.known()) {
                    (Err(why), None) => return Err(Refused::Unavailable(why)),
                    (_, None) => return Err(Refused::Unavailable("no JWKS read yet".into())),
                    (Err(why), Some(_)) => {
                        tracing::warn!("[identity] jwt: the JWKS cannot be read again ({why})");
                        return Err(Refused::Invalid(format!("unknown kid {kid:?}")));
                    }
                    (Ok(_), Some(keys)) => keys
                        .get(&kid)
                        .cloned()
                        .ok_or_else(|| Refused::Invalid(format!("unknown kid {kid:?}")))?,
                }
            }
        };
        let (key, key_alg) = key;
        if key_alg.is_some_and(|alg| alg != format!("{:?}", head.alg)) {
            return Err(Refused::Invalid(format!(
                "alg {:?} is not the one its key {kid:?} names",
                head.alg
            )));
        }
        let mut validation = Validation::new(head.alg);
        validation.algorithms = vec![head.alg];
        validation.leeway = self.spec.leeway.unwrap_or(60);
        validation.set_issuer(&[&self.spec.issuer]);
        validation.set_audience(&self.spec.audiences);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        validation.validate_nbf = true;
        let data = jsonwebtoken::decode::<Map<String, Value>>(token, &key, &validation)
            .map_err(|e| Refused::Invalid(e.to_string()))?;
        let claim = self.spec.principal_claim.as_deref().unwrap_or("sub");
        let principal = data
            .claims
            .get(claim)
            .and_then(Value::as_str)
            .filter(|p| !p.is_empty())
            .ok_or_else(|| Refused::Invalid(format!("no string claim {claim:?}")))?
            .to_owned();
        Ok(VerifiedCaller::new(principal, data.claims))
    }
}

/// `[identity] api_keys = "file:PATH"`: named callers by the SHA-256 of their key.
#[derive(Debug, Default)]
pub struct ApiKeys {
    by_hash: HashMap<[u8; 32], String>,
}

impl ApiKeys {
    /// Reads a file of `name sha256-hex` lines (`#` comments and blank lines skipped).
    ///
    /// # Errors
    ///
    /// The file's line and what is wrong with it: not two fields, a hash that is not 64 hex
    /// digits, a name or hash given twice; or the file cannot be read, or names nobody.
    pub fn parse(text: &str) -> Result<Self, (usize, String)> {
        let mut keys = Self::default();
        let mut names = std::collections::HashSet::new();
        for (at, line) in text.lines().enumerate() {
            let line_no = at + 1;
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut fields = line.split_whitespace();
            let (Some(name), Some(hash), None) = (fields.next(), fields.next(), fields.next())
            else {
                return Err((line_no, "expected `name sha256-hex-of-the-key`".into()));
            };
            let hash = hex32(hash).ok_or((
                line_no,
                format!("the hash of {name:?} is not 64 hex digits (SHA-256)"),
            ))?;
            if !names.insert(name.to_owned()) {
                return Err((line_no, format!("{name:?} is named twice")));
            }
            if keys.by_hash.insert(hash, name.to_owned()).is_some() {
                return Err((
                    line_no,
                    format!("{name:?} has the same key as another caller"),
                ));
            }
        }
        if keys.by_hash.is_empty() {
            return Err((1, "names no caller".into()));
        }
        Ok(keys)
    }

    /// The caller whose key is `key`, by a lookup of its hash (no comparison of secrets).
    pub fn verify(&self, key: &str) -> Option<VerifiedCaller> {
        let hash: [u8; 32] = Sha256::digest(key.as_bytes()).into();
        self.by_hash
            .get(&hash)
            .map(|name| VerifiedCaller::new(name.clone(), Map::new()))
    }
}

fn hex32(text: &str) -> Option<[u8; 32]> {
    if text.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// How HTTP callers are verified.
pub struct Guard {
    pub jwt: Option<Jwt>,
    pub api_keys: Option<ApiKeys>,
}

impl Guard {
    /// The caller of a request bearing `token`.
    pub(crate) async fn verify(&self, token: Option<&str>) -> Result<VerifiedCaller, Refused> {
        let token = token.ok_or(Refused::Missing)?;
        if let Some(caller) = self.api_keys.as_ref().and_then(|keys| keys.verify(token)) {
            return Ok(caller);
        }
        match &self.jwt {
            Some(jwt) => jwt.verify(token).await,
            None => Err(Refused::Invalid("not a known API key".into())),
        }
    }

    /// This server's resource identifier, as configured or from the request's `Host`.
    fn resource(&self, headers: &http::HeaderMap) -> String {
        if let Some(resource) = self.jwt.as_ref().and_then(|jwt| jwt.spec.resource.clone()) {
            return resource;
        }
        let host = headers
            .get(header::HOST)
            .and_then(|h| h.to_str().ok())
            .unwrap_or("localhost");
        format!("http://{host}/mcp")
    }

    /// Where this server's metadata is: the resource's origin, then [`METADATA_PATH`].
    fn metadata_url(&self, headers: &http::HeaderMap) -> String {
        let resource = self.resource(headers);
        match reqwest::Url::parse(&resource) {
            Ok(url) => format!("{}{METADATA_PATH}", url.origin().ascii_serialization()),
            Err(_) => METADATA_PATH.to_owned(),
        }
    }

    /// The RFC 9728 document.
    fn metadata(&self, headers: &http::HeaderMap) -> Value {
        let mut document = json!({
            "resource": self.resource(headers),
            "bearer_methods_supported": ["header"],
        });
        if let Some(jwt) = &self.jwt {
            document["authorization_servers"] = json!([jwt.spec.issuer]);
        }
        document
    }

    fn refusal(&self, headers: &http::HeaderMap, refused: Refused) -> Response {
        let metadata = self.metadata_url(headers);
        let (status, challenge) = match refused {
            Refused::Missing => (
                StatusCode::UNAUTHORIZED,
                format!("Bearer resource_metadata=\"{metadata}\""),
            ),
            Refused::Invalid(why) => {
                tracing::info!("[identity] a credential is refused: {why}");
                (
                    StatusCode::UNAUTHORIZED,
                    format!(
                        "Bearer resource_metadata=\"{metadata}\", error=\"invalid_token\", error_description=\"The access token is invalid\""
                    ),
                )
            }
            Refused::Unavailable(why) => {
                tracing::warn!("[identity] a call is refused, the keys cannot be read: {why}");
                let mut response = (
                    StatusCode::SERVICE_UNAVAILABLE,
                    "The caller cannot be verified now.\n",
                )
                    .into_response();
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("10"));
                return response;
            }
        };
        let mut response = (status, "Unauthorized\n").into_response();
        if let Ok(value) = HeaderValue::from_str(&challenge) {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, value);
        }
        response
    }
}

/// The bearer token of `headers`' `Authorization`, if it has one.
pub(crate) fn bearer(headers: &http::HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|token| !token.is_empty())
}

/// `app` with its callers verified by `guard`: the metadata served, `/mcp` refused without a
/// good credential, the caller put into each request (its `Authorization` removed: the token
/// is the proxy's to check, never the upstream's).
pub fn protect(app: axum::Router, guard: Arc<Guard>) -> axum::Router {
    app.layer(axum::middleware::from_fn(
        move |mut request: axum::extract::Request, next: axum::middleware::Next| {
            let guard = Arc::clone(&guard);
            async move {
                let path = request.uri().path();
                if path == METADATA_PATH || path.starts_with(&format!("{METADATA_PATH}/")) {
                    return axum::Json(guard.metadata(request.headers())).into_response();
                }
                if path != "/mcp" && !path.starts_with("/mcp/") {
                    return next.run(request).await;
                }
                match guard.verify(bearer(request.headers())).await {
                    Ok(caller) => {
                        request.headers_mut().remove(header::AUTHORIZATION);
                        request.extensions_mut().insert(caller);
                        next.run(request).await
                    }
                    Err(refused) => guard.refusal(request.headers(), refused),
                }
            }
        },
    ))
}

/// The caller of every stdio request: `configured`, else the OS user.
pub fn stdio_caller(configured: Option<&str>) -> VerifiedCaller {
    let name = configured.map(str::to_owned).unwrap_or_else(|| {
        ["USER", "LOGNAME"]
            .into_iter()
            .find_map(|var| std::env::var(var).ok().filter(|v| !v.is_empty()))
            .unwrap_or_else(|| format!("uid:{}", rustix::process::getuid().as_raw()))
    });
    VerifiedCaller::new(name, Map::new())
}

/// `app` with every request's caller `caller` (over stdio: one person, one process).
pub fn as_stdio(app: axum::Router, caller: VerifiedCaller) -> axum::Router {
    app.layer(axum::middleware::from_fn(
        move |mut request: axum::extract::Request, next: axum::middleware::Next| {
            request.extensions_mut().insert(caller.clone());
            next.run(request)
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_key_files_name_the_bad_line() {
        let hash = hex(&Sha256::digest(b"secret-1"));
        let keys = ApiKeys::parse(&format!("# team\n\nalice {hash}\n")).unwrap();
        assert_eq!(keys.verify("secret-1").unwrap().principal(), "alice");
        assert!(keys.verify("secret-2").is_none());
        assert_eq!(ApiKeys::parse("alice\n").unwrap_err().0, 1);
        assert_eq!(
            ApiKeys::parse(&format!("a {hash}\nb zz\n")).unwrap_err().0,
            2
        );
        assert_eq!(
            ApiKeys::parse(&format!("a {hash}\na {hash}\n"))
                .unwrap_err()
                .0,
            2
        );
        assert!(ApiKeys::parse("# nobody\n").is_err());
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn the_stdio_caller_is_the_configured_one_else_the_os_user() {
        assert_eq!(stdio_caller(Some("alice")).principal(), "alice");
        let os = stdio_caller(None);
        let expected = std::env::var("USER")
            .ok()
            .filter(|v| !v.is_empty())
            .or_else(|| std::env::var("LOGNAME").ok().filter(|v| !v.is_empty()))
            .unwrap_or_else(|| format!("uid:{}", rustix::process::getuid().as_raw()));
        assert_eq!(os.principal(), expected);
    }

    #[test]
    fn bearer_tokens_are_read_case_blind() {
        let mut headers = http::HeaderMap::new();
        headers.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("bearer abc"),
        );
        assert_eq!(bearer(&headers), Some("abc"));
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic abc"));
        assert_eq!(bearer(&headers), None);
    }
}
