//! OAuth 2.1 resource-server mode: validate JWT access tokens against the authorization
//! server's JWKS (RS256 and ES256), checking issuer, audience (RFC 8707) and expiry.
//!
//! Keys are fetched from `jwks_url` on first use and refreshed when a token names an unknown
//! key id (at most once per `MIN_REFETCH`, so garbage tokens cannot hammer the authorization
//! server) or when the cached set is older than `MAX_AGE`.

use mcpr_core::sync::lock;
use std::collections::BTreeSet;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use jsonwebtoken::jwk::JwkSet;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};

use crate::grant::Grant;

/// Keys older than this are refetched.
const MAX_AGE: Duration = Duration::from_secs(600);
/// An unknown key id triggers a refetch at most this often.
const MIN_REFETCH: Duration = Duration::from_secs(30);

/// Settings of JWT validation.
#[derive(Debug, Clone)]
pub struct JwtSettings {
    /// Expected `iss`.
    pub issuer: String,
    /// Where the authorization server publishes its keys.
    pub jwks_url: String,
    /// Expected `aud` (this resource's canonical URI, RFC 8707).
    pub audience: String,
    /// Clock skew tolerated on `exp` and `nbf`.
    pub leeway: Duration,
    /// Scopes every token must carry to use the endpoint at all (403 `insufficient_scope`).
    pub required_scopes: Vec<String>,
}

/// Why a token was refused; maps to 401 `invalid_token` or 403 `insufficient_scope`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JwtError {
    /// Not acceptable: expired, wrong issuer/audience, bad signature, malformed.
    Invalid(String),
    /// Valid, but without a scope the endpoint requires.
    InsufficientScope(String),
    /// The keys could not be fetched (the authorization server is down): 503.
    KeysUnavailable(String),
}

/// The biggest key set read. A set holds a few keys of a few hundred bytes each; the
/// authorization server (or whatever answers at its URL) cannot make the process hold more.
const MAX_JWKS_BYTES: usize = 1 << 20;

