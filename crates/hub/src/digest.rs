//! SHA-256 helpers: everything fetched is pinned or checked by SHA-256.

use std::fs::File;
use std::io::Read;
use std::path::Path;

use sha2::{Digest, Sha256};

use crate::error::HubError;

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

pub(crate) fn finish_hex(hasher: Sha256) -> String {
    hex(&hasher.finalize())
}

pub(crate) fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// Feeds the first `len` bytes of `path` into `hasher`: how a resumed download accounts for the
/// part it already has.
pub(crate) fn hash_prefix(path: &Path, len: u64, hasher: &mut Sha256) -> Result<(), HubError> {
    let file = File::open(path).map_err(HubError::io("cannot read", path))?;
    let mut reader = file.take(len);
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = reader.read(&mut buf).map_err(HubError::io("cannot read", path))?;
        if n == 0 {
            return Ok(());
        }
        hasher.update(&buf[..n]);
    }
}

/// Deletes a file whose content failed its check and builds the error that says so.
pub(crate) fn reject(path: &Path, what: &str, expected: &str, actual: &str) -> HubError {
    // Best effort: if the delete fails the temp name still never looks like a finished file.
    let _ = std::fs::remove_file(path);
    HubError::ChecksumMismatch {
        what: what.to_string(),
        expected: expected.to_string(),
        actual: actual.to_string(),
        path: path.to_path_buf(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_digest() {
        let mut h = Sha256::new();
        h.update(b"abc");
        assert_eq!(finish_hex(h), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
        assert!(is_sha256_hex("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
        assert!(!is_sha256_hex("BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD"));
        assert!(!is_sha256_hex("abc"));
    }
}
