//! `/snapshots`: the team's post-mortems, newest first, with a name search and a status filter
//! (a GET form) and the API's cursor paging; on the unfiltered first page, the team's newest OOM
//! logs below them.

use leptos::prelude::*;
use leptos_router::hooks::use_query_map;

use crate::api::{ListQuery, OomLogItem, SnapshotList};
use crate::backend::{list_oom_logs, list_snapshots};
use crate::components::Layout;
use crate::format::{bytes, query};

/// The list page.
#[component]
pub fn SnapshotsPage() -> impl IntoView {
    let params = use_query_map();
    let list_query = move || {
        let p = params.read();
        let get = |k: &str| p.get(k).filter(|v| !v.trim().is_empty());
        ListQuery {
            name: get("name"),
            status: get("status"),
            cursor: get("cursor"),
        }
    };
    let list = Resource::new(list_query, list_snapshots);
    let logs = Resource::new(|| (), |()| list_oom_logs());
    view! {
        <Layout>
            <Suspense fallback=|| view! { <p>"Loading…"</p> }>
                {move || Suspend::new(async move {
                    let q = list_query();
                    let first_page = q == ListQuery::default();
                    // The logs are an extra: if they do not load, the list still shows.
                    let logs = logs.await.unwrap_or_default();
                    match list.await {
                        Ok(l) => view! {
                            <SnapshotsView query=q list=l/>
                            {(first_page && !logs.is_empty()).then(|| view! { <OomLogsView logs=logs/> })}
                        }.into_any(),
                        Err(e) => view! {
                            <h1>"Post-mortems"</h1>
                            <p class="error" role="alert">{e.to_string()}</p>
                        }.into_any(),
                    }
                })}
            </Suspense>
        </Layout>
    }
}

/// The filters, the table and the paging links.
#[component]
pub fn SnapshotsView(query: ListQuery, list: SnapshotList) -> impl IntoView {
    let name = query.name.clone().unwrap_or_default();
    let status = query.status.clone().unwrap_or_default();
    let option = |value: &'static str, label: &'static str| {
        let selected = status == value;
        view! { <option value=value selected=selected>{label}</option> }
    };
    let next = list.next_cursor.as_deref().map(|c| {
        format!(
            "/snapshots{}",
            self::query(&[
                ("name", query.name.as_deref()),
                ("status", query.status.as_deref()),
                ("cursor", Some(c)),
            ])
        )
    });
    let first = query.cursor.is_some().then(|| {
        format!(
            "/snapshots{}",
            self::query(&[
                ("name", query.name.as_deref()),
                ("status", query.status.as_deref())
            ])
        )
    });
    let empty = list.items.is_empty();
    let filtered = query.name.is_some() || query.status.is_some();
    view! {
        <h1>"Post-mortems"</h1>
        <form method="get" action="/snapshots" class="filters" role="search">
            <label for="q-name">"Name"</label>
            <input id="q-name" name="name" type="search" value=name placeholder="exact upload name"/>
            <label for="q-status">"Status"</label>
            <select id="q-status" name="status">
                {option("", "any")}
                {option("ready", "ready")}
                {option("pending", "pending")}
                {option("failed", "failed")}
            </select>
            <button type="submit">"Filter"</button>
        </form>
        {if empty {
            let text = if filtered {
                "No post-mortem matches these filters."
            } else {
                "No post-mortems yet: upload a snapshot, or send one from CI with oomlens upload."
            };
            view! { <p class="empty" data-testid="no-snapshots">{text}</p> }.into_any()
        } else {
            view! {
                <table class="data" data-testid="snapshots">
                    <thead>
                        <tr>
                            <th scope="col">"Name"</th>
                            <th scope="col">"Uploaded"</th>
                            <th scope="col">"GPU"</th>
                            <th scope="col" class="num">"Peak reserved"</th>
                            <th scope="col">"OOM"</th>
                            <th scope="col">"Status"</th>
                            <th scope="col">"Labels"</th>
                        </tr>
                    </thead>
                    <tbody>
                        {list.items.into_iter().map(|s| {
                            let href = format!("/snapshots/{}", s.id);
                            let oom = match s.oom {
                                Some(true) => view! { <span class="badge bad">"OOM"</span> }.into_any(),
                                Some(false) => view! { <span class="badge good">"no"</span> }.into_any(),
                                None => view! { <span class="muted">"–"</span> }.into_any(),
                            };
                            let status_class = format!("status {}", s.status);
                            view! {
                                <tr data-id=s.id.clone()>
                                    <td><a href=href>{s.name}</a></td>
                                    <td><time datetime=s.created_iso>{s.created}</time></td>
                                    <td>{s.gpu.unwrap_or_else(|| "–".into())}</td>
                                    <td class="num">{s.peak_reserved_bytes.map_or_else(|| "–".to_string(), bytes)}</td>
                                    <td>{oom}</td>
                                    <td><span class=status_class>{s.status}</span></td>
                                    <td class="labels">
                                        {s.labels.into_iter().map(|l| view! { <span class="label">{l}</span> }).collect_view()}
                                    </td>
                                </tr>
                            }
                        }).collect_view()}
                    </tbody>
                </table>
            }.into_any()
        }}
        <nav class="paging">
            {first.map(|h| view! { <a href=h>"← Newest"</a> })}
            {next.map(|h| view! { <a href=h rel="next" data-testid="next-page">"Older →"</a> })}
        </nav>
    }
}

