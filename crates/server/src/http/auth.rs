//! Bearer-token authentication at the HTTP edge.
//!
//! Static tokens are compared in constant time; the `Bearer` scheme is matched without regard
//! to case. The edge ([`super::edge`]) authenticates each request on its headers, before it
//! takes a concurrency permit or reads the body, and puts the caller's [`Grant`] and
//! [`Identity`] in the request's extensions, which the MCP handler reads (through the HTTP
//! parts rmcp passes along) to decide which mounts the caller may see.

use std::collections::BTreeSet;
use std::hash::BuildHasher as _;
use std::sync::Arc;

use hmac::{Hmac, KeyInit as _, Mac as _};

use axum::response::Response;
use http::{HeaderValue, StatusCode, header};
use subtle::ConstantTimeEq as _;

use crate::grant::{Grant, Identity};

/// One accepted static token and the scopes it grants.
#[derive(Clone)]
pub struct StaticToken {
    /// The secret.
    pub token: String,
    /// Scopes; `None` grants every mount.
    pub scopes: Option<BTreeSet<String>>,
    /// The identity its holder has (`static token <name>`), when the configuration names
    /// it; otherwise a keyed hash of the token stands for it. Never its position in the
    /// list: replicas listing tokens in another order must agree on who is who.
    pub name: Option<String>,
}

impl std::fmt::Debug for StaticToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secret, not even in debug logs.
        f.debug_struct("StaticToken")
            .field("scopes", &self.scopes)
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// The key of the hash that names a token without a name (and a JWT without a subject):
/// derived from the cluster's secret, so every replica computes the same identity for the
/// same token while nobody without the secret can test a guessed token against it.
#[derive(Clone)]
pub struct IdentityKey([u8; 32]);

impl IdentityKey {
    /// The key for a cluster whose secret is `secret`.
    pub fn derive(secret: &[u8]) -> Self {
        let mut m = <Hmac<sha2::Sha256>>::new_from_slice(secret).expect("any key length");
        m.update(b"mcp-resources token identity v1");
        Self(m.finalize().into_bytes().into())
    }

    /// A key of this process only (no cluster: identities need not agree elsewhere).
    fn random() -> Self {
        let state = std::collections::hash_map::RandomState::new();
        let mut key = [0u8; 32];
        for (i, chunk) in key.chunks_mut(8).enumerate() {
            chunk.copy_from_slice(&state.hash_one(i).to_le_bytes());
        }
        Self(key)
    }

    fn name(&self, token: &str) -> String {
        let mut m = <Hmac<sha2::Sha256>>::new_from_slice(&self.0).expect("any key length");
        m.update(token.as_bytes());
        m.finalize().into_bytes()[..8]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

impl std::fmt::Debug for IdentityKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("IdentityKey(***)")
    }
}

/// The authentication settings of the HTTP edge.
#[derive(Debug, Clone, Default)]
pub struct AuthSettings {
    /// Accepted static bearer tokens.
    pub tokens: Vec<StaticToken>,
    /// The URL of this server's `/.well-known/oauth-protected-resource` document, announced
    /// in `WWW-Authenticate`.
    pub resource_metadata_url: Option<String>,
    /// The resource identifier (this server's MCP URL) for the protected-resource metadata.
    pub resource: Option<String>,
    /// OAuth 2.1 resource-server mode: JWT access tokens from an authorization server.
    pub jwt: Option<super::jwt::JwtSettings>,
    /// The key of token identities ([`IdentityKey`]); `None`: one of this process.
    pub identity_key: Option<IdentityKey>,
}

impl AuthSettings {
    /// Whether any way to authenticate is configured.
    pub fn is_enabled(&self) -> bool {
        !self.tokens.is_empty() || self.jwt.is_some()
    }
}

/// The authenticator the edge consults on every request's headers.
pub struct Auth {
    pub(crate) settings: AuthSettings,
    jwt: Option<super::jwt::JwtValidator>,
    /// Each static token's identity, in the order of `settings.tokens`.
    identities: Vec<Identity>,
    /// Names tokens without a name: a keyed hash, that cannot be computed (or reversed)
    /// without the key.
    key: IdentityKey,
}

impl Auth {
    /// The authenticator for `settings`.
    pub(crate) fn new(settings: AuthSettings) -> Result<Arc<Self>, String> {
        let jwt = settings
            .jwt
            .clone()
            .map(super::jwt::JwtValidator::new)
            .transpose()?;
        let key = settings
            .identity_key
            .clone()
            .unwrap_or_else(IdentityKey::random);
        let identities = settings
            .tokens
            .iter()
            .map(|t| {
                Identity::new(match &t.name {
                    Some(name) => format!("static token {name}"),
                    None => format!("static token {}", key.name(&t.token)),
                })
            })
            .collect();
        Ok(Arc::new(Self {
            settings,
            jwt,
            identities,
            key,
        }))
    }

