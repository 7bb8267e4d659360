//! From input bytes to a report: tells a snapshot from an OOM log by content (never by name),
//! reads it under limits, and analyses it. One path for `oomlens analyze` and the server, so the
//! server's stored analysis is the CLI's JSON.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

use oomlens_engine::Bytes;
use oomlens_engine::analysis::{
    AnalyzeOptions, OomState, Series, analyze_exact_with, state_at_oom,
};
use oomlens_engine::report::Report;
use oomlens_engine::snapshot::{
    ReadError, ReadOptions, Snapshot, read_snapshot, read_snapshot_parallel, sniff_encoding,
};

/// Bounds on what is read.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Most bytes a snapshot may have once unpacked (what defeats a gzip bomb).
    pub max_unpacked_bytes: u64,
    /// Most bytes of a log (a log is read whole).
    pub max_log_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_unpacked_bytes: ReadOptions::default().limits.max_input_bytes,
            max_log_bytes: 256 << 20,
        }
    }
}

impl Limits {
    fn read_options(&self) -> ReadOptions {
        let mut opts = ReadOptions::default();
        opts.limits.max_input_bytes = self.max_unpacked_bytes;
        opts
    }
}

/// Where the bytes come from: a file (opened again for each pass) or bytes in memory.
pub enum Input {
    /// A file.
    File(PathBuf),
    /// Bytes already read (standard input, a request body).
    Bytes(Vec<u8>),
}

impl Input {
    fn open(&self) -> Result<Box<dyn Read + '_>, String> {
        match self {
            Input::File(p) => File::open(p)
                .map(|f| Box::new(BufReader::with_capacity(1 << 16, f)) as Box<dyn Read>)
                .map_err(|e| e.to_string()),
            Input::Bytes(b) => Ok(Box::new(b.as_slice())),
        }
    }
}

/// What the first bytes say the input is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A snapshot (pickle or JSON, maybe gzip).
    Snapshot,
    /// Text: an OOM log, perhaps.
    Text,
    /// Binary that is no snapshot; the first byte.
    Binary(u8),
    /// Nothing at all.
    Empty,
}

/// Tells the kind from the first (unpacked) bytes.
pub fn sniff(head: &[u8]) -> Kind {
    match head.first() {
        None => Kind::Empty,
        Some(_) if sniff_encoding(head).is_some() => Kind::Snapshot,
        Some(_) => {
            let probe = &head[..head.len().min(4096)];
            let text = match std::str::from_utf8(probe) {
                Ok(_) => true,
                // A multi-byte character cut at the probe's end is still text.
                Err(e) => e.error_len().is_none(),
            };
            if text && !probe.contains(&0) {
                Kind::Text
            } else {
                Kind::Binary(head[0])
            }
        }
    }
}

/// Up to 8 KiB of the input's content (inflated when it is gzip), and whether it was gzip.
fn head_of(input: &Input) -> Result<(Vec<u8>, bool), String> {
    let mut raw = Vec::new();
    input
        .open()?
        .take(8192)
        .read_to_end(&mut raw)
        .map_err(|e| e.to_string())?;
    if raw.starts_with(&[0x1f, 0x8b]) {
        let mut inflated = Vec::new();
        let gz = flate2::read::MultiGzDecoder::new(input.open()?);
        // A corrupt gzip stream is reported by the snapshot reader with its own message.
        let _ = gz.take(8192).read_to_end(&mut inflated);
        return Ok((inflated, true));
    }
    Ok((raw, false))
}

/// The kind of `input`, from its first bytes.
pub fn kind_of(input: &Input) -> Result<(Kind, bool), String> {
    let (head, gzip) = head_of(input)?;
    Ok((sniff(&head), gzip))
}

/// Reads `input` as a snapshot. The error is the reader's message, without the file name.
pub fn read_snapshot_input(input: &Input, limits: &Limits) -> Result<Snapshot, ReadError> {
    let opts = limits.read_options();
    let t0 = std::time::Instant::now();
    let snapshot = match input {
        // From a file, gzip is inflated on a second thread while the pickle is decoded.
        Input::File(p) => {
            let f = File::open(p).map_err(|e| ReadError::Io(e.to_string()))?;
            read_snapshot_parallel(f, &opts)?
        }
        Input::Bytes(bytes) => read_snapshot(bytes.as_slice(), &opts)?,
    };
    tracing::info!(elapsed = ?t0.elapsed(), "snapshot read");
    Ok(snapshot)
}

/// Reads and analyses a snapshot.
pub fn analyze_snapshot(input: &Input, limits: &Limits) -> Result<Report, ReadError> {
    let snapshot = read_snapshot_input(input, limits)?;
    let t1 = std::time::Instant::now();
    let report = Report::from_snapshot(&snapshot);
    tracing::info!(elapsed = ?t1.elapsed(), "snapshot analysed");
    Ok(report)
}

