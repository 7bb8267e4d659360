//! `/logs/{id}`: a stored OOM log. For each out-of-memory message the engine found in it: the
//! verdict in one sentence with its numbers (requested, free, capacity, allocated, reserved but
//! unallocated, as the message gives them), the figures, the engine's diagnosis and advice, and
//! the traceback's frames. Another team's log is the 404 view.

use leptos::prelude::*;
use leptos_router::hooks::use_params_map;

use crate::api::{OomLog, OomMessageView};
use crate::backend::load_oom_log;
use crate::components::{Layout, found_or_missing};
use crate::format::bytes;
use crate::pages::groups::GroupLine;

/// The OOM log page.
#[component]
pub fn OomLogPage() -> impl IntoView {
    let params = use_params_map();
    let id = move || params.read().get("id").unwrap_or_default();
    let log = Resource::new(id, load_oom_log);
    view! {
        <Layout>
            {found_or_missing(
                log,
                "OOM log",
                |log| view! { <OomLogView log=log/> }.into_any(),
                || view! { <MissingLogView/> }.into_any(),
            )}
        </Layout>
    }
}

/// No such log in the team (another team's is the same: nothing of it is shown).
#[component]
pub fn MissingLogView() -> impl IntoView {
    view! {
        <h1 data-testid="not-found">"No such OOM log"</h1>
        <p>"Your team has no OOM log with this id. " <a href="/upload">"Upload one"</a></p>
    }
}

/// One stored log, from its DTO.
#[component]
pub fn OomLogView(log: OomLog) -> impl IntoView {
    let messages = log.analysis.oom_messages;
    let count = (messages.len() > 1).then(|| {
        view! {
            <p class="hint">{format!("This log holds {} out-of-memory messages, in order:", messages.len())}</p>
        }
    });
    view! {
        <p class="crumbs"><a href="/snapshots">"Post-mortems"</a></p>
        <h1>{log.name}</h1>
        <p class="meta">
            <span>"OOM log uploaded " <time datetime=log.created_iso>{log.created}</time></span>
            <span>{bytes(log.size_bytes)} " of text"</span>
        </p>
        <GroupLine group=log.group/>
        {count}
        {messages.into_iter().map(|m| view! { <MessageView m=m/> }).collect_view()}
    }
}

/// How a framework name of the analysis reads.
fn framework_name(f: &str) -> &str {
    match f {
        "pytorch" => "PyTorch",
        "pytorch_hip" => "PyTorch (ROCm)",
        "pytorch_cuda_malloc_async" => "PyTorch (cudaMallocAsync)",
        "pytorch_cuda_error" => "CUDA",
        "jax" => "JAX/XLA",
        "tensorflow" => "TensorFlow",
        other => other,
    }
}

