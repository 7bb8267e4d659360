//! `/team`: the signed-in user's team — its members with their roles, and the invitations that
//! can still be used. An admin also gets the form that makes an invitation link
//! (`POST /team/invitations`, server/src/web/accounts.rs), which answers with the link, shown
//! once.

use leptos::prelude::*;

use crate::account::{CsrfField, SessionResource, TeamView, load_team};
use crate::components::Layout;

/// The team page.
#[component]
pub fn TeamPage() -> impl IntoView {
    view! {
        <Layout>
            <TeamSection/>
        </Layout>
    }
}

/// The page's content, inside the frame (which provides the session).
#[component]
fn TeamSection() -> impl IntoView {
    let team = Resource::new(|| (), |()| load_team());
    let session = use_context::<SessionResource>();
    view! {
        <Suspense fallback=|| view! { <p>"Loading…"</p> }>
            {move || Suspend::new(async move {
                let me = match session {
                    Some(s) => s.0.await.ok().flatten(),
                    None => None,
                };
                let can_invite = me.as_ref().is_some_and(|m| m.can_invite());
                match team.await {
                    Ok(Some(t)) => view! { <TeamMembersView team=t can_invite=can_invite/> }.into_any(),
                    Ok(None) => view! { <p class="error" role="alert">"Sign in first."</p> }.into_any(),
                    Err(e) => view! { <p class="error" role="alert">{e.to_string()}</p> }.into_any(),
                }
            })}
        </Suspense>
    }
}

/// Members, open invitations and, for an admin, the invitation form.
#[component]
pub fn TeamMembersView(team: TeamView, can_invite: bool) -> impl IntoView {
    let invitations = team.invitations;
    view! {
        <h1>"Team " <span data-testid="team-name">{team.team}</span></h1>
        <h2>"Members"</h2>
        <table data-testid="members">
            <thead><tr><th>"Email"</th><th>"Role"</th><th>"Since"</th></tr></thead>
            <tbody>
                {team.members.into_iter().map(|m| view! {
                    <tr class:disabled=m.disabled>
                        <td>{m.email}</td>
                        <td>{m.role}{m.disabled.then_some(" (disabled)")}</td>
                        <td>{m.created}</td>
                    </tr>
                }).collect_view()}
            </tbody>
        </table>
        <h2>"Open invitations"</h2>
        {if invitations.is_empty() {
            view! { <p class="hint" data-testid="no-invitations">"None."</p> }.into_any()
        } else {
            view! {
                <table data-testid="invitations">
                    <thead><tr><th>"Role"</th><th>"Made by"</th><th>"Made"</th><th>"Expires"</th></tr></thead>
                    <tbody>
                        {invitations.into_iter().map(|i| view! {
                            <tr>
                                <td>{i.role}</td>
                                <td>{i.created_by.unwrap_or_else(|| "-".to_string())}</td>
                                <td>{i.created}</td>
                                <td>{i.expires}</td>
                            </tr>
                        }).collect_view()}
                    </tbody>
                </table>
            }.into_any()
        }}
        {can_invite.then(|| view! {
            <h2>"Invite someone"</h2>
            <form method="post" action="/team/invitations" class="stack" data-testid="invite-form">
                <CsrfField/>
                <label for="role">"Role"</label>
                <select id="role" name="role">
                    <option value="member" selected>"member: reads and changes the team's post-mortems"</option>
                    <option value="viewer">"viewer: reads only"</option>
                    <option value="admin">"admin: a member who can also invite"</option>
                </select>
                <button type="submit">"Make an invitation link"</button>
            </form>
            <p class="hint">"The link is shown once, works once, and expires in 7 days."</p>
        })}
    }
}

#[cfg(all(test, feature = "ssr"))]
mod tests {
    use super::*;
    use crate::account::{InvitationItem, MemberItem};

    fn team() -> TeamView {
        TeamView {
            team: "research".into(),
            members: vec![MemberItem {
                email: "ada@example.com".into(),
                role: "admin".into(),
                created: "2026-12-04 10:00 UTC".into(),
                disabled: false,
            }],
            invitations: vec![InvitationItem {
                role: "viewer".into(),
                created_by: Some("ada@example.com".into()),
                created: "2026-12-04 10:00 UTC".into(),
                expires: "2026-12-11 10:00 UTC".into(),
            }],
        }
    }

    #[test]
    fn admins_get_the_invitation_form_and_others_do_not() {
        let html = crate::render(|| view! { <TeamMembersView team=team() can_invite=true/> });
        assert!(html.contains("ada@example.com"), "{html}");
        assert!(html.contains("action=\"/team/invitations\""), "{html}");
        let html = crate::render(|| view! { <TeamMembersView team=team() can_invite=false/> });
        assert!(html.contains("viewer"), "{html}");
        assert!(!html.contains("/team/invitations"), "{html}");
    }
}
