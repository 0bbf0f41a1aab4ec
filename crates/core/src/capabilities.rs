//! What a provider declares it can do. The server consults this before calling a provider,
//! so an undeclared operation answers "unsupported" instead of an empty result that looks real.

/// The operations a provider supports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Capabilities {
    /// `resources/list` yields entries.
    pub list: bool,
    /// `resources/read`.
    pub read: bool,
    /// The provider advertises URI templates.
    pub templates: bool,
    /// `completion/complete` on the provider's templates.
    pub complete: bool,
    /// Per-resource change notifications (`resources/updated`).
    pub watch: bool,
    /// Notifications when the set of resources changes (`list_changed`).
    pub list_changed: bool,
}

impl Capabilities {
    /// Every operation.
    pub const ALL: Capabilities = Capabilities {
        list: true,
        read: true,
        templates: true,
        complete: true,
        watch: true,
        list_changed: true,
    };
}
