//! Where snapshot bytes live: a blob store behind a trait, keyed by content. A local directory by
//! default; any object store (S3-compatible storage, or `file://`) through the `object_store`
//! crate for several servers sharing one store. Rows in PostgreSQL only name a blob's key.

mod local;
mod object;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use tempfile::TempPath;

pub use local::LocalDir;
pub use object::ObjectStoreBlobs;

/// Why a blob operation failed.
#[derive(Debug, thiserror::Error)]
pub enum BlobError {
    /// Local file system.
    #[error("blob store {store}: {source}")]
    Io {
        /// The store.
        store: String,
        /// The cause.
        source: std::io::Error,
    },
    /// Object storage.
    #[error("blob store {store}: {source}")]
    Object {
        /// The store.
        store: String,
        /// The cause.
        source: object_store::Error,
    },
    /// The key names no blob.
    #[error("blob store {store}: no blob {key}")]
    NotFound {
        /// The store.
        store: String,
        /// The key.
        key: String,
    },
    /// A bad `--blob-store` URL.
    #[error("--blob-store {url}: {why}")]
    BadUrl {
        /// The URL.
        url: String,
        /// What is wrong.
        why: String,
    },
}

/// A blob's bytes as a local file: the stored file itself, or a temporary download.
#[derive(Debug)]
pub enum LocalBlob {
    /// The store's own file (read only).
    Stored(PathBuf),
    /// A copy that is deleted when dropped.
    Temp(TempPath),
}

impl LocalBlob {
    /// The file.
    pub fn path(&self) -> &Path {
        match self {
            LocalBlob::Stored(p) => p,
            LocalBlob::Temp(t) => t,
        }
    }
}

/// A content-keyed store of immutable blobs.
#[async_trait]
pub trait BlobStore: Send + Sync + 'static {
    /// Stores the finished file `file` under `key`. Storing a key twice keeps one copy (the key
    /// names the content). `file` is consumed: moved into place, or uploaded and deleted.
    async fn put_file(&self, key: &str, file: TempPath) -> Result<(), BlobError>;

    /// The blob as a local file for reading; temporary files go to `scratch`.
    async fn local_copy(&self, key: &str, scratch: &Path) -> Result<LocalBlob, BlobError>;

    /// Whether the blob exists.
    async fn exists(&self, key: &str) -> Result<bool, BlobError>;

    /// The store, for logs and errors.
    fn describe(&self) -> String;
}

/// The key of content with this SHA-256: `sha256/ab/abcdef…`.
pub fn key_for(sha256: &[u8; 32]) -> String {
    let hex = hex::encode(sha256);
    format!("sha256/{}/{hex}", &hex[..2])
}

/// Opens the store `url` (`file:///PATH`, `s3://BUCKET/PREFIX`), or the local directory
/// `default_dir` when there is none.
pub fn open(url: Option<&str>, default_dir: &Path) -> Result<Arc<dyn BlobStore>, BlobError> {
    match url {
        None => Ok(Arc::new(LocalDir::new(default_dir.to_path_buf())?)),
        Some(u) => Ok(Arc::new(ObjectStoreBlobs::from_url(u)?)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_with(dir: &Path, bytes: &[u8]) -> TempPath {
        let mut f = tempfile::NamedTempFile::new_in(dir).expect("temp file");
        std::io::Write::write_all(&mut f, bytes).expect("write");
        f.into_temp_path()
    }

    /// Stores, stores again (kept once), reads back, and misses an unknown key.
    async fn round_trip(store: &dyn BlobStore, scratch: &Path) {
        let key = key_for(&[7; 32]);
        assert!(!store.exists(&key).await.expect("exists"));
        store
            .put_file(&key, temp_with(scratch, b"snapshot bytes"))
            .await
            .expect("put");
        store
            .put_file(&key, temp_with(scratch, b"snapshot bytes"))
            .await
            .expect("put again");
        assert!(store.exists(&key).await.expect("exists"));
        let local = store.local_copy(&key, scratch).await.expect("get");
        assert_eq!(
            std::fs::read(local.path()).expect("read"),
            b"snapshot bytes"
        );
        let missing = store.local_copy(&key_for(&[8; 32]), scratch).await;
        assert!(
            matches!(missing, Err(BlobError::NotFound { .. })),
            "{missing:?}"
        );
        drop(local);
        // Consumed temporaries are gone: only what the test holds is left in scratch.
        assert_eq!(std::fs::read_dir(scratch).expect("scratch").count(), 0);
    }

    #[tokio::test]
    async fn the_local_directory_store_round_trips() {
        let root = tempfile::tempdir().expect("dir");
        let scratch = tempfile::tempdir().expect("dir");
        let store = open(None, &root.path().join("blobs")).expect("open");
        round_trip(store.as_ref(), scratch.path()).await;
    }

    #[tokio::test]
    async fn the_object_store_round_trips_through_file_urls() {
        let root = tempfile::tempdir().expect("dir");
        let scratch = tempfile::tempdir().expect("dir");
        let url = format!("file://{}/objects", root.path().display());
        let store = open(Some(&url), Path::new("/unused")).expect("open");
        round_trip(store.as_ref(), scratch.path()).await;
        assert!(root.path().join("objects/sha256/07").is_dir());
    }

    #[test]
    fn bad_store_urls_are_named() {
        let err = open(Some("ftp://x/y"), Path::new("/unused"))
            .err()
            .expect("refused");
        assert!(err.to_string().contains("--blob-store ftp://x/y"), "{err}");
    }

    #[test]
    fn keys_are_content_addressed_and_fanned_out() {
        let k = key_for(&[0xab; 32]);
        assert!(k.starts_with("sha256/ab/abab"));
        assert_eq!(k.len(), "sha256/ab/".len() + 64);
    }
}
