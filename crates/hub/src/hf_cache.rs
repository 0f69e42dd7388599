//! The Hugging Face cache layout, shared with Python's huggingface_hub so either side reuses what
//! the other downloaded:
//!
//! ```text
//! <hf_cache>/models--<org>--<name>/
//!     blobs/<etag>                        file contents, named by ETag (git sha1, or LFS sha256)
//!     snapshots/<commit>/<path>           relative symlinks into blobs/
//!     refs/<revision>                     the commit a branch or tag pointed to
//! <hf_cache>/.locks/models--<org>--<name>/<etag>.lock
//! ```

use std::fs;
use std::path::{Path, PathBuf};

use crate::error::HubError;

pub(crate) struct RepoCache {
    hf_cache: PathBuf,
    folder: String,
}

/// A full commit id; anything else given as a revision is a branch or tag looked up in `refs/`.
pub(crate) fn is_commit_hash(s: &str) -> bool {
    s.len() == 40 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// ETags become file names; only accept ones that cannot escape `blobs/`.
pub(crate) fn is_safe_etag(s: &str) -> bool {
    !s.is_empty() && !s.starts_with('.') && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

/// Repo file names become paths under `snapshots/<commit>/`; refuse ones that would leave it.
pub(crate) fn is_safe_repo_path(s: &str) -> bool {
    !s.is_empty() && !s.starts_with('/') && !s.contains('\\') && s.split('/').all(|seg| !matches!(seg, "" | "." | ".."))
}

/// huggingface_hub's `_normalize_etag`: `W/"abc"` and `"abc"` both mean `abc`.
pub(crate) fn normalize_etag(etag: &str) -> String {
    let etag = etag.trim();
    etag.strip_prefix("W/").unwrap_or(etag).trim_matches('"').to_string()
}

impl RepoCache {
    pub(crate) fn new(hf_cache: &Path, repo: &str) -> RepoCache {
        RepoCache { hf_cache: hf_cache.to_path_buf(), folder: format!("models--{}", repo.replace('/', "--")) }
    }

    pub(crate) fn root(&self) -> PathBuf {
        self.hf_cache.join(&self.folder)
    }

    pub(crate) fn snapshot_dir(&self, commit: &str) -> PathBuf {
        self.root().join("snapshots").join(commit)
    }

    pub(crate) fn blob_path(&self, etag: &str) -> PathBuf {
        self.root().join("blobs").join(etag)
    }

    pub(crate) fn lock_path(&self, etag: &str) -> PathBuf {
        self.hf_cache.join(".locks").join(&self.folder).join(format!("{etag}.lock"))
    }

    /// The commit `revision` resolves to without asking the network, if the cache knows it.
    pub(crate) fn local_commit(&self, revision: &str) -> Option<String> {
        if is_commit_hash(revision) {
            return Some(revision.to_string());
        }
        let commit = fs::read_to_string(self.root().join("refs").join(revision)).ok()?;
        let commit = commit.trim();
        is_commit_hash(commit).then(|| commit.to_string())
    }

    /// Records `revision -> commit`, written atomically so a concurrent reader never sees half
    /// a hash; left alone when already right (the cache may be read-only).
    pub(crate) fn write_ref(&self, revision: &str, commit: &str) -> Result<(), HubError> {
        if revision == commit || self.local_commit(revision).as_deref() == Some(commit) {
            return Ok(());
        }
        let path = self.root().join("refs").join(revision);
        let dir = path.parent().unwrap_or(&path);
        fs::create_dir_all(dir).map_err(HubError::io("cannot create", dir))?;
        let tmp = path.with_file_name(format!(
            ".{}.{}.tmp",
            path.file_name().unwrap_or_default().display(),
            std::process::id()
        ));
        fs::write(&tmp, commit).map_err(HubError::io("cannot write", &tmp))?;
        fs::rename(&tmp, &path).map_err(HubError::io("cannot rename", &tmp))
    }

    /// Points `snapshots/<commit>/<file>` at `blobs/<etag>` with a relative link, so the cache
    /// keeps working when moved or mounted elsewhere.
    pub(crate) fn link(&self, commit: &str, file: &str, etag: &str) -> Result<PathBuf, HubError> {
        let pointer = self.snapshot_dir(commit).join(file);
        let dir = pointer.parent().unwrap_or(&pointer);
        fs::create_dir_all(dir).map_err(HubError::io("cannot create", dir))?;
        let depth = file.split('/').count() + 1; // up from the file's directory to the repo folder
        let target = format!("{}blobs/{etag}", "../".repeat(depth));
        // A stale pointer (from a failed run or a link to a removed blob) is replaced.
        if fs::symlink_metadata(&pointer).is_ok() {
            fs::remove_file(&pointer).map_err(HubError::io("cannot replace", &pointer))?;
        }
        make_link(Path::new(&target), &self.blob_path(etag), &pointer)?;
        Ok(pointer)
    }
}

#[cfg(unix)]
fn make_link(relative_target: &Path, _blob: &Path, pointer: &Path) -> Result<(), HubError> {
    std::os::unix::fs::symlink(relative_target, pointer).map_err(HubError::io("cannot create symlink", pointer))
}

#[cfg(not(unix))]
fn make_link(_relative_target: &Path, blob: &Path, pointer: &Path) -> Result<(), HubError> {
    // Without dependable symlinks (Windows without developer mode), huggingface_hub copies too.
    fs::copy(blob, pointer).map(|_| ()).map_err(HubError::io("cannot copy blob to", pointer))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_checks() {
        let c = RepoCache::new(Path::new("/c"), "org/name");
        assert_eq!(c.root(), PathBuf::from("/c/models--org--name"));
        assert_eq!(c.lock_path("e1"), PathBuf::from("/c/.locks/models--org--name/e1.lock"));
        assert_eq!(normalize_etag("W/\"abc\""), "abc");
        assert_eq!(normalize_etag("\"abc\""), "abc");
        assert!(is_safe_etag("0123abc-_."));
        assert!(!is_safe_etag("../x") && !is_safe_etag("a/b") && !is_safe_etag(""));
        assert!(is_safe_repo_path("a/b.json") && !is_safe_repo_path("../x") && !is_safe_repo_path("/x"));
        assert!(!is_safe_repo_path("a//b") && !is_safe_repo_path("a/./b"));
        assert!(is_commit_hash(&"a".repeat(40)) && !is_commit_hash("main"));
    }
}
