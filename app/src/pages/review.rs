//! The review parts of the post-mortem page: near the top, the [`ReviewPanel`] (status,
//! assignee, labels, and for members a plain form posting to `/snapshots/{id}/review`); below
//! the remedies, the [`ReviewComments`] (each comment's sanitised HTML, author, time and anchor,
//! a comment form with an optional anchor on the OOM event or a remedy, and the activity log
//! folded in `<details>`). Viewers see everything but the forms; the share page shows the
//! comments read-only. The data comes from the [`ReviewBackend`] the server provides.

use leptos::prelude::*;
use serde::{Deserialize, Serialize};

use crate::account::CsrfField;
use crate::api::PostMortem;
#[cfg(feature = "ssr")]
use crate::backend::BackendError;
use crate::backend::PostMortemRef;

/// The review statuses, in order.
pub const STATUSES: [&str; 4] = ["open", "investigating", "resolved", "wontfix"];

/// Where a comment points.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum AnchorItem {
    /// An event of the timeline.
    Timeline(u64),
    /// A remedy row, by spec.
    Remedy(String),
}

impl AnchorItem {
    /// In words: "on the timeline at event N", "on remedy SPEC".
    pub fn words(&self) -> String {
        match self {
            AnchorItem::Timeline(n) => format!("on the timeline at event {n}"),
            AnchorItem::Remedy(s) => format!("on remedy {s}"),
        }
    }

    /// A link to that place on the page (relative: it works on the share page too).
    pub fn href(&self) -> String {
        match self {
            AnchorItem::Timeline(n) => format!(
                "?from={}&to={}#timeline",
                n.saturating_sub(100),
                n.saturating_add(100)
            ),
            AnchorItem::Remedy(s) => format!("?remedy={}#timeline", crate::format::encode(s)),
        }
    }
}

/// A comment, as the page shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommentItem {
    /// The author's email or token name.
    pub author: String,
    /// The sanitised HTML (rendered by the server when it was stored).
    pub html: String,
    /// Written at, shown.
    pub created: String,
    /// Written at, RFC 3339.
    pub created_iso: String,
    /// Where it points.
    pub anchor: Option<AnchorItem>,
}

/// A line of the activity log, in words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActivityItem {
    /// Who.
    pub actor: String,
    /// What, in words.
    pub what: String,
    /// When, shown.
    pub created: String,
    /// When, RFC 3339.
    pub created_iso: String,
}

/// A post-mortem's review.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReviewData {
    /// The snapshot's id.
    pub id: String,
    /// The session may change it (a member or admin, not on the share page).
    pub can_edit: bool,
    /// The review status.
    pub status: String,
    /// The assignee's email.
    pub assignee: Option<String>,
    /// The labels.
    pub labels: Vec<String>,
    /// The team's users (the assignee choices; empty on the share page).
    pub users: Vec<String>,
    /// Oldest first.
    pub comments: Vec<CommentItem>,
    /// Newest first (empty on the share page).
    pub activity: Vec<ActivityItem>,
}

/// Where the review's data comes from (the server implements it).
#[cfg(feature = "ssr")]
#[async_trait::async_trait]
pub trait ReviewBackend: Send + Sync {
    /// The review of a post-mortem: the team's snapshot (needs the session) or a share link's;
    /// `None` when there is no such post-mortem.
    async fn review(&self, of: PostMortemRef) -> Result<Option<ReviewData>, BackendError>;
}

/// The review of a post-mortem.
#[server(prefix = "/ui/fn")]
pub async fn load_review(of: PostMortemRef) -> Result<Option<ReviewData>, ServerFnError> {
    use_context::<std::sync::Arc<dyn ReviewBackend>>()
        .ok_or_else(|| ServerFnError::new(crate::backend::SIGN_IN_FIRST))?
        .review(of)
        .await
        .map_err(ServerFnError::new)
}

/// What a comment may point at on this post-mortem: the OOM's event and the remedies listed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Targets {
    /// The OOM's event index.
    pub oom_event: Option<u64>,
    /// The remedies of the stored what-ifs, each once.
    pub remedies: Vec<String>,
}

