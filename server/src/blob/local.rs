//! The default blob store: files in a local directory, moved into place by rename.

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use tempfile::TempPath;

use super::{BlobError, BlobStore, LocalBlob};

/// Blobs as files under one directory (`ROOT/sha256/ab/abcdef…`).
#[derive(Debug)]
pub struct LocalDir {
    root: PathBuf,
}

impl LocalDir {
    /// A store rooted at `root` (created if missing).
    pub fn new(root: PathBuf) -> Result<LocalDir, BlobError> {
        std::fs::create_dir_all(&root).map_err(|source| BlobError::Io {
            store: root.display().to_string(),
            source,
        })?;
        Ok(LocalDir { root })
    }

    fn path_of(&self, key: &str) -> PathBuf {
        self.root.join(key)
    }

    fn io(&self, source: std::io::Error) -> BlobError {
        BlobError::Io {
            store: self.describe(),
            source,
        }
    }
}

#[async_trait]
impl BlobStore for LocalDir {
    async fn put_file(&self, key: &str, file: TempPath) -> Result<(), BlobError> {
        let dest = self.path_of(key);
        if tokio::fs::try_exists(&dest).await.map_err(|e| self.io(e))? {
            return Ok(()); // same key, same content: the temporary file is dropped
        }
        if let Some(dir) = dest.parent() {
            tokio::fs::create_dir_all(dir)
                .await
                .map_err(|e| self.io(e))?;
        }
        let dest2 = dest.clone();
        tokio::task::spawn_blocking(move || match file.persist(&dest2) {
            Ok(()) => Ok(()),
            // Another file system: copy through a temporary file next to the destination.
            Err(e) if e.error.raw_os_error() == Some(nix::libc::EXDEV) => {
                let dir = dest2.parent().unwrap_or(Path::new("."));
                let mut tmp = tempfile::NamedTempFile::new_in(dir)?;
                std::io::copy(&mut std::fs::File::open(&e.path)?, tmp.as_file_mut())?;
                tmp.as_file().sync_all()?;
                tmp.persist(&dest2).map(|_| ()).map_err(|e| e.error)
            }
            Err(e) => Err(e.error),
        })
        .await
        .map_err(|e| self.io(std::io::Error::other(e)))?
        .map_err(|e| self.io(e))?;
        tracing::debug!(key, "blob stored");
        Ok(())
    }

    async fn local_copy(&self, key: &str, _scratch: &Path) -> Result<LocalBlob, BlobError> {
        let p = self.path_of(key);
        if tokio::fs::try_exists(&p).await.map_err(|e| self.io(e))? {
            Ok(LocalBlob::Stored(p))
        } else {
            Err(BlobError::NotFound {
                store: self.describe(),
                key: key.to_string(),
            })
        }
    }

    async fn exists(&self, key: &str) -> Result<bool, BlobError> {
        tokio::fs::try_exists(self.path_of(key))
            .await
            .map_err(|e| self.io(e))
    }

    fn describe(&self) -> String {
        self.root.display().to_string()
    }
}
