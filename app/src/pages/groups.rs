//! `/groups` and `/groups/{id}`: the team's OOM groups. Uploads whose OOM has the same
//! fingerprint (the first frame of the user's code on the failing allocation's stack, the phase,
//! the request's size bucket, the allocator settings) join one group. The list shows each group's
//! fingerprint, count, first and last seen and status, most recently seen first; a group's page
//! says in words which rule grouped its uploads, shows the fingerprint's parts, the status with a
//! form that marks it resolved or open again (`POST /groups/{id}/status`), and the uploads, each
//! linked to its page. Another team's group is the 404 view. [`GroupLine`] is the line that the
//! post-mortem and OOM log pages show when their upload is in a group.

use leptos::prelude::*;
use leptos_router::hooks::{use_params_map, use_query_map};

use crate::account::CsrfField;
use crate::api::{GroupDetail, GroupItem, GroupMember, GroupParts, GroupRef};
use crate::backend::{list_groups, load_group};
use crate::components::{Layout, found_or_missing};
use crate::format::bytes;

/// The list page.
#[component]
pub fn GroupsPage() -> impl IntoView {
    let groups = Resource::new(|| (), |()| list_groups());
    view! {
        <Layout>
            <Suspense fallback=|| view! { <p>"Loading…"</p> }>
                {move || Suspend::new(async move {
                    match groups.await {
                        Ok(g) => view! { <GroupsView groups=g/> }.into_any(),
                        Err(e) => view! {
                            <h1>"OOM groups"</h1>
                            <p class="error" role="alert">{e.to_string()}</p>
                        }.into_any(),
                    }
                })}
            </Suspense>
        </Layout>
    }
}

/// What a group is, for the empty list.
pub const WHAT_A_GROUP_IS: &str = "A group collects the uploads that ran out of memory the same \
    way: the same first frame of your code on the failing allocation's stack, the same phase \
    (forward, backward, optimizer), a request of the same power-of-two size, and the same \
    allocator settings. The same job failing every night lands in one group, with a count.";

/// The team's groups, from their DTOs.
#[component]
pub fn GroupsView(groups: Vec<GroupItem>) -> impl IntoView {
    let body = if groups.is_empty() {
        view! {
            <div class="empty" data-testid="no-groups">
                <p>"No OOM groups yet."</p>
                <p class="hint">{WHAT_A_GROUP_IS}</p>
                <p>
                    <a href="/upload">"Upload"</a>
                    " a snapshot that ends in an out-of-memory error, or an OOM log, and it joins its group."
                </p>
            </div>
        }
        .into_any()
    } else {
        view! {
            <table class="data" data-testid="groups">
                <thead>
                    <tr>
                        <th scope="col">"Where"</th>
                        <th scope="col">"Phase"</th>
                        <th scope="col">"Request"</th>
                        <th scope="col">"Settings"</th>
                        <th scope="col" class="num">"Count"</th>
                        <th scope="col">"First seen"</th>
                        <th scope="col">"Last seen"</th>
                        <th scope="col">"Status"</th>
                    </tr>
                </thead>
                <tbody>
                    {groups.into_iter().map(|g| view! { <GroupRow g=g/> }).collect_view()}
                </tbody>
            </table>
        }
        .into_any()
    };
    view! {
        <h1>"OOM groups"</h1>
        {body}
    }
}

/// The settings part as it reads: the normalised `PYTORCH_CUDA_ALLOC_CONF`, or the defaults.
fn settings(p: &GroupParts) -> String {
    if p.alloc_conf.is_empty() {
        "defaults".to_string()
    } else {
        p.alloc_conf.clone()
    }
}

/// The status badge: `resolved`, `open`, or `regression` (reopened by an upload after it was
/// resolved), which stands out.
pub fn status_badge(status: &str, regression: bool) -> impl IntoView + use<> {
    let (class, text) = match (status, regression) {
        ("resolved", _) => ("badge good", "resolved"),
        (_, true) => ("badge bad", "regression"),
        _ => ("badge warn", "open"),
    };
    view! { <span class=class data-testid="group-status">{text}</span> }
}