impl Targets {
    /// The targets of `pm`.
    pub fn of(pm: &PostMortem) -> Targets {
        let mut remedies: Vec<String> = Vec::new();
        for r in pm.whatifs.iter().flat_map(|w| w.remedies.iter()) {
            if !r.remedy.is_empty() && !remedies.contains(&r.remedy) {
                remedies.push(r.remedy.clone());
            }
        }
        Targets {
            oom_event: pm
                .analysis
                .as_ref()
                .and_then(|a| a.oom.as_ref())
                .map(|o| o.event_index),
            remedies,
        }
    }
}

/// The page's review, loaded at the page's level (as the range tables are: a resource made
/// inside the post-mortem's own `Suspense` would not hydrate).
#[derive(Clone, Copy)]
pub struct ReviewResource(pub Resource<Result<Option<ReviewData>, ServerFnError>>);

/// Makes the page's review resource for `of` and provides it to the panel and the comments.
pub fn provide_review(of: impl Fn() -> PostMortemRef + Send + Sync + 'static) {
    let data = Resource::new(of, load_review);
    provide_context(ReviewResource(data));
}

/// Shows `f` of the page's review (nothing while loading, when there is none, or when the page
/// provided no review).
fn with_review<V: IntoView + 'static>(
    f: impl Fn(ReviewData) -> V + Send + Sync + Clone + 'static,
) -> impl IntoView {
    let data = use_context::<ReviewResource>();
    view! {
        <Suspense fallback=|| ()>
            {move || {
                let f = f.clone();
                Suspend::new(async move {
                    let ReviewResource(data) = data?;
                    match data.await {
                        Ok(Some(d)) => Some(f(d).into_any()),
                        Ok(None) => None,
                        Err(e) => Some(view! { <p class="error" role="alert">{e.to_string()}</p> }.into_any()),
                    }
                })
            }}
        </Suspense>
    }
}

/// The review panel, near the top of the page.
#[component]
pub fn ReviewPanel() -> impl IntoView {
    with_review(|d| view! { <ReviewPanelView d=d/> })
}

/// The review panel from its data.
#[component]
pub fn ReviewPanelView(d: ReviewData) -> impl IntoView {
    let assignee = d.assignee.clone().unwrap_or_else(|| "nobody".into());
    let form = d.can_edit.then(|| {
        let action = format!("/snapshots/{}/review", d.id);
        let status = d.status.clone();
        let current = d.assignee.clone().unwrap_or_default();
        let labels = d.labels.join(", ");
        view! {
            <form method="post" action=action class="review-form">
                <CsrfField/>
                <label>"Status "
                    <select name="status">
                        {STATUSES.iter().map(|s| view! {
                            <option value=*s selected=*s == status>{*s}</option>
                        }).collect_view()}
                    </select>
                </label>
                <label>"Assignee "
                    <select name="assignee">
                        <option value="" selected=current.is_empty()>"nobody"</option>
                        {d.users.iter().map(|u| view! {
                            <option value=u.clone() selected=*u == current>{u.clone()}</option>
                        }).collect_view()}
                    </select>
                </label>
                <label>"Labels " <input type="text" name="labels" value=labels
                    placeholder="comma, separated"/></label>
                <button type="submit">"Save"</button>
            </form>
        }
    });
    view! {
        <section class="review" id="review" data-testid="review">
            <h2>"Review"</h2>
            <p class="review-state">
                <span class=format!("badge review-{}", d.status)>{d.status.clone()}</span>
                " · assigned to " <span data-testid="assignee">{assignee}</span>
            </p>
            {form}
        </section>
    }
}

/// The comments and the activity log, below the remedies.
#[component]
pub fn ReviewComments(targets: Targets) -> impl IntoView {
    with_review(move |d| view! { <ReviewCommentsView d=d targets=targets.clone()/> })
}

