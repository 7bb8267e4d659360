//! `oomlens analyze FILE [--json]`: a snapshot or an OOM log, told apart by content, into a report.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use oomlens_engine::report::{self, Report};
use oomlens_engine::snapshot::{
    ReadError, ReadOptions, read_snapshot, read_snapshot_parallel, sniff_encoding,
};

use super::{Failure, emit};

/// Logs larger than this are refused (a log is read whole; snapshots are streamed).
const MAX_LOG_BYTES: u64 = 256 << 20;

/// Where the bytes come from: a file (opened again for each pass) or standard input (read once).
enum Input {
    File(std::path::PathBuf),
    Stdin(Vec<u8>),
}

impl Input {
    fn name(&self) -> String {
        match self {
            Input::File(p) => p.display().to_string(),
            Input::Stdin(_) => "<stdin>".to_string(),
        }
    }

    fn open(&self) -> Result<Box<dyn Read + '_>, Failure> {
        match self {
            Input::File(p) => File::open(p)
                .map(|f| Box::new(BufReader::with_capacity(1 << 16, f)) as Box<dyn Read>)
                .map_err(|e| Failure::BadInput(format!("{}: {e}", p.display()))),
            Input::Stdin(b) => Ok(Box::new(b.as_slice())),
        }
    }
}

/// What the first bytes say the input is.
#[derive(Debug, PartialEq, Eq)]
enum Kind {
    Snapshot,
    Text,
    Binary(u8),
    Empty,
}

fn sniff(head: &[u8]) -> Kind {
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

/// Reads up to 8 KiB of the input's content (inflated when it is gzip).
fn head_of(input: &Input) -> Result<(Vec<u8>, bool), Failure> {
    let mut raw = Vec::new();
    input
        .open()?
        .take(8192)
        .read_to_end(&mut raw)
        .map_err(|e| Failure::BadInput(format!("{}: {e}", input.name())))?;
    if raw.starts_with(&[0x1f, 0x8b]) {
        let mut inflated = Vec::new();
        let gz = flate2::read::MultiGzDecoder::new(input.open()?);
        // A corrupt gzip stream is reported by the snapshot reader with its own message.
        let _ = gz.take(8192).read_to_end(&mut inflated);
        return Ok((inflated, true));
    }
    Ok((raw, false))
}

pub fn run(path: &Path, json: bool, top: usize) -> Result<(), Failure> {
    let input = if path.as_os_str() == "-" {
        let mut buf = Vec::new();
        std::io::stdin()
            .read_to_end(&mut buf)
            .map_err(|e| Failure::BadInput(format!("<stdin>: {e}")))?;
        Input::Stdin(buf)
    } else {
        if path.is_dir() {
            return Err(Failure::BadInput(format!(
                "{}: is a directory, expected a snapshot or an OOM log file",
                path.display()
            )));
        }
        Input::File(path.to_path_buf())
    };
    let name = input.name();
    let (head, gzip) = head_of(&input)?;
    let report = match sniff(&head) {
        Kind::Snapshot => match analyze_snapshot(&input) {
            Ok(r) => r,
            // JSON that is no snapshot may still be a log (a JSON-lines log, say).
            Err(ReadError::NotSnapshot(why)) if !gzip && sniff_text(&head) => analyze_log(&input)
                .map_err(|_| {
                Failure::BadInput(format!("{name}: not a PyTorch memory snapshot: {why}"))
            })?,
            Err(e) => return Err(Failure::BadInput(format!("{name}: {e}"))),
        },
        Kind::Text if !gzip => {
            analyze_log(&input).map_err(|why| Failure::BadInput(format!("{name}: {why}")))?
        }
        Kind::Text => {
            return Err(Failure::BadInput(format!(
                "{name}: gzip of text: unpack it first (gunzip) to analyze a log"
            )));
        }
        Kind::Empty => return Err(Failure::BadInput(format!("{name}: the file is empty"))),
        Kind::Binary(b) => {
            return Err(Failure::BadInput(format!(
                "{name}: neither a PyTorch memory snapshot (pickle, pickle.gz or JSON) nor an OOM log (starts with byte 0x{b:02x})"
            )));
        }
    };
    let report = report.with_source_name(&name);
    let text = if json {
        let mut s =
            serde_json::to_string_pretty(&report).map_err(|e| Failure::Internal(e.into()))?;
        s.push('\n');
        s
    } else {
        report::render_text(&report, top)
    };
    emit(&text)
}

fn sniff_text(head: &[u8]) -> bool {
    std::str::from_utf8(head).is_ok()
}

fn analyze_snapshot(input: &Input) -> Result<Report, ReadError> {
    let t0 = std::time::Instant::now();
    let opts = ReadOptions::default();
    let snapshot = match input {
        // From a file, gzip is inflated on a second thread while the pickle is decoded.
        Input::File(p) => {
            let f = File::open(p).map_err(|e| ReadError::Io(e.to_string()))?;
            read_snapshot_parallel(f, &opts)?
        }
        Input::Stdin(bytes) => read_snapshot(bytes.as_slice(), &opts)?,
    };
    tracing::info!(elapsed = ?t0.elapsed(), "snapshot read");
    let t1 = std::time::Instant::now();
    let report = Report::from_snapshot(&snapshot);
    tracing::info!(elapsed = ?t1.elapsed(), "snapshot analysed");
    Ok(report)
}

fn analyze_log(input: &Input) -> Result<Report, String> {
    let mut bytes = Vec::new();
    input
        .open()
        .map_err(|e| match e {
            Failure::BadInput(m) => m,
            other => format!("{other:?}"),
        })?
        .take(MAX_LOG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| e.to_string())?;
    if bytes.len() as u64 > MAX_LOG_BYTES {
        return Err(format!(
            "the log is larger than {} (cut it to the part around the error)",
            oomlens_engine::Bytes(MAX_LOG_BYTES)
        ));
    }
    let text = String::from_utf8_lossy(&bytes);
    let report = Report::from_log(&text);
    if report.oom_messages.is_empty() {
        return Err(
            "no out-of-memory message found (and not a snapshot): expected a PyTorch, JAX or TensorFlow OOM error text"
                .to_string(),
        );
    }
    Ok(report)
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
}