/// The team's newest OOM logs.
#[component]
pub fn OomLogsView(logs: Vec<OomLogItem>) -> impl IntoView {
    view! {
        <h2>"OOM logs"</h2>
        <table class="data" data-testid="oom-logs">
            <thead>
                <tr>
                    <th scope="col">"Name"</th>
                    <th scope="col">"Uploaded"</th>
                    <th scope="col" class="num">"Size"</th>
                </tr>
            </thead>
            <tbody>
                {logs.into_iter().map(|l| view! {
                    <tr data-id=l.id.clone()>
                        <td><a href=format!("/logs/{}", l.id)>{l.name}</a></td>
                        <td><time datetime=l.created_iso>{l.created}</time></td>
                        <td class="num">{bytes(l.size_bytes)}</td>
                    </tr>
                }).collect_view()}
            </tbody>
        </table>
    }
}

#[cfg(all(test, feature = "ssr"))]
mod tests {
    use super::*;
    use crate::api::SnapshotItem;

    fn item(id: &str, name: &str, oom: Option<bool>, status: &str) -> SnapshotItem {
        SnapshotItem {
            id: id.into(),
            name: name.into(),
            created: "2026-12-02 18:29 UTC".into(),
            created_iso: "2026-12-02T18:29:00Z".into(),
            gpu: Some("NVIDIA H200".into()),
            peak_reserved_bytes: Some(10_605_297_664),
            oom,
            status: status.into(),
            labels: vec!["nightly".into(), "gpt".into()],
        }
    }

    #[test]
    fn rows_show_sizes_status_labels_and_links() {
        let list = SnapshotList {
            items: vec![
                item("a1", "gpt-step", Some(true), "ready"),
                item("b2", "bert<&>", None, "pending"),
            ],
            next_cursor: Some("123_abc".into()),
        };
        let q = ListQuery {
            name: None,
            status: Some("ready".into()),
            cursor: None,
        };
        let html = crate::render(move || view! { <SnapshotsView query=q list=list/> });
        assert!(html.contains("href=\"/snapshots/a1\""), "{html}");
        assert!(html.contains("9.88 GiB"), "{html}");
        assert!(html.contains("NVIDIA H200"), "{html}");
        assert!(html.contains(">OOM<"), "{html}");
        assert!(
            html.contains("bert&lt;&amp;&gt;"),
            "names are escaped: {html}"
        );
        assert!(html.contains(">nightly<"), "{html}");
        assert!(
            html.contains("/snapshots?status=ready&amp;cursor=123_abc"),
            "the next page keeps the filters: {html}"
        );
        assert!(html.contains("<option value=\"ready\" selected"), "{html}");
    }

    #[test]
    fn oom_logs_link_to_their_pages() {
        let logs = vec![OomLogItem {
            id: "7c1a".into(),
            name: "train.log".into(),
            created: "2026-12-02 18:29 UTC".into(),
            created_iso: "2026-12-02T18:29:00Z".into(),
            size_bytes: 1566,
        }];
        let html = crate::render(move || view! { <OomLogsView logs=logs/> });
        assert!(html.contains("href=\"/logs/7c1a\""), "{html}");
        assert!(
            html.contains(">train.log<") && html.contains("1.53 KiB"),
            "{html}"
        );
    }

    #[test]
    fn an_empty_list_says_so() {
        let list = SnapshotList {
            items: vec![],
            next_cursor: None,
        };
        let html =
            crate::render(move || view! { <SnapshotsView query=ListQuery::default() list=list/> });
        assert!(html.contains("No post-mortems yet"), "{html}");
        assert!(!html.contains("next-page"), "{html}");
    }
}