/// One row of the list.
#[component]
pub fn GroupRow(g: GroupItem) -> impl IntoView {
    let href = format!("/groups/{}", g.id);
    let line = g.parts.line.map(|l| format!("line {l}"));
    let settings = settings(&g.parts);
    view! {
        <tr data-id=g.id.clone() data-count=g.count.to_string()>
            <td>
                <a href=href><code>{g.parts.frame_name()}</code></a>
                {line.map(|l| view! { <span class="muted">" " {l}</span> })}
            </td>
            <td>{g.parts.phase.clone()}</td>
            <td title=bytes(g.parts.request_bytes)>{g.parts.size_bucket.clone()}</td>
            <td><code>{settings}</code></td>
            <td class="num">{g.count}</td>
            <td><time datetime=g.first_seen_iso>{g.first_seen}</time></td>
            <td><time datetime=g.last_seen_iso>{g.last_seen}</time></td>
            <td>{status_badge(&g.status, g.regression)}</td>
        </tr>
    }
}

/// The group page.
#[component]
pub fn GroupPage() -> impl IntoView {
    let params = use_params_map();
    let query = use_query_map();
    let id = move || params.read().get("id").unwrap_or_default();
    let group = Resource::new(id, load_group);
    view! {
        <Layout>
            {found_or_missing(
                group,
                "OOM group",
                move |g| {
                    // The form's refusal comes back in the query (post/redirect/get).
                    let error = query
                        .read_untracked()
                        .get("error")
                        .filter(|e| !e.trim().is_empty());
                    view! { <GroupView g=g error=error/> }.into_any()
                },
                || view! { <MissingGroupView/> }.into_any(),
            )}
        </Layout>
    }
}

/// No such group in the team (another team's is the same: nothing of it is shown).
#[component]
pub fn MissingGroupView() -> impl IntoView {
    view! {
        <h1 data-testid="not-found">"No such OOM group"</h1>
        <p>"Your team has no OOM group with this id. " <a href="/groups">"Back to the groups"</a></p>
    }
}

/// How many times, in words: `once`, `2 times`.
pub fn times(n: u64) -> String {
    match n {
        1 => "once".to_string(),
        n => format!("{n} times"),
    }
}

/// The status in one sentence.
pub fn status_sentence(d: &GroupDetail) -> String {
    let g = &d.group;
    let seen = format!(
        "seen {}, first on {}, last on {}",
        times(g.count),
        g.first_seen,
        g.last_seen
    );
    match (g.status.as_str(), g.regression) {
        ("resolved", _) => format!(
            "Marked resolved{}; {seen}. Another upload that fails this way opens it again, as a regression.",
            d.resolved_at
                .as_deref()
                .map(|t| format!(" on {t}"))
                .unwrap_or_default()
        ),
        (_, true) => format!(
            "A regression: it was marked resolved, then an upload failed this way again{}; {seen}.",
            d.reopened_at
                .as_deref()
                .map(|t| format!(" on {t}"))
                .unwrap_or_default()
        ),
        _ => format!(
            "Not resolved yet: {seen}. Mark it resolved when a fix lands; another upload that fails this way then opens it again, as a regression."
        ),
    }
}

