//! Blobs in object storage through the `object_store` crate: S3-compatible services
//! (`s3://BUCKET/PREFIX`, credentials and endpoint from `AWS_*`), or `file:///PATH`.

use std::path::Path;

use async_trait::async_trait;
use futures_util::StreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, WriteMultipart};
use tempfile::TempPath;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{BlobError, BlobStore, LocalBlob};

/// Upload part size (S3 needs at least 5 MiB per part but the last).
const PART: usize = 16 << 20;

/// A store on any `object_store` backend.
pub struct ObjectStoreBlobs {
    store: Box<dyn ObjectStore>,
    prefix: ObjectPath,
    url: String,
}

impl ObjectStoreBlobs {
    /// Opens `url`; S3 options come from the `AWS_*` environment variables.
    pub fn from_url(url: &str) -> Result<ObjectStoreBlobs, BlobError> {
        let bad = |why: String| BlobError::BadUrl {
            url: url.to_string(),
            why,
        };
        let parsed = url::Url::parse(url).map_err(|e| bad(e.to_string()))?;
        if !matches!(parsed.scheme(), "s3" | "file") {
            return Err(bad("expected file:///PATH or s3://BUCKET/PREFIX".into()));
        }
        if parsed.scheme() == "file" {
            std::fs::create_dir_all(parsed.path()).map_err(|e| bad(e.to_string()))?;
        }
        let options = std::env::vars()
            .filter(|(k, _)| k.starts_with("AWS_"))
            .map(|(k, v)| (k.to_ascii_lowercase(), v));
        let (store, prefix) =
            object_store::parse_url_opts(&parsed, options).map_err(|e| bad(e.to_string()))?;
        Ok(ObjectStoreBlobs {
            store,
            prefix,
            url: url.to_string(),
        })
    }

    fn location(&self, key: &str) -> ObjectPath {
        key.split('/')
            .fold(self.prefix.clone(), |p, part| p.clone().join(part))
    }

    fn err(&self, source: object_store::Error) -> BlobError {
        BlobError::Object {
            store: self.url.clone(),
            source,
        }
    }

    fn io(&self, source: std::io::Error) -> BlobError {
        BlobError::Io {
            store: self.url.clone(),
            source,
        }
    }
}

#[async_trait]
impl BlobStore for ObjectStoreBlobs {
    async fn put_file(&self, key: &str, file: TempPath) -> Result<(), BlobError> {
        if self.exists(key).await? {
            return Ok(());
        }
        let location = self.location(key);
        let upload = self
            .store
            .put_multipart(&location)
            .await
            .map_err(|e| self.err(e))?;
        let mut writer = WriteMultipart::new_with_chunk_size(upload, PART);
        let mut f = tokio::fs::File::open(&file).await.map_err(|e| self.io(e))?;
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = f.read(&mut buf).await.map_err(|e| self.io(e))?;
            if n == 0 {
                break;
            }
            // At most a few parts in flight: the file is never held in memory whole.
            writer.wait_for_capacity(4).await.map_err(|e| self.err(e))?;
            writer.write(&buf[..n]);
        }
        writer.finish().await.map_err(|e| self.err(e))?;
        drop(file);
        tracing::debug!(key, store = %self.url, "blob uploaded");
        Ok(())
    }

    async fn local_copy(&self, key: &str, scratch: &Path) -> Result<LocalBlob, BlobError> {
        let location = self.location(key);
        let got = match self.store.get(&location).await {
            Ok(g) => g,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(BlobError::NotFound {
                    store: self.url.clone(),
                    key: key.to_string(),
                });
            }
            Err(e) => return Err(self.err(e)),
        };
        let tmp = tempfile::NamedTempFile::new_in(scratch).map_err(|e| self.io(e))?;
        let (std_file, path) = tmp.into_parts();
        let mut out = tokio::fs::File::from_std(std_file);
        let mut stream = got.into_stream();
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| self.err(e))?;
            out.write_all(&chunk).await.map_err(|e| self.io(e))?;
        }
        out.flush().await.map_err(|e| self.io(e))?;
        Ok(LocalBlob::Temp(path))
    }

    async fn exists(&self, key: &str) -> Result<bool, BlobError> {
        match self.store.head(&self.location(key)).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(self.err(e)),
        }
    }

    fn describe(&self) -> String {
        self.url.clone()
    }
}
