//! Bearer-token authentication at the HTTP edge.
//!
//! Static tokens are compared in constant time. A request that authenticates gets a
//! [`Grant`] in its extensions, which the MCP handler reads (through the HTTP parts rmcp
//! passes along) to decide which mounts the caller may see.

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::{HeaderValue, StatusCode, header};
use subtle::ConstantTimeEq as _;

/// What an authenticated caller may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// Scopes the token carries; `None` means unrestricted (a static token without scopes).
    pub scopes: Option<BTreeSet<String>>,
    /// Whether the answer depends on who asks (cache hints become `private`).
    pub personal: bool,
}

impl Grant {
    /// Whether a mount that requires `scope` is visible to this caller.
    pub fn allows(&self, scope: Option<&str>) -> bool {
        match (scope, &self.scopes) {
            (None, _) | (_, None) => true,
            (Some(s), Some(have)) => have.contains(s),
        }
    }
}

/// One accepted static token and the scopes it grants.
#[derive(Clone)]
pub struct StaticToken {
    /// The secret.
    pub token: String,
    /// Scopes; `None` grants every mount.
    pub scopes: Option<BTreeSet<String>>,
}

impl std::fmt::Debug for StaticToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secret, not even in debug logs.
        f.debug_struct("StaticToken")
            .field("scopes", &self.scopes)
            .finish_non_exhaustive()
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
}

impl AuthSettings {
    /// Whether any way to authenticate is configured.
    pub fn is_enabled(&self) -> bool {
        !self.tokens.is_empty() || self.jwt.is_some()
    }
}

/// State of the auth middleware.
pub struct Auth {
    pub(crate) settings: AuthSettings,
    jwt: Option<super::jwt::JwtValidator>,
    /// The mounts, to keep a scoped caller's listen filter to what it may see.
    router: Option<crate::Router>,
}

impl Auth {
    /// The middleware state for `settings`; `router` lets it hide mounts a scoped caller may
    /// not see from its listen filter.
    pub(crate) fn with_router(
        settings: AuthSettings,
        router: Option<crate::Router>,
    ) -> Result<Arc<Self>, String> {
        let jwt = settings
            .jwt
            .clone()
            .map(super::jwt::JwtValidator::new)
            .transpose()?;
        Ok(Arc::new(Self {
            settings,
            jwt,
            router,
        }))
    }

    fn check(&self, presented: &str) -> Option<Grant> {
        let mut found = None;
        // Compare against every token, so the time taken says nothing about which matched.
        for t in &self.settings.tokens {
            if bool::from(t.token.as_bytes().ct_eq(presented.as_bytes())) && found.is_none() {
                found = Some(Grant {
                    scopes: t.scopes.clone(),
                    personal: t.scopes.is_some(),
                });
            }
        }
        found
    }

    fn challenge(&self, error: Option<&str>, description: &str) -> Response {
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
        let body = serde_json::json!({
            "jsonrpc": "2.0",
            "id": null,
            "error": {"code": -32001, "message": format!("unauthorized: {description}")}
        });
        let mut resp = (status, axum::Json(body)).into_response();
        if let Ok(v) = HeaderValue::from_str(&value) {
            resp.headers_mut().insert(header::WWW_AUTHENTICATE, v);
        }
        resp
    }
}

/// Require a valid bearer token on every request it wraps.
pub async fn require_bearer(State(auth): State<Arc<Auth>>, req: Request, next: Next) -> Response {
    let Some(value) = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
    else {
        return auth.challenge(None, "a bearer token is required (Authorization: Bearer …)");
    };
    let Some(token) = value
        .strip_prefix("Bearer ")
        .or_else(|| value.strip_prefix("bearer "))
    else {
        return auth.challenge(
            Some("invalid_request"),
            "the Authorization header must use the Bearer scheme",
        );
    };
    let token = token.trim();
    let grant = match (auth.check(token), &auth.jwt) {
        (Some(grant), _) => grant,
        (None, Some(jwt)) => match jwt.validate(token).await {
            Ok(grant) => grant,
            Err(super::jwt::JwtError::Invalid(why)) => {
                return auth.challenge(Some("invalid_token"), &why);
            }
            Err(super::jwt::JwtError::InsufficientScope(scopes)) => {
                return auth.challenge_with(
                    StatusCode::FORBIDDEN,
                    Some("insufficient_scope"),
                    &format!("the token lacks the scope(s) {scopes}"),
                    Some(&scopes),
                );
            }
            Err(super::jwt::JwtError::KeysUnavailable(why)) => {
                tracing::warn!(%why, "cannot validate tokens: the authorization server's keys are unavailable");
                return super::edge::refuse(
                    StatusCode::SERVICE_UNAVAILABLE,
                    -32603,
                    "cannot validate the token right now: the authorization server's keys are unavailable".into(),
                );
            }
        },
        (None, None) => return auth.challenge(Some("invalid_token"), "the token is not valid"),
    };
    let req = match (&auth.router, grant.scopes.is_some()) {
        (Some(router), true) => drop_hidden_subscriptions(req, router, &grant).await,
        _ => req,
    };
    let mut req = req;
    req.extensions_mut().insert(grant);
    next.run(req).await
}

/// rmcp acknowledges a `subscriptions/listen` filter before the handler can see who asks,
/// so for a caller with scopes the URIs of mounts it may not see are taken out of the
/// request here. They then look exactly like URIs outside every mount: left out of the
/// acknowledgment, never watched.
async fn drop_hidden_subscriptions(req: Request, router: &crate::Router, grant: &Grant) -> Request {
    use http_body_util::BodyExt as _;
    if req.method() != http::Method::POST {
        return req;
    }
    let (parts, body) = req.into_parts();
    // The edge middleware has already bounded the body size.
    let bytes = match body.collect().await {
        Ok(c) => c.to_bytes(),
        Err(_) => return Request::from_parts(parts, axum::body::Body::empty()),
    };
    let rewritten = serde_json::from_slice::<serde_json::Value>(&bytes)
        .ok()
        .and_then(|mut v| {
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
        });
    let body = rewritten.map(bytes::Bytes::from).unwrap_or(bytes);
    Request::from_parts(parts, axum::body::Body::from(body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_gate_mounts() {
        let all = Grant {
            scopes: None,
            personal: false,
        };
        assert!(all.allows(Some("docs")) && all.allows(None));
        let docs = Grant {
            scopes: Some(["docs".to_owned()].into()),
            personal: true,
        };
        assert!(docs.allows(Some("docs")) && docs.allows(None) && !docs.allows(Some("finance")));
    }

    #[test]
    fn tokens_compare_whole() {
        let auth = Auth::with_router(
            AuthSettings {
                tokens: vec![StaticToken {
                    token: "s3cret".into(),
                    scopes: None,
                }],
                ..Default::default()
            },
            None,
        )
        .unwrap();
        assert!(auth.check("s3cret").is_some());
        assert!(auth.check("s3cre").is_none());
        assert!(auth.check("s3cret!").is_none());
        assert!(auth.check("").is_none());
    }
}