/// The body of `resp`, or `None` when it is over `max` bytes: by `Content-Length` before
/// reading, and while it streams (reading stops at the first chunk past `max`).
async fn read_at_most(mut resp: reqwest::Response, max: usize) -> reqwest::Result<Option<Vec<u8>>> {
    if resp.content_length().is_some_and(|n| n > max as u64) {
        return Ok(None);
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await? {
        if body.len() + chunk.len() > max {
            return Ok(None);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Some(body))
}

struct Keys {
    set: JwkSet,
    fetched: Instant,
}

/// A JWT validator with a cached key set.
pub struct JwtValidator {
    settings: JwtSettings,
    http: reqwest::Client,
    keys: tokio::sync::Mutex<Option<Keys>>,
    last_fetch: Mutex<Option<Instant>>,
}

#[derive(serde::Deserialize)]
struct Claims {
    /// The subject: who the token speaks for; a legacy session is bound to it.
    #[serde(default)]
    sub: Option<String>,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    scp: Option<Vec<String>>,
}

impl JwtValidator {
    /// A validator for `settings`.
    pub fn new(settings: JwtSettings) -> Result<Self, String> {
        // rustls needs a process-wide crypto provider; ring builds with a C compiler only.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| format!("cannot build the JWKS client: {e}"))?;
        Ok(Self {
            settings,
            http,
            keys: tokio::sync::Mutex::new(None),
            last_fetch: Mutex::new(None),
        })
    }

    async fn fetch(&self) -> Result<JwkSet, JwtError> {
        *lock(&self.last_fetch) = Some(Instant::now());
        let url = &self.settings.jwks_url;
        let resp =
            self.http.get(url).send().await.map_err(|e| {
                JwtError::KeysUnavailable(format!("cannot fetch keys from {url}: {e}"))
            })?;
        if !resp.status().is_success() {
            return Err(JwtError::KeysUnavailable(format!(
                "{url} answered {}",
                resp.status()
            )));
        }
        let body = read_at_most(resp, MAX_JWKS_BYTES)
            .await
            .map_err(|e| JwtError::KeysUnavailable(format!("reading {url}: {e}")))?
            .ok_or_else(|| {
                JwtError::KeysUnavailable(format!(
                    "{url} sent a key set over {} KiB; the rest was not read",
                    MAX_JWKS_BYTES / 1024
                ))
            })?;
        serde_json::from_slice(&body)
            .map_err(|e| JwtError::KeysUnavailable(format!("{url} is not a JWK set: {e}")))
    }

    /// The key for `kid`, refetching the set when it is stale or does not know the key.
    async fn key(&self, kid: Option<&str>) -> Result<jsonwebtoken::jwk::Jwk, JwtError> {
        let mut keys = self.keys.lock().await;
        let find = |set: &JwkSet| match kid {
            Some(k) => set.find(k).cloned(),
            // Without a key id, a set of exactly one key is unambiguous.
            None => (set.keys.len() == 1).then(|| set.keys[0].clone()),
        };
        let stale = keys.as_ref().is_none_or(|k| k.fetched.elapsed() > MAX_AGE);
        if !stale && let Some(k) = keys.as_ref().and_then(|k| find(&k.set)) {
            return Ok(k);
        }
        let recently = lock(&self.last_fetch).is_some_and(|t| t.elapsed() < MIN_REFETCH);
        if stale || !recently {
            let set = self.fetch().await?;
            *keys = Some(Keys {
                set,
                fetched: Instant::now(),
            });
        }
        keys.as_ref().and_then(|k| find(&k.set)).ok_or_else(|| {
            JwtError::Invalid(match kid {
                Some(k) => {
                    format!("the token's key id {k:?} is not among the authorization server's keys")
                }
                None => "the token names no key id and the key set has more than one key".into(),
            })
        })
    }

    /// Validate `token`; on success, the caller's grant (its scopes) and its subject (`sub`),
    /// when the token names one.
    pub async fn validate(&self, token: &str) -> Result<(Grant, Option<String>), JwtError> {
        let header = jsonwebtoken::decode_header(token)
            .map_err(|e| JwtError::Invalid(format!("malformed token: {e}")))?;
        if !matches!(header.alg, Algorithm::RS256 | Algorithm::ES256) {
            return Err(JwtError::Invalid(format!(
                "algorithm {:?} is not accepted (RS256, ES256)",
                header.alg
            )));
        }
        let jwk = self.key(header.kid.as_deref()).await?;
        let key = DecodingKey::from_jwk(&jwk)
            .map_err(|e| JwtError::Invalid(format!("unusable key: {e}")))?;
        let mut v = Validation::new(header.alg);
        v.leeway = self.settings.leeway.as_secs();
        v.set_issuer(&[&self.settings.issuer]);
        v.set_audience(&[&self.settings.audience]);
        v.set_required_spec_claims(&["exp", "iss", "aud"]);
        let data = jsonwebtoken::decode::<Claims>(token, &key, &v).map_err(|e| {
            use jsonwebtoken::errors::ErrorKind as K;
            JwtError::Invalid(match e.kind() {
                K::ExpiredSignature => "the token has expired".into(),
                K::ImmatureSignature => "the token is not valid yet".into(),
                K::InvalidIssuer => format!("the token was not issued by {}", self.settings.issuer),
                K::InvalidAudience => {
                    format!("the token is not meant for {}", self.settings.audience)
                }
                K::InvalidSignature => "the token's signature does not verify".into(),
                K::MissingRequiredClaim(c) => format!("the token has no `{c}` claim"),
                other => format!("invalid token: {other:?}"),
            })
        })?;
        let mut scopes: BTreeSet<String> = data
            .claims
            .scope
            .unwrap_or_default()
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        scopes.extend(data.claims.scp.unwrap_or_default());
        let missing: Vec<&String> = self
            .settings
            .required_scopes
            .iter()
            .filter(|s| !scopes.contains(*s))
            .collect();
        if !missing.is_empty() {
            let list: Vec<&str> = missing.iter().map(|s| s.as_str()).collect();
            return Err(JwtError::InsufficientScope(list.join(" ")));
        }
        Ok((
            Grant {
                scopes: Some(scopes),
                personal: true,
            },
            data.claims.sub,
        ))
    }
}