    fn check(&self, presented: &str) -> Option<(Grant, Identity)> {
        let mut found = None;
        // Compare against every token, so the time taken says nothing about which matched.
        for (t, identity) in self.settings.tokens.iter().zip(&self.identities) {
            if bool::from(t.token.as_bytes().ct_eq(presented.as_bytes())) && found.is_none() {
                found = Some((
                    Grant {
                        scopes: t.scopes.clone(),
                        personal: t.scopes.is_some(),
                    },
                    // Its name, or a keyed hash of it: the same on every replica whatever
                    // the order of the list, and never the token.
                    identity.clone(),
                ));
            }
        }
        found
    }

    pub(crate) fn challenge(&self, error: Option<&str>, description: &str) -> Response {
        self.challenge_with(StatusCode::UNAUTHORIZED, error, description, None)
    }

    fn challenge_with(
        &self,
        status: StatusCode,
        error: Option<&str>,
        description: &str,
        scope: Option<&str>,
    ) -> Response {
        let mut value = String::from("Bearer");
        let mut params = Vec::new();
        if let Some(url) = &self.settings.resource_metadata_url {
            params.push(format!("resource_metadata=\"{url}\""));
        }
        if let Some(e) = error {
            params.push(format!("error=\"{e}\""));
            // Quotes would end the parameter early; the description is for humans anyway.
            params.push(format!(
                "error_description=\"{}\"",
                description.replace('"', "'")
            ));
        }
        if let Some(s) = scope {
            params.push(format!("scope=\"{s}\""));
        }
        if !params.is_empty() {
            value.push(' ');
            value.push_str(&params.join(", "));
        }
        let mut resp = super::edge::refuse(
            status,
            crate::wire::codes::UNAUTHORIZED,
            format!("unauthorized: {description}"),
        );
        if let Ok(v) = HeaderValue::from_str(&value) {
            resp.headers_mut().insert(header::WWW_AUTHENTICATE, v);
        }
        resp
    }
}

/// What the headers alone say about a caller.
pub(crate) enum OnHeaders<'h> {
    /// Known now: a static token's grant and identity, or the refusal to send.
    Known(Result<(Grant, Identity), Response>),
    /// A JWT, to validate against the authorization server's keys ([`Auth::validate_jwt`]),
    /// which may have to be fetched first.
    Jwt(&'h str),
}

impl Auth {
    /// Authenticate a request on its headers alone, before anything reads its body or holds a
    /// concurrency permit: the caller's grant and identity, or the refusal to send.
    pub(crate) async fn authenticate(
        &self,
        headers: &http::HeaderMap,
    ) -> Result<(Grant, Identity), Response> {
        match self.on_headers(headers) {
            OnHeaders::Known(verdict) => verdict,
            OnHeaders::Jwt(token) => self.validate_jwt(token).await,
        }
    }

    /// What can be told of a request's credentials without waiting: all of it, except the
    /// validation of a JWT.
    pub(crate) fn on_headers<'h>(&self, headers: &'h http::HeaderMap) -> OnHeaders<'h> {
        let Some(value) = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
        else {
            return OnHeaders::Known(Err(
                self.challenge(None, "a bearer token is required (Authorization: Bearer …)")
            ));
        };
        // RFC 9110 §11.1: the scheme name is case-insensitive (`bearer`, `BEARER`).
        let Some(token) = value
            .split_once(' ')
            .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
            .map(|(_, token)| token.trim())
        else {
            return OnHeaders::Known(Err(self.challenge(
                Some("invalid_request"),
                "the Authorization header must use the Bearer scheme",
            )));
        };
        if let Some(found) = self.check(token) {
            return OnHeaders::Known(Ok(found));
        }
        if self.jwt.is_none() {
            return OnHeaders::Known(Err(
                self.challenge(Some("invalid_token"), "the token is not valid")
            ));
        }
        // A JWS in compact form is three dot-separated parts. Anything else cannot be an
        // access token of the authorization server, so with static tokens configured it is
        // most likely a mistyped or rotated static token: say that, rather than the JWT
        // decoder's "malformed token", which sends the operator looking at the wrong thing.
        if token.split('.').count() != 3 {
            let why = if self.settings.tokens.is_empty() {
                "the token is not a JWT (an access token has three dot-separated parts)"
            } else {
                "the token is neither one of the configured static tokens nor a JWT"
            };
            return OnHeaders::Known(Err(self.challenge(Some("invalid_token"), why)));
        }
        OnHeaders::Jwt(token)
    }

    /// The grant and identity of JWT `token`, or the refusal to send.
    pub(crate) async fn validate_jwt(&self, token: &str) -> Result<(Grant, Identity), Response> {
        let Some(jwt) = &self.jwt else {
            return Err(self.challenge(Some("invalid_token"), "the token is not valid"));
        };
        match jwt.validate(token).await {
            Ok((grant, subject)) => {
                let identity = match subject {
                    Some(sub) => Identity::new(format!("subject {sub}")),
                    // A token that names nobody is its own identity; a keyed hash stands
                    // for it so the secret itself is never kept or shown.
                    None => Identity::new(format!("token {}", self.key.name(token))),
                };
                Ok((grant, identity))
            }
            Err(super::jwt::JwtError::Invalid(why)) => {
                Err(self.challenge(Some("invalid_token"), &why))
            }
            Err(super::jwt::JwtError::InsufficientScope(scopes)) => Err(self.challenge_with(
                StatusCode::FORBIDDEN,
                Some("insufficient_scope"),
                &format!("the token lacks the scope(s) {scopes}"),
                Some(&scopes),
            )),
            Err(super::jwt::JwtError::KeysUnavailable(why)) => {
                tracing::warn!(%why, "cannot validate tokens: the authorization server's keys are unavailable");
                Err(super::edge::refuse(
                    StatusCode::SERVICE_UNAVAILABLE,
                    crate::wire::codes::INTERNAL_ERROR,
                    "cannot validate the token right now: the authorization server's keys are unavailable".into(),
                ))
            }
        }
    }
}