/// What the server keeps of a snapshot: the report, the full-resolution memory series of the
/// main device (for zooming the timeline), and the allocator's state at the OOM.
pub struct Analysed {
    /// The report (`oomlens analyze --json`).
    pub report: Report,
    /// Allocated/reserved after every entry of the main device.
    pub series: Option<Series>,
    /// Segments and blocks at the OOM the program did not survive.
    pub oom_state: Option<OomState>,
    /// The OOM's fingerprint, when the trace ends in one (for grouping).
    pub fingerprint: Option<oomlens_engine::fingerprint::Fingerprint>,
}

/// Reads and analyses a snapshot, keeping the series and the state at the OOM as well.
pub fn analyze_snapshot_full(input: &Input, limits: &Limits) -> Result<Analysed, ReadError> {
    let snapshot = read_snapshot_input(input, limits)?;
    let t1 = std::time::Instant::now();
    let options = AnalyzeOptions {
        series: true,
        ..AnalyzeOptions::default()
    };
    let (analysis, series) = analyze_exact_with(&snapshot, &options);
    let oom_state = analysis.oom.as_ref().and_then(|_| state_at_oom(&snapshot));
    let fingerprint = analysis
        .oom
        .as_ref()
        .and_then(|_| oomlens_engine::fingerprint::of_snapshot(&snapshot));
    let report = Report::from_analysis(&snapshot, analysis);
    tracing::info!(elapsed = ?t1.elapsed(), "snapshot analysed with its series");
    Ok(Analysed {
        report,
        series,
        oom_state,
        fingerprint,
    })
}

/// Analyses an OOM log: its text must hold at least one OOM message.
pub fn analyze_log_text(text: &str) -> Result<Report, String> {
    let report = Report::from_log(text);
    if report.oom_messages.is_empty() {
        return Err(
            "no out-of-memory message found (and not a snapshot): expected a PyTorch, JAX or TensorFlow OOM error text"
                .to_string(),
        );
    }
    Ok(report)
}

/// Reads a log whole (up to the limit) and analyses it.
pub fn analyze_log(input: &Input, limits: &Limits) -> Result<Report, String> {
    let mut bytes = Vec::new();
    input
        .open()?
        .take(limits.max_log_bytes + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > limits.max_log_bytes {
        return Err(format!(
            "the log is larger than {} (cut it to the part around the error)",
            Bytes(limits.max_log_bytes)
        ));
    }
    analyze_log_text(&String::from_utf8_lossy(&bytes))
}

/// Analyses a snapshot or a log, told apart by content. The error is one line without the name.
pub fn analyze(input: &Input, limits: &Limits) -> Result<Report, String> {
    let (head, gzip) = head_of(input)?;
    match sniff(&head) {
        Kind::Snapshot => match analyze_snapshot(input, limits) {
            Ok(r) => Ok(r),
            // JSON that is no snapshot may still be a log (a JSON-lines log, say).
            Err(ReadError::NotSnapshot(why)) if !gzip && std::str::from_utf8(&head).is_ok() => {
                analyze_log(input, limits)
                    .map_err(|_| format!("not a PyTorch memory snapshot: {why}"))
            }
            Err(e) => Err(e.to_string()),
        },
        Kind::Text if !gzip => analyze_log(input, limits),
        Kind::Text => Err("gzip of text: unpack it first (gunzip) to analyze a log".to_string()),
        Kind::Empty => Err("the file is empty".to_string()),
        Kind::Binary(b) => Err(format!(
            "neither a PyTorch memory snapshot (pickle, pickle.gz or JSON) nor an OOM log (starts with byte 0x{b:02x})"
        )),
    }
}

/// The display name of a path given on the command line (`<stdin>` for `-`).
pub fn display_name(path: &Path) -> String {
    if path.as_os_str() == "-" {
        "<stdin>".to_string()
    } else {
        path.display().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sniffs_by_content() {
        assert_eq!(sniff(b"\x80\x04\x95"), Kind::Snapshot);
        assert_eq!(sniff(b"  {\"segments\": []}"), Kind::Snapshot);
        assert_eq!(sniff(b"Traceback (most recent call last):"), Kind::Text);
        assert_eq!(sniff(b"\x00\x01binary"), Kind::Binary(0));
        assert_eq!(sniff(b""), Kind::Empty);
    }

    #[test]
    fn a_gzip_bomb_stops_at_the_unpacked_limit() {
        // 64 MiB of zeros in a pickle BINBYTES8 frame, gzip'd to ~64 KiB; limit 1 MiB.
        let mut raw = vec![0x80, 0x04, 0x8e];
        raw.extend_from_slice(&(64u64 << 20).to_le_bytes());
        raw.resize(raw.len() + (64 << 20), 0);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, &raw).expect("gzip in memory");
        let bytes = gz.finish().expect("gzip in memory");
        assert!(bytes.len() < 1 << 20);
        let limits = Limits {
            max_unpacked_bytes: 1 << 20,
            ..Limits::default()
        };
        let err = analyze(&Input::Bytes(bytes), &limits).expect_err("over the limit");
        assert!(err.contains("limit"), "{err}");
    }

    #[test]
    fn a_text_without_an_oom_is_refused() {
        let err = analyze(&Input::Bytes(b"hello world\n".to_vec()), &Limits::default())
            .expect_err("no OOM");
        assert!(err.contains("no out-of-memory message"), "{err}");
    }
}