/// One group, from its DTO; `error` is why the last status change was refused.
#[component]
pub fn GroupView(g: GroupDetail, #[prop(default = None)] error: Option<String>) -> impl IntoView {
    let sentence = status_sentence(&g);
    let GroupDetail { group, members, .. } = g;
    let rule = group.parts.rule();
    let resolved = group.status == "resolved";
    let (box_class, title) = match (resolved, group.regression) {
        (true, _) => ("verdict ok", "Resolved"),
        (false, true) => ("verdict oom", "Regression"),
        (false, false) => ("verdict pending", "Open"),
    };
    let (next, button) = if resolved {
        ("open", "Reopen")
    } else {
        ("resolved", "Mark resolved")
    };
    let action = format!("/groups/{}/status", group.id);
    let p = group.parts;
    let frame = match p.line {
        Some(l) => format!("{} (line {l})", p.frame_name()),
        None => p.frame_name(),
    };
    let source = match p.source.as_str() {
        "log" => "an OOM log's traceback",
        "snapshot" => "a snapshot's trace",
        _ => "an upload",
    };
    let settings = if p.alloc_conf.is_empty() {
        "PyTorch's defaults".to_string()
    } else {
        format!("PYTORCH_CUDA_ALLOC_CONF={}", p.alloc_conf)
    };
    view! {
        <p class="crumbs"><a href="/groups">"OOM groups"</a></p>
        <h1><code>{p.frame_name()}</code></h1>
        <p class="meta">
            {status_badge(&group.status, group.regression)}
            <span data-testid="count">{format!("seen {}", times(group.count))}</span>
            <span>"first " <time datetime=group.first_seen_iso>{group.first_seen}</time></span>
            <span>"last " <time datetime=group.last_seen_iso>{group.last_seen}</time></span>
        </p>
        <section class=box_class data-testid="status">
            <h2>{title}</h2>
            <p class="sentence">{sentence}</p>
            <form method="post" action=action class="filters" data-testid="status-form">
                <CsrfField/>
                <input type="hidden" name="status" value=next/>
                <button type="submit">{button}</button>
            </form>
        </section>
        {error.map(|e| view! { <p class="error" role="alert">{e}</p> })}
        <h2>"Why these uploads are one group"</h2>
        <p class="range" data-testid="rule">{rule}</p>
        <dl class="stats" data-testid="parts">
            <div><dt>"Where"</dt><dd><code>{frame}</code></dd></div>
            <div><dt>"Phase"</dt><dd>{p.phase}</dd></div>
            <div>
                <dt>"Request"</dt>
                <dd>{p.size_bucket}</dd>
                <dd class="sub">{format!("the first asked for {}", bytes(p.request_bytes))}</dd>
            </div>
            <div><dt>"Allocator settings"</dt><dd><code>{settings}</code></dd></div>
        </dl>
        <p class="hint">
            "Fingerprint " <code>{group.fingerprint}</code> {format!(", first taken from {source}.")}
        </p>
        <h2>"Uploads"</h2>
        <MembersView members=members/>
    }
}

/// The group's uploads, oldest first.
#[component]
pub fn MembersView(members: Vec<GroupMember>) -> impl IntoView {
    if members.is_empty() {
        return view! { <p class="empty">"None of its uploads is left."</p> }.into_any();
    }
    view! {
        <table class="data" data-testid="members">
            <thead>
                <tr>
                    <th scope="col">"Kind"</th>
                    <th scope="col">"Name"</th>
                    <th scope="col">"Uploaded"</th>
                    <th scope="col">"Commit"</th>
                    <th scope="col">"CI job"</th>
                    <th scope="col">"GPU"</th>
                </tr>
            </thead>
            <tbody>
                {members.into_iter().map(|m| {
                    let (kind, href) = if m.kind == "oom_log" {
                        ("OOM log", format!("/logs/{}", m.id))
                    } else {
                        ("snapshot", format!("/snapshots/{}", m.id))
                    };
                    let dash = || view! { <span class="muted">"–"</span> }.into_any();
                    view! {
                        <tr data-id=m.id.clone()>
                            <td>{kind}</td>
                            <td><a href=href>{m.name}</a></td>
                            <td><time datetime=m.created_iso>{m.created}</time></td>
                            <td>{m.commit.map_or_else(dash, |c| view! { <code>{c}</code> }.into_any())}</td>
                            <td>{m.job_url.map_or_else(dash, |u| view! {
                                <a href=u rel="external nofollow noreferrer">"CI job"</a>
                            }.into_any())}</td>
                            <td>{m.gpu.map_or_else(dash, |g| view! { <span>{g}</span> }.into_any())}</td>
                        </tr>
                    }
                }).collect_view()}
            </tbody>
        </table>
    }
    .into_any()
}

