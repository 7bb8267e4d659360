//! Accounts in the UI: who is signed in (and the session's CSRF token, which every form that
//! changes something carries), the team page's data and an invitation link's offer, with the
//! server functions the pages load them through.
//!
//! The server puts a [`SessionInfo`] in the leptos context of each request that has a session,
//! and an `Arc<dyn AccountBackend>` in every request's context (the team page needs a session;
//! an invitation link does not). Like [`crate::backend`], no SQL here.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

#[cfg(feature = "ssr")]
use crate::backend::BackendError;

/// The signed-in user, as the pages show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionInfo {
    /// The team's name.
    pub team: String,
    /// The user's email.
    pub email: String,
    /// `admin`, `member` or `viewer`.
    pub role: String,
    /// The session's CSRF token: the hidden field `csrf` of every form that changes something.
    pub csrf: String,
}

impl SessionInfo {
    /// Whether the user may change the team's objects (not a viewer).
    pub fn can_write(&self) -> bool {
        self.role != "viewer"
    }

    /// Whether the user may invite people (an admin).
    pub fn can_invite(&self) -> bool {
        self.role == "admin"
    }
}

/// A member of the team, on the team page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberItem {
    /// Email.
    pub email: String,
    /// Role.
    pub role: String,
    /// Since when, shown.
    pub created: String,
    /// The account is disabled.
    pub disabled: bool,
}

/// An invitation that can still be used, on the team page (never its link).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InvitationItem {
    /// The role it gives.
    pub role: String,
    /// Who made it.
    pub created_by: Option<String>,
    /// Made at, shown.
    pub created: String,
    /// Expires at, shown.
    pub expires: String,
}

/// The team page: members and open invitations.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TeamView {
    /// The team's name.
    pub team: String,
    /// The members, oldest first.
    pub members: Vec<MemberItem>,
    /// Open invitations, newest first.
    pub invitations: Vec<InvitationItem>,
}

/// What an invitation link offers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InvitationOffer {
    /// The team's name.
    pub team: String,
    /// The role.
    pub role: String,
    /// Expires at, shown.
    pub expires: String,
}

/// What the account pages may ask the server.
#[cfg(feature = "ssr")]
#[async_trait::async_trait]
pub trait AccountBackend: Send + Sync {
    /// The session's team page; `None` without a session.
    async fn team(&self) -> Result<Option<TeamView>, BackendError>;
    /// What invitation `token` offers; `None` when it is unknown, used or expired.
    async fn invitation(&self, token: String) -> Result<Option<InvitationOffer>, BackendError>;
}

#[cfg(feature = "ssr")]
fn accounts() -> Result<std::sync::Arc<dyn AccountBackend>, ServerFnError> {
    use_context::<std::sync::Arc<dyn AccountBackend>>()
        .ok_or_else(|| ServerFnError::new("accounts are not served here"))
}

/// The signed-in user; `None` without a session.
#[server(prefix = "/ui/fn")]
pub async fn current_session() -> Result<Option<SessionInfo>, ServerFnError> {
    Ok(use_context::<SessionInfo>())
}

/// The session's team page.
#[server(prefix = "/ui/fn")]
pub async fn load_team() -> Result<Option<TeamView>, ServerFnError> {
    accounts()?.team().await.map_err(ServerFnError::new)
}

/// What an invitation link offers; `None` when it cannot be used.
#[server(prefix = "/ui/fn")]
pub async fn load_invitation(token: String) -> Result<Option<InvitationOffer>, ServerFnError> {
    accounts()?
        .invitation(token)
        .await
        .map_err(ServerFnError::new)
}

/// The session, as the page frame loaded it (see [`crate::components::Layout`]).
#[derive(Clone, Copy)]
pub struct SessionResource(pub Resource<Result<Option<SessionInfo>, ServerFnError>>);

/// The hidden `csrf` field of a form that changes something: the session's token. Put it first
/// in the form (the server reads a multipart form's token from its first part).
#[component]
pub fn CsrfField() -> impl IntoView {
    let session = use_context::<SessionResource>();
    view! {
        <Suspense fallback=|| ()>
            {move || Suspend::new(async move {
                let token = match session {
                    Some(s) => s.0.await.ok().flatten().map(|s| s.csrf).unwrap_or_default(),
                    None => String::new(),
                };
                view! { <input type="hidden" name="csrf" value=token/> }
            })}
        </Suspense>
    }
}

/// For a viewer, a line that says they cannot change anything here (the forms below would be
/// refused); nothing for others.
#[component]
pub fn ReadOnlyNotice() -> impl IntoView {
    let session = use_context::<SessionResource>();
    view! {
        <Suspense fallback=|| ()>
            {move || Suspend::new(async move {
                let me = match session {
                    Some(s) => s.0.await.ok().flatten(),
                    None => None,
                };
                me.filter(|m| !m.can_write()).map(|_| view! {
                    <p class="hint" role="note" data-testid="read-only">
                        "You are a viewer of this team: you can read its post-mortems but not upload or change anything."
                    </p>
                })
            })}
        </Suspense>
    }
}