/// rmcp acknowledges a `subscriptions/listen` filter before the handler can see who asks,
/// so for a caller with scopes the URIs of mounts it may not see are taken out of the
/// request body here. They then look exactly like URIs outside every mount: left out of the
/// acknowledgment, never watched. `None` when nothing needs to change.
pub(crate) fn hide_subscriptions(
    body: &[u8],
    router: &crate::Router,
    grant: &Grant,
) -> Option<Vec<u8>> {
    // An unscoped caller sees every mount: nothing to take out.
    grant.scopes.as_ref()?;
    let mut v = serde_json::from_slice::<serde_json::Value>(body).ok()?;
    if v.get("method")?.as_str()? != "subscriptions/listen" {
        return None;
    }
    let uris = v
        .pointer_mut("/params/notifications/resourceSubscriptions")?
        .as_array_mut()?;
    let before = uris.len();
    uris.retain(|u| {
        let Some(Ok(uri)) = u.as_str().map(mcpr_core::ResourceUri::parse) else {
            return true;
        };
        router
            .route(&uri)
            .is_none_or(|m| grant.allows(m.scope.as_deref()))
    });
    (uris.len() != before)
        .then(|| serde_json::to_vec(&v).ok())
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_compare_whole() {
        let auth = Auth::new(AuthSettings {
            tokens: vec![StaticToken {
                token: "s3cret".into(),
                scopes: None,
                name: None,
            }],
            ..Default::default()
        })
        .unwrap();
        assert!(auth.check("s3cret").is_some());
        assert!(auth.check("s3cre").is_none());
        assert!(auth.check("s3cret!").is_none());
        assert!(auth.check("").is_none());
    }

    #[test]
    fn a_token_has_the_same_identity_whatever_its_place_in_the_list() {
        let key = IdentityKey::derive(b"a cluster secret of at least 32 bytes");
        let token = |t: &str, name: Option<&str>| StaticToken {
            token: t.into(),
            scopes: None,
            name: name.map(str::to_owned),
        };
        let replica = |tokens: Vec<StaticToken>| {
            Auth::new(AuthSettings {
                tokens,
                identity_key: Some(key.clone()),
                ..Default::default()
            })
            .unwrap()
        };
        let a = replica(vec![
            token("alice-token", None),
            token("bob-token", None),
            token("carol-token", Some("carol")),
        ]);
        // Another replica, its list in another order and mid-rotation (a new token first).
        let b = replica(vec![
            token("new-token", None),
            token("carol-token", Some("carol")),
            token("bob-token", None),
            token("alice-token", None),
        ]);
        let id = |auth: &Auth, t: &str| auth.check(t).unwrap().1;
        for t in ["alice-token", "bob-token", "carol-token"] {
            assert_eq!(id(&a, t), id(&b, t), "{t}");
        }
        assert_ne!(id(&a, "alice-token"), id(&a, "bob-token"));
        assert_eq!(id(&a, "carol-token").as_str(), "static token carol");
        // The identity names the token without containing it.
        assert!(!id(&a, "alice-token").as_str().contains("alice"));
        // Without the key (another cluster), the same token is someone else.
        let other = Auth::new(AuthSettings {
            tokens: vec![token("alice-token", None)],
            identity_key: Some(IdentityKey::derive(b"another secret, also 32 bytes long")),
            ..Default::default()
        })
        .unwrap();
        assert_ne!(id(&other, "alice-token"), id(&a, "alice-token"));
    }
}