/// The line on an upload's page when it is in a group: "Seen 3 times — group …", linked.
#[component]
pub fn GroupLine(group: Option<GroupRef>) -> impl IntoView {
    group.map(|g| {
        let href = format!("/groups/{}", g.id);
        let name = g.frame.unwrap_or_else(|| "(no user frame)".to_string());
        let seen = times(g.count);
        view! {
            <p class="hint" data-testid="group">
                {format!("Seen {seen} — ")}
                <a href=href>"group " <code>{name}</code></a>
            </p>
        }
    })
}

#[cfg(all(test, feature = "ssr"))]
mod tests {
    use super::*;

    fn item(status: &str, regression: bool, count: u64) -> GroupItem {
        GroupItem {
            id: "9f2c".into(),
            fingerprint:
                "gpt/train.py:step | backward | 512.00 MiB–1024.00 MiB | (default settings)".into(),
            parts: GroupParts {
                frame: Some("gpt/train.py:step".into()),
                line: Some(88),
                phase: "backward".into(),
                request_bytes: 1_048_576_000,
                size_bucket: "512.00 MiB–1024.00 MiB".into(),
                alloc_conf: String::new(),
                source: "snapshot".into(),
            },
            count,
            status: status.into(),
            regression,
            first_seen: "2026-12-01 02:10 UTC".into(),
            first_seen_iso: "2026-12-01T02:10:00Z".into(),
            last_seen: "2026-12-02 02:10 UTC".into(),
            last_seen_iso: "2026-12-02T02:10:00Z".into(),
        }
    }

    fn detail(status: &str, regression: bool) -> GroupDetail {
        GroupDetail {
            group: item(status, regression, 2),
            resolved_at: (status == "resolved" || regression)
                .then(|| "2026-12-01 09:00 UTC".into()),
            reopened_at: regression.then(|| "2026-12-02 02:10 UTC".into()),
            members: vec![
                GroupMember {
                    kind: "snapshot".into(),
                    id: "a1".into(),
                    name: "nightly<gpt>".into(),
                    created: "2026-12-01 02:10 UTC".into(),
                    created_iso: "2026-12-01T02:10:00Z".into(),
                    commit: Some("4f946af".into()),
                    job_url: Some("https://ci.example/job/7".into()),
                    gpu: Some("NVIDIA H200".into()),
                },
                GroupMember {
                    kind: "oom_log".into(),
                    id: "b2".into(),
                    name: "train.log".into(),
                    created: "2026-12-02 02:10 UTC".into(),
                    created_iso: "2026-12-02T02:10:00Z".into(),
                    ..GroupMember::default()
                },
            ],
        }
    }

    fn row(g: GroupItem) -> String {
        crate::render(move || view! { <table><tbody><GroupRow g=g/></tbody></table> })
    }

    #[test]
    fn a_row_shows_the_fingerprint_count_and_links_the_group() {
        let html = row(item("open", false, 3));
        assert!(html.contains("href=\"/groups/9f2c\""), "{html}");
        assert!(html.contains("gpt/train.py:step"), "{html}");
        assert!(html.contains("line 88"), "{html}");
        assert!(html.contains(">backward<"), "{html}");
        assert!(html.contains("512.00 MiB–1024.00 MiB"), "{html}");
        assert!(html.contains(">defaults<"), "{html}");
        assert!(html.contains(">3<"), "{html}");
        assert!(html.contains("2026-12-01 02:10 UTC"), "{html}");
        assert!(html.contains("class=\"badge warn\""), "{html}");
        assert!(html.contains(">open<"), "{html}");
    }

    #[test]
    fn a_row_highlights_a_regression_and_says_resolved() {
        let html = row(item("open", true, 4));
        assert!(
            html.contains("data-testid=\"group-status\" class=\"badge bad\">regression<"),
            "{html}"
        );
        let html = row(item("resolved", true, 4));
        assert!(
            html.contains("data-testid=\"group-status\" class=\"badge good\">resolved<"),
            "{html}"
        );
    }

