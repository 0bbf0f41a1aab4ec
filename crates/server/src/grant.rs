//! Who is calling and what they may see: the [`Grant`] and [`Identity`] an authenticating
//! transport (the HTTP edge) puts on a request, which the service reads to decide which
//! mounts the caller may see and to whom sessions and listen streams belong. Neither names
//! a transport: a request without them (stdio, HTTP without authentication) sees every
//! mount.

use std::collections::BTreeSet;

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

/// Who is calling, as far as the edge can tell: the subject of a JWT, which static token,
/// or (without authentication) the client's address. It never holds a secret. A legacy
/// session is bound to the identity that created it, and listen streams are counted per
/// identity. The edge puts it in every MCP request's extensions; the handler reads it there.
///
/// Shared text, so the copy each request's extensions take is a count, not an allocation.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Identity(pub(crate) std::sync::Arc<str>);

impl Identity {
    /// An identity from its text (tests and other transports).
    pub fn new(id: impl Into<String>) -> Self {
        Self(id.into().into())
    }

    /// The client's address, for requests without authentication. The last address each
    /// thread saw is kept with its text: a client's requests then share one, instead of
    /// formatting the address on every request.
    pub(crate) fn address(ip: std::net::IpAddr) -> Self {
        thread_local! {
            static LAST: std::cell::RefCell<Option<(std::net::IpAddr, Identity)>> =
                const { std::cell::RefCell::new(None) };
        }
        LAST.with_borrow_mut(|last| match last {
            Some((seen, id)) if *seen == ip => id.clone(),
            _ => {
                let id = Self::new(format!("address {ip}"));
                *last = Some((ip, id.clone()));
                id
            }
        })
    }

    /// The identity as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
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
}