/// The comments and the activity log from their data.
#[component]
pub fn ReviewCommentsView(d: ReviewData, targets: Targets) -> impl IntoView {
    let n = d.comments.len();
    let list = if d.comments.is_empty() {
        view! { <p class="hint">"No comments yet."</p> }.into_any()
    } else {
        view! {
            <ol class="comments-list">
                {d.comments.into_iter().map(|c| {
                    let anchor = c.anchor.map(|a| view! {
                        " " <a class="anchor" href=a.href()>{a.words()}</a>
                    });
                    view! {
                        <li class="comment">
                            <p class="comment-meta">
                                <strong>{c.author}</strong> " · "
                                <time datetime=c.created_iso>{c.created}</time>
                                {anchor}
                            </p>
                            <div class="comment-body" inner_html=c.html></div>
                        </li>
                    }
                }).collect_view()}
            </ol>
        }
        .into_any()
    };
    let form = d.can_edit.then(|| {
        let action = format!("/snapshots/{}/comments", d.id);
        view! {
            <form method="post" action=action class="comment-form">
                <CsrfField/>
                <label>"Comment (markdown)"
                    <textarea name="body" rows="4" required maxlength="20000"></textarea>
                </label>
                <label>"On "
                    <select name="anchor">
                        <option value="">"the whole post-mortem"</option>
                        {targets.oom_event.map(|e| view! {
                            <option value=format!("timeline:{e}")>{format!("the OOM (event {e})")}</option>
                        })}
                        {targets.remedies.iter().map(|r| view! {
                            <option value=format!("remedy:{r}")>{format!("remedy {r}")}</option>
                        }).collect_view()}
                    </select>
                </label>
                <button type="submit">"Comment"</button>
            </form>
        }
    });
    let activity = (!d.activity.is_empty()).then(|| {
        let count = d.activity.len();
        view! {
            <details class="activity" data-testid="activity">
                <summary>{format!("Activity ({count})")}</summary>
                <ol>
                    {d.activity.into_iter().map(|a| view! {
                        <li>
                            <time datetime=a.created_iso>{a.created}</time> " "
                            <strong>{a.actor}</strong> " " {a.what}
                        </li>
                    }).collect_view()}
                </ol>
            </details>
        }
    });
    view! {
        <section class="comments" id="comments" data-testid="comments">
            <h2>{format!("Comments ({n})")}</h2>
            {list}
            {form}
            {activity}
        </section>
    }
}

#[cfg(all(test, feature = "ssr"))]
mod tests {
    use super::*;

    fn data(can_edit: bool) -> ReviewData {
        ReviewData {
            id: "abc".into(),
            can_edit,
            status: "investigating".into(),
            assignee: Some("ann@example.com".into()),
            labels: vec!["oom".into(), "llm".into()],
            users: vec!["ann@example.com".into(), "bob@example.com".into()],
            comments: vec![CommentItem {
                author: "ann@example.com".into(),
                html: "<p><strong>hi</strong></p>".into(),
                created: "2026-12-05 10:00 UTC".into(),
                created_iso: "2026-12-05T10:00:00Z".into(),
                anchor: Some(AnchorItem::Remedy("batch=0.5".into())),
            }],
            activity: vec![ActivityItem {
                actor: "ann@example.com".into(),
                what: "set the status from open to investigating".into(),
                created: "2026-12-05 10:00 UTC".into(),
                created_iso: "2026-12-05T10:00:00Z".into(),
            }],
        }
    }

    #[test]
    fn the_panel_shows_the_state_and_a_form_for_members() {
        let html = crate::render(|| view! { <ReviewPanelView d=data(true)/> });
        assert!(html.contains("investigating"), "{html}");
        assert!(html.contains("assigned to"), "{html}");
        assert!(html.contains("action=\"/snapshots/abc/review\""), "{html}");
        assert!(html.contains("value=\"oom, llm\""), "{html}");
        let html = crate::render(|| view! { <ReviewPanelView d=data(false)/> });
        assert!(!html.contains("<form"), "{html}");
    }

    #[test]
    fn comments_show_their_anchor_and_the_activity_folds() {
        let targets = Targets {
            oom_event: Some(42),
            remedies: vec!["batch=0.5".into()],
        };
        let t = targets.clone();
        let html = crate::render(move || view! { <ReviewCommentsView d=data(true) targets=t/> });
        assert!(html.contains("<strong>hi</strong>"), "{html}");
        assert!(html.contains("on remedy batch=0.5"), "{html}");
        assert!(html.contains("value=\"timeline:42\""), "{html}");
        assert!(html.contains("value=\"remedy:batch=0.5\""), "{html}");
        assert!(html.contains("<details"), "{html}");
        let html =
            crate::render(move || view! { <ReviewCommentsView d=data(false) targets=targets/> });
        assert!(!html.contains("<form"), "{html}");
        assert!(html.contains("on remedy batch=0.5"), "{html}");
        assert_eq!(
            AnchorItem::Timeline(42).words(),
            "on the timeline at event 42"
        );
    }
}