    #[test]
    fn an_empty_list_explains_what_a_group_is() {
        let html = crate::render(|| view! { <GroupsView groups=vec![]/> });
        assert!(html.contains("No OOM groups yet"), "{html}");
        assert!(html.contains("the same first frame of your code"), "{html}");
        assert!(!html.contains("data-testid=\"groups\""), "{html}");
    }

    #[test]
    fn the_group_page_says_the_rule_in_the_apis_words() {
        let d = detail("open", false);
        let rule = d.group.parts.rule();
        assert_eq!(
            rule,
            "Same fingerprint: the failing allocation comes from gpt/train.py:step, in the \
             backward phase, asking for 512.00 MiB–1024.00 MiB, with PyTorch's default \
             allocator settings."
        );
        let html = crate::render(move || view! { <GroupView g=d/> });
        assert!(
            html.contains(&format!("data-testid=\"rule\" class=\"range\">{rule}<")),
            "{html}"
        );
        assert!(html.contains("the first asked for 1000.00 MiB"), "{html}");
        assert!(html.contains("first taken from a snapshot"), "{html}");
    }

    #[test]
    fn the_status_says_open_resolved_or_regression_with_the_form() {
        let open = detail("open", false);
        assert_eq!(
            status_sentence(&open),
            "Not resolved yet: seen 2 times, first on 2026-12-01 02:10 UTC, last on \
             2026-12-02 02:10 UTC. Mark it resolved when a fix lands; another upload that fails \
             this way then opens it again, as a regression."
        );
        let html = crate::render(move || view! { <GroupView g=open/> });
        assert!(html.contains("action=\"/groups/9f2c/status\""), "{html}");
        assert!(
            html.contains("name=\"status\" value=\"resolved\""),
            "{html}"
        );
        assert!(html.contains(">Mark resolved<"), "{html}");

        let resolved = detail("resolved", false);
        assert!(
            status_sentence(&resolved)
                .starts_with("Marked resolved on 2026-12-01 09:00 UTC; seen 2 times"),
            "{}",
            status_sentence(&resolved)
        );
        let html = crate::render(move || view! { <GroupView g=resolved/> });
        assert!(html.contains("name=\"status\" value=\"open\""), "{html}");
        assert!(html.contains(">Reopen<"), "{html}");
        assert!(html.contains("class=\"verdict ok\""), "{html}");

        let again = detail("open", true);
        assert!(
            status_sentence(&again).starts_with(
                "A regression: it was marked resolved, then an upload failed this way again on 2026-12-02 02:10 UTC"
            ),
            "{}",
            status_sentence(&again)
        );
        let html =
            crate::render(move || view! { <GroupView g=again error=Some("no".to_string())/> });
        assert!(html.contains("class=\"verdict oom\""), "{html}");
        assert!(html.contains("class=\"error\">no<"), "{html}");
    }

    #[test]
    fn members_link_their_pages_with_their_run() {
        let d = detail("open", false);
        let html = crate::render(move || view! { <MembersView members=d.members/> });
        assert!(html.contains("href=\"/snapshots/a1\""), "{html}");
        assert!(html.contains("href=\"/logs/b2\""), "{html}");
        assert!(
            html.contains("nightly&lt;gpt&gt;"),
            "names are escaped: {html}"
        );
        assert!(
            html.contains("4f946af") && html.contains("https://ci.example/job/7"),
            "{html}"
        );
        assert!(
            html.contains("NVIDIA H200") && html.contains(">OOM log<"),
            "{html}"
        );
    }

    #[test]
    fn the_line_on_an_upload_links_its_group() {
        let g = GroupRef {
            id: "9f2c".into(),
            count: 2,
            frame: Some("gpt/train.py:step".into()),
        };
        let html = crate::render(move || view! { <GroupLine group=Some(g)/> });
        assert!(html.contains("Seen 2 times — "), "{html}");
        assert!(html.contains("href=\"/groups/9f2c\""), "{html}");
        let html = crate::render(|| view! { <GroupLine group=None/> });
        assert!(!html.contains("data-testid=\"group\""), "{html}");
    }
}
