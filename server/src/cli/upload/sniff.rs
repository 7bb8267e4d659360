//! What the file to upload is, from its first bytes: a snapshot (gzip, pickle or JSON) goes to
//! `/api/v1/snapshots`, text (an OOM log) to `/api/v1/oom-logs`; anything else is refused here.

/// How many bytes of the file `sniff` looks at.
pub const HEAD_LEN: usize = 64 * 1024;

/// What the head of the file says it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// gzip, a pickle (protocol 2+) or a JSON object: a memory snapshot.
    Snapshot,
    /// Valid UTF-8 text: an OOM log or traceback.
    Log,
}

impl Kind {
    /// The content type the server expects for this kind.
    pub fn content_type(self) -> &'static str {
        match self {
            Kind::Snapshot => "application/octet-stream",
            Kind::Log => "text/plain; charset=utf-8",
        }
    }
}

/// Tells a snapshot from a log by content, never by name; the error says what the bytes are.
///
/// Deliberately narrower than the engine's reader: only `{` counts as JSON and only 0x80 as a
/// pickle, because CI logs often start with `[rank0]:` or `(` and must go to the log endpoint.
pub fn sniff(head: &[u8]) -> Result<Kind, String> {
    let body = head.strip_prefix(b"\xef\xbb\xbf").unwrap_or(head);
    let first_visible = body.iter().copied().find(|b| !b.is_ascii_whitespace());
    match (head.first(), first_visible) {
        (None, _) => Err("the file is empty".into()),
        (Some(0x1f), _) if head.get(1) == Some(&0x8b) => Ok(Kind::Snapshot),
        (Some(0x80), _) => Ok(Kind::Snapshot),
        (_, Some(b'{')) => Ok(Kind::Snapshot),
        (Some(&b), _) => {
            let text = match std::str::from_utf8(head) {
                Ok(_) => true,
                // A multi-byte character cut at the end of the head is still text.
                Err(e) => e.error_len().is_none(),
            };
            if text && !head.contains(&0) {
                Ok(Kind::Log)
            } else {
                Err(format!(
                    "neither a snapshot (gzip, pickle, JSON) nor a text log (starts with byte 0x{b:02x})"
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshots_by_magic_and_first_character() {
        assert_eq!(sniff(&[0x1f, 0x8b, 8, 0]), Ok(Kind::Snapshot));
        assert_eq!(sniff(&[0x80, 4, 0x95]), Ok(Kind::Snapshot));
        assert_eq!(sniff(b"{\"segments\": []}"), Ok(Kind::Snapshot));
        assert_eq!(sniff(b"\n  {\"segments\": []}"), Ok(Kind::Snapshot));
        assert_eq!(sniff(b"\xef\xbb\xbf{}"), Ok(Kind::Snapshot));
    }

    #[test]
    fn text_is_a_log_even_when_it_starts_like_an_old_pickle_or_a_list() {
        assert_eq!(
            sniff(b"[rank0]: torch.OutOfMemoryError: CUDA out of memory."),
            Ok(Kind::Log)
        );
        assert_eq!(sniff(b"(pid=12) Traceback"), Ok(Kind::Log));
        assert_eq!(
            sniff("Tried to allocate 2.00 GiB — é".as_bytes()),
            Ok(Kind::Log)
        );
    }

    #[test]
    fn a_character_cut_at_the_end_of_the_head_is_still_text() {
        let mut head = b"oom ".to_vec();
        head.extend_from_slice(&"é".as_bytes()[..1]);
        assert_eq!(sniff(&head), Ok(Kind::Log));
    }

    #[test]
    fn binary_and_empty_files_are_refused() {
        assert_eq!(sniff(b""), Err("the file is empty".into()));
        let e = sniff(&[0x7f, b'E', b'L', b'F', 0, 0]).expect_err("an ELF file is no log");
        assert!(e.contains("0x7f"), "{e}");
        assert!(sniff(&[b'a', 0xff, 0xfe, b'b']).is_err());
        // Only gzip's two-byte magic counts, not 0x1f alone.
        assert!(sniff(&[0x1f, 0x00]).is_err());
    }

    #[test]
    fn content_types() {
        assert_eq!(Kind::Snapshot.content_type(), "application/octet-stream");
        assert!(Kind::Log.content_type().starts_with("text/plain"));
    }
}