/// The verdict of one message in one sentence, with the numbers it has.
pub fn log_verdict_sentence(m: &OomMessageView) -> String {
    let device = m
        .gpu_index
        .map(|g| format!(" on GPU {g}"))
        .unwrap_or_default();
    let who = framework_name(&m.framework);
    let mut s = match m.requested_bytes {
        Some(r) => format!("Out of memory{device}: {who} asked for {}", bytes(r)),
        None => format!("Out of memory{device} ({who}; the message gives no request size)"),
    };
    let held: Vec<String> = [
        m.allocated_by_pytorch_bytes
            .map(|a| format!("{} was allocated", bytes(a))),
        m.reserved_unallocated_bytes
            .map(|r| format!("{} reserved but unallocated", bytes(r))),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !held.is_empty() {
        s.push_str(&format!(" while {}", held.join(" and ")));
    }
    match (m.free_bytes, m.total_capacity_bytes) {
        (Some(f), Some(t)) => {
            s.push_str(&format!("; the GPU had {} free of {}", bytes(f), bytes(t)))
        }
        (Some(f), None) => s.push_str(&format!("; {} was free", bytes(f))),
        (None, Some(t)) => s.push_str(&format!("; the GPU holds {}", bytes(t))),
        (None, None) => {}
    }
    if let Some(a) = m.allowed_bytes {
        s.push_str(&format!(", and {} was allowed for this process", bytes(a)));
    }
    s.push('.');
    s
}

/// One OOM message: verdict, figures, diagnosis, traceback.
#[component]
fn MessageView(m: OomMessageView) -> impl IntoView {
    let sentence = log_verdict_sentence(&m);
    let figures: Vec<(&'static str, &'static str, u64)> = [
        ("Requested", "requested", m.requested_bytes),
        ("Capacity", "capacity", m.total_capacity_bytes),
        ("Free", "free", m.free_bytes),
        ("Allowed", "allowed", m.allowed_bytes),
        ("Allocated", "allocated", m.allocated_by_pytorch_bytes),
        (
            "Reserved but unallocated",
            "reserved-unallocated",
            m.reserved_unallocated_bytes,
        ),
        ("Reserved in total", "reserved", m.reserved_total_bytes),
        (
            "In use by this process",
            "process-in-use",
            m.process_in_use_bytes,
        ),
    ]
    .into_iter()
    .filter_map(|(label, id, v)| v.map(|v| (label, id, v)))
    .collect();
    let others = (!m.other_processes.is_empty()).then(|| {
        let list = m
            .other_processes
            .iter()
            .map(|p| format!("process {} has {}", p.pid, bytes(p.in_use_bytes)))
            .collect::<Vec<_>>()
            .join(", ");
        view! { <p class="hint">"Other processes on the GPU: " {list} "."</p> }
    });
    let diagnosis = m.diagnosis.clone().map(|d| {
        view! {
            <section class="diagnosis" data-testid="diagnosis">
                <h2>"Diagnosis " <span class="badge warn">{d.kind.replace('_', " ")}</span></h2>
                <p>{d.explanation}</p>
            </section>
        }
    });
    let frames = (!m.frames.is_empty()).then(|| {
        view! {
            <section>
                <h2>"Traceback " <span class="hint">"(most recent call last)"</span></h2>
                <ol class="stack" data-testid="frames">
                    {m.frames.into_iter().map(|f| view! {
                        <li>
                            <code>{format!("{}:{}", f.file, f.line)}</code> " in " <code>{f.function}</code>
                            {f.code.map(|c| view! { <pre class="src">{c}</pre> })}
                        </li>
                    }).collect_view()}
                </ol>
            </section>
        }
    });
    let origin = format!(
        "line {} of the log{}{}",
        m.line,
        m.exception.map(|e| format!(", {e}")).unwrap_or_default(),
        if m.dialect.is_empty() {
            String::new()
        } else {
            format!(" ({})", m.dialect)
        }
    );
    view! {
        <article class="oom-message">
            <section class="verdict oom" data-testid="verdict">
                <h2>"Ran out of memory"</h2>
                <p class="sentence">{sentence}</p>
                <p class="where">{origin}</p>
            </section>
            {(!figures.is_empty()).then(|| view! {
                <dl class="stats">
                    {figures.into_iter().map(|(label, id, v)| view! {
                        <div><dt>{label}</dt><dd class="num" data-testid=id>{bytes(v)}</dd></div>
                    }).collect_view()}
                </dl>
            })}
            {others}
            {diagnosis}
            {frames}
            <details class="message">
                <summary>"The message as printed"</summary>
                <pre>{m.text}</pre>
            </details>
        </article>
    }
}

#[cfg(all(test, feature = "ssr"))]
mod tests {
    use super::*;
    use crate::api::{FrameView, LogAnalysisView, LogDiagnosisView};

    fn log() -> OomLog {
        OomLog {
            id: "7c1a".into(),
            name: "train.log".into(),
            created: "2026-12-02 18:29 UTC".into(),
            created_iso: "2026-12-02T18:29:00Z".into(),
            size_bytes: 1566,
            analysis: LogAnalysisView {
                oom_messages: vec![OomMessageView {
                    framework: "pytorch".into(),
                    dialect: "torch>=2.1".into(),
                    text: "CUDA out of memory. Tried to allocate 1000.00 MiB.".into(),
                    line: 11,
                    requested_bytes: Some(1_048_576_000),
                    total_capacity_bytes: Some(150_109_106_995),
                    free_bytes: Some(49_703_509_033),
                    allowed_bytes: Some(13_700_945_674),
                    allocated_by_pytorch_bytes: Some(12_380_243_231),
                    reserved_unallocated_bytes: Some(299_378_934),
                    gpu_index: Some(0),
                    frames: vec![FrameView {
                        file: "/opt/job/train.py".into(),
                        line: 194,
                        function: "run_case".into(),
                        code: Some("loss.backward()".into()),
                    }],
                    exception: Some("torch.OutOfMemoryError".into()),
                    diagnosis: Some(LogDiagnosisView {
                        kind: "fragmentation".into(),
                        explanation: "285.51 MiB of the reservation was unallocated.".into(),
                    }),
                    ..OomMessageView::default()
                }],
            },
            group: None,
        }
    }

    #[test]
    fn the_verdict_has_the_message_numbers_as_pytorch_prints_them() {
        let html = crate::render(|| view! { <OomLogView log=log()/> });
        assert!(
            html.contains("Out of memory on GPU 0: PyTorch asked for 1000.00 MiB while 11.53 GiB was allocated and 285.51 MiB reserved but unallocated; the GPU had 46.29 GiB free of 139.80 GiB, and 12.76 GiB was allowed for this process."),
            "{html}"
        );
        assert!(
            html.contains("data-testid=\"requested\" class=\"num\">1000.00 MiB<"),
            "{html}"
        );
        let verdict = html.find("data-testid=\"verdict\"").expect("a verdict");
        let diagnosis = html.find("data-testid=\"diagnosis\"").expect("a diagnosis");
        assert!(verdict < diagnosis, "verdict first");
    }

    #[test]
    fn the_diagnosis_and_the_traceback_are_shown() {
        let html = crate::render(|| view! { <OomLogView log=log()/> });
        assert!(html.contains("fragmentation"), "{html}");
        assert!(
            html.contains("285.51 MiB of the reservation was unallocated."),
            "{html}"
        );
        assert!(html.contains("/opt/job/train.py:194"), "{html}");
        assert!(
            html.contains("run_case") && html.contains("loss.backward()"),
            "{html}"
        );
        assert!(html.contains("torch.OutOfMemoryError"), "{html}");
    }

    #[test]
    fn a_message_without_numbers_still_has_a_sentence() {
        let m = OomMessageView {
            framework: "pytorch_cuda_error".into(),
            ..OomMessageView::default()
        };
        assert_eq!(
            log_verdict_sentence(&m),
            "Out of memory (CUDA; the message gives no request size)."
        );
    }

    #[test]
    fn a_missing_log_says_so() {
        let html = crate::render(|| view! { <MissingLogView/> });
        assert!(html.contains("No such OOM log"), "{html}");
    }
}
